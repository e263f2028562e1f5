package gitstore

import (
	"context"
	"errors"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
)

// How a carried writer confirms its landing. Its request is gone from the
// poll's listing: a leader folded it (its update landed, in the push that
// deleted it) or deleted it as stale (a newer render of the workload
// landed first; see fold). The listing cannot tell these apart, and
// before, the writer fetched the branch's tip again (its tree, at depth 1)
// and planned its update once more to find out: on a loaded Gitea that
// fetch took up to 30 s after the landing. The branch's history tells
// them apart for far less: a leader commits each request it folds with
// the trailer requestTrailer naming the request's commit, which no other
// commit can name. So the writer fetches the commits the branch gained
// since the tip it knew, without their trees (filter tree:0: a few
// hundred bytes a commit, in one request, on the session its listing
// used over http), and looks for that trailer. Found, the update landed
// and the write returns at once; not found (the request was dropped as
// stale, or a leader of an older version carried it), or on a server that
// does not filter, it plans again as before, which tells.

// requestTrailer, on a commit a leader made of a request, names the
// request's commit.
const requestTrailer = "Render-Request"

// confirmLimit bounds the commits a carried writer reads back from the
// branch's new tip, looking for its own: a leader carries one commit per
// request, and a burst of writers at once makes a few dozen.
const confirmLimit = 1000

// errNoFilter is a server that cannot send commits without their trees.
var errNoFilter = errors.New("the server does not filter fetches")

// carried reports whether the branch, at tip (as the listing that found
// this writer's request gone showed it), holds the commit a leader made of
// the request: one of the commits since the tip this writer fetched last
// names it (requestTrailer).
func (g *groupCommitter) carried(ctx context.Context, tip plumbing.Hash) (bool, error) {
	cs, err := g.r.commitsSince(ctx, tip, g.r.tip(), confirmLimit)
	if err != nil {
		return false, err
	}
	mark := "\n" + requestTrailer + ": " + g.published.String() + "\n"
	for _, c := range cs {
		if strings.Contains(c.Message, mark) {
			return true, nil
		}
	}
	return false, nil
}

// foldedMessage is the message of the commit a leader makes of the request
// at commit req: its writer's message, and the trailer naming the request.
func foldedMessage(m statestore.Message, req plumbing.Hash) statestore.Message {
	m.Trailers = append(append([]statestore.Trailer(nil), m.Trailers...), statestore.Trailer{Key: requestTrailer, Value: req.String()})
	return m
}

// commitsSince fetches, in one request and without trees or blobs, the
// commits of the branch's first-parent chain from tip back to known (which
// the server has: the tip this clone fetched last), at most limit of them,
// newest first. They go to a scratch store: the clone keeps what it had.
func (r *remoteRepo) commitsSince(ctx context.Context, tip, known plumbing.Hash, limit int) ([]*object.Commit, error) {
	scratch := memory.NewStorage()
	var have []plumbing.Hash
	if !known.IsZero() {
		have = []plumbing.Hash{known}
	}
	if err := r.fetchFiltered(ctx, []plumbing.Hash{tip}, have, scratch); err != nil {
		return nil, err
	}
	var out []*object.Commit
	for h := tip; !h.IsZero() && h != known && len(out) < limit; {
		c, err := object.GetCommit(scratch, h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			break // the server's have: the rest is history this clone saw
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return out, nil
}
