package gitstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
)

// A turn is one push of a group-commit write (see groupCommitter): what
// the writer wants to land, and what it hands over instead when the
// server's refs, read at the start of the push, show that it cannot.
//
// Main is the branch's move (if any) and the deletions that must go with
// it: the requests it folded (their writers are done the moment the
// branch holds their updates, so the two must be one atomic change) and
// this writer's own request. Sweep deletes requests the writer found
// stale; each goes only while the server still holds it as read, and a
// sweep never holds the turn up. Request, when set, builds this writer's
// request: it is sent alone, in place of Main, when the advertisement
// already shows Main's refs moved (the writer lost before sending
// anything, and hands its update over with the same push). A writer with
// no request to hand over sends nothing then.
//
// So a writer that meets no other pushes exactly its branch, as a plain
// push would, and pays nothing for the group; a writer that loses sees it
// in the advertisement of the push it makes anyway, and that push
// publishes its request.
type turn struct {
	main    []*packp.Command
	sweep   []*packp.Command
	request func() (*packp.Command, error)
}

// turnOutcome is what a turn's push did.
type turnOutcome int

const (
	// turnLanded: Main landed, whole.
	turnLanded turnOutcome = iota
	// turnPublished: Main could not land; the request was created.
	turnPublished
	// turnLost: Main could not land and nothing else was published: no
	// request to hand over, or the request's ref was taken (another render
	// of the workload waits there: turnResult.taken).
	turnLost
)

func (o turnOutcome) String() string {
	return [...]string{"landed", "lost, request published", "lost"}[o]
}

// turnResult is a turn's outcome, and the request it published.
type turnResult struct {
	outcome turnOutcome
	request *packp.Command
	// taken: the request's ref holds another writer's request.
	taken bool
	// swept are the stale requests deleted with Main.
	swept int
}

// pushTurn makes t's push (see turn). A server that cannot take part in
// group commit (no atomic pushes or ref deletion) is errNoGroup; a push
// the server refused for its own reasons is ErrRejected, with its words.
func (r *remoteRepo) pushTurn(ctx context.Context, ov *overlay, t turn) (turnResult, error) {
	var res turnResult
	var server strings.Builder
	var sent []*packp.Command
	err := r.retry(ctx, func() error {
		server.Reset()
		var err error
		res, sent, err = r.sendTurn(ctx, ov, t, &server)
		return err
	})
	if err != nil && !errors.Is(err, errPushRefused) {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return res, cutOff(err)
		}
		return res, err
	}
	if err != nil {
		// Refused after it was sent: a lost race (a ref moved between the
		// advertisement and the update) or the server's own refusal
		// (a hook), which the refs tell apart.
		refs, lerr := r.list(ctx)
		if lerr != nil {
			return res, fmt.Errorf("%w (and listing the refs failed: %v)", err, lerr)
		}
		asked := len(sent) == 1 && len(t.main) > 0 && sent[0] != t.main[0] // the request, alone
		for _, c := range sent {
			if refs[c.Name] != c.Old {
				// Another writer moved it first: the branch (lost), or
				// the request's ref (another render of the workload).
				return turnResult{outcome: turnLost, taken: asked}, nil
			}
		}
		msg := strings.TrimSpace(err.Error())
		if said := serverMessage(server.String()); said != "" {
			msg += "; the server said: " + said
		}
		if asked {
			return res, fmt.Errorf("%w: the server refused the pending-update ref: %s", errNoGroup, RedactURL(msg))
		}
		return res, fmt.Errorf("%w: %s", statestore.ErrRejected, RedactURL(msg))
	}
	// The clone keeps only objects the server is known to have: those of
	// a push that moved a ref to a new object.
	for _, c := range sent {
		if !c.New.IsZero() {
			if err := ov.flush(); err != nil {
				return res, err
			}
			break
		}
	}
	for _, c := range sent {
		r.track(c)
	}
	return res, nil
}

// errPushRefused is a push the server answered with a refusal.
var errPushRefused = errors.New("push refused")

// sendTurn is one try of pushTurn: it reads the server's refs, picks what
// to send, and sends it. sent is what went (or had gone, by an earlier try
// whose answer was lost) to the server.
func (r *remoteRepo) sendTurn(ctx context.Context, ov *overlay, t turn, progress io.Writer) (turnResult, []*packp.Command, error) {
	ep, err := transport.NewEndpoint(r.cfg.URL)
	if err != nil {
		return turnResult{}, nil, err
	}
	ep.CaBundle, ep.InsecureSkipTLS = r.cfg.CABundle, r.cfg.InsecureSkipTLS
	cli, err := client.NewClient(ep)
	if err != nil {
		return turnResult{}, nil, err
	}
	sess, err := cli.NewReceivePackSession(ep, r.cfg.Auth)
	if err != nil {
		return turnResult{}, nil, err
	}
	defer sess.Close()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) && r.sawRefs() {
		return turnResult{}, nil, errNoAdvertisement
	}
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return turnResult{}, nil, err
	}
	refs := map[plumbing.ReferenceName]plumbing.Hash{}
	if adv != nil {
		all, _ := adv.AllReferences()
		for name, ref := range all {
			refs[name] = ref.Hash()
		}
	}
	group := adv != nil && adv.Capabilities.Supports(capability.ReportStatus) &&
		adv.Capabilities.Supports(capability.Atomic) && adv.Capabilities.Supports(capability.DeleteRefs)

	// Main, as the server holds it now: already so (an earlier try that
	// lost its answer), still possible, or overtaken.
	done, possible := len(t.main) > 0, true
	for _, c := range t.main {
		done = done && refs[c.Name] == c.New
		possible = possible && refs[c.Name] == c.Old
	}
	if done {
		return turnResult{outcome: turnLanded}, t.main, nil
	}
	if possible {
		send := append([]*packp.Command(nil), t.main...)
		swept := 0
		for _, c := range t.sweep {
			if refs[c.Name] == c.Old {
				send = append(send, c)
				swept++
			}
		}
		if len(send) == 0 {
			return turnResult{outcome: turnLanded}, nil, nil
		}
		if (len(send) > 1 || touchesRequests(send)) && !group {
			return turnResult{}, nil, errNoGroup
		}
		if err := r.receivePack(ctx, sess, adv, ov, send, len(send) > 1, progress); err != nil {
			return turnResult{}, send, err
		}
		return turnResult{outcome: turnLanded, swept: swept}, send, nil
	}
	// Main cannot land: hand the update over, in this same push.
	if t.request == nil {
		return turnResult{outcome: turnLost}, nil, nil
	}
	if !group {
		return turnResult{}, nil, errNoGroup
	}
	req, err := t.request()
	if err != nil {
		return turnResult{}, nil, err
	}
	switch refs[req.Name] {
	case req.New:
		return turnResult{outcome: turnPublished, request: req}, []*packp.Command{req}, nil
	case req.Old:
	default:
		return turnResult{outcome: turnLost, taken: true}, nil, nil
	}
	if err := r.receivePack(ctx, sess, adv, ov, []*packp.Command{req}, false, progress); err != nil {
		return turnResult{}, []*packp.Command{req}, err
	}
	return turnResult{outcome: turnPublished, request: req}, []*packp.Command{req}, nil
}

// receivePack sends cmds (atomically when asked) in the open session,
// with the overlay's new objects, and reads the server's report. A refusal
// in the report is errPushRefused; the session's errors are returned as
// they are.
func (r *remoteRepo) receivePack(ctx context.Context, sess transport.ReceivePackSession, adv *packp.AdvRefs, ov *overlay, cmds []*packp.Command, atomic bool, progress io.Writer) error {
	req := packp.NewReferenceUpdateRequest()
	if adv != nil {
		req = packp.NewReferenceUpdateRequestFromCapabilities(adv.Capabilities)
		if adv.Capabilities.Supports(capability.Sideband64k) {
			_ = req.Capabilities.Set(capability.Sideband64k)
		} else if adv.Capabilities.Supports(capability.Sideband) {
			_ = req.Capabilities.Set(capability.Sideband)
		}
		req.Progress = progress
	}
	if atomic {
		_ = req.Capabilities.Set(capability.Atomic)
	}
	req.Commands = cmds
	// Once sent, the push is the server's: it lands whole or not at all,
	// so the render's cancellation must not cut it off half-way (see
	// send). It still ends at the retry deadline.
	ctx, cancel := driver.Finishing(ctx)
	defer cancel()
	var rs *packp.ReportStatus
	var err error
	if len(ov.added) == 0 && allDeletes(cmds) {
		rs, err = sess.ReceivePack(ctx, req)
	} else {
		rd, wr := io.Pipe()
		req.Packfile = rd
		done := make(chan error, 1)
		go func() {
			_, err := packfile.NewEncoder(wr, ov.mem, false).Encode(ov.added, 0)
			done <- wr.CloseWithError(err)
		}()
		rs, err = sess.ReceivePack(ctx, req)
		if err != nil {
			_ = rd.Close()
		}
		if derr := <-done; derr != nil && err == nil {
			return derr
		}
	}
	if rs != nil {
		if rerr := rs.Error(); rerr != nil {
			return fmt.Errorf("%w: %v", errPushRefused, rerr)
		}
	}
	if err != nil {
		if rs != nil && len(rs.CommandStatuses) > 0 {
			return fmt.Errorf("%w: %v", errPushRefused, err)
		}
		return err
	}
	if rs == nil && adv != nil && adv.Capabilities.Supports(capability.ReportStatus) {
		return errors.New("the server sent no report of the push")
	}
	return nil
}
