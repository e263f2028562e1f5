// Package gitstore is the git state store backend, written with go-git.
//
// Writes go through driver.Write, the one write loop (write.go): a
// snapshot is the branch's tip read into an overlay of new objects, and a
// commit is a push that names the tip it was planned on, so a lost race is
// a refused push and the loop plans again on the new tip. A file:// URL
// (or a plain local path) is written in place: new objects go into the
// bare repository and the branch moves with git's lock-file protocol, so
// processes on one machine share a branch with no server and no clone.
//
// Group commit (pending.go, group.go). When many writers share a branch on
// a server, a writer that loses the race publishes its update as a request
// commit on a ref of its own (refs/render/pending/...), and whoever wins
// next folds every waiting request into the same atomic push, one commit
// per workload, and deletes the requests it carried. A request holds the
// Update itself, so folding it is what its owner would do on a retry; a
// writer whose request was folded is done, and one that gives up withdraws
// its request first.
//
// The partial clone (lazy.go). A large store is not fetched whole: the
// first fetch brings the tip commit and the top folders, and every other
// tree and blob is fetched by id the first time a render looks at it, a
// folder level at a time for every path a lookup hint names. Whether a
// store is large is judged from that first fetch (a file in .render that
// render writes into large stores, the load summary's counts), whoever
// wrote the tip.
//
// The load summary (load.go). How many resources each destination holds,
// which the spread strategy weighs, is kept in the names of empty files in
// .render/load/, stamped with the id of the index folder they were counted
// from; a reader trusts only counts whose stamp matches, and every write
// brings them up to date, so a render reads two trees instead of every
// placement entry.
package gitstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

// Config describes one git state store.
type Config struct {
	// Name identifies the store in messages, e.g. "GitStateStore/default".
	Name string
	// URL is the repository: file:///abs/path, /abs/path, https://, http://, ssh:// or user@host:path.
	URL string
	// Branch defaults to "main".
	Branch string
	// Path is the folder inside the repository that holds the destinations.
	Path string
	// Auth is the go-git auth method for remote URLs (nil for none).
	Auth transport.AuthMethod
	// CABundle adds trusted roots for https; InsecureSkipTLS skips
	// verification altogether (an explicit opt-in the caller warns about).
	CABundle        []byte
	InsecureSkipTLS bool
	// AuthorName and AuthorEmail sign the commits (defaults "render", "render@localhost").
	AuthorName, AuthorEmail string
	// MaxAttempts, when positive, also bounds how often an update is
	// re-planned after losing a race to another writer. By default only the
	// render's retry deadline bounds it: a busy branch is never a failure
	// while there is time left.
	MaxAttempts int
	// RetryDeadline is the retry budget used when the caller's context
	// carries no render-wide deadline (wait.WithRetryDeadline); it
	// bounds waits for an unreachable remote and for a busy branch alike.
	// A sidecar wants minutes; an engineer at a terminal wants seconds.
	RetryDeadline time.Duration
	// Signer, when set, signs every commit render puts on the branch (its
	// own and those it folds for other writers); a signing failure fails
	// the write before anything is pushed.
	Signer Signer
	// Now returns the commit time (default time.Now); tests pin it.
	Now func() time.Time
	// Warn, when set, is told about waits the user should know of, such as a
	// branch lock left by a writer that died.
	Warn func(msg string, args ...any)
	// Debug, when set, is told what helps to explain a slow render, such
	// as a prefetch that failed (see statestore.Prefetch).
	Debug func(msg string, args ...any)
}

// Store is a git state store. It is safe for one goroutine at a time; a
// Store kept between renders (watch mode) keeps its clone and fetches
// incrementally.
type Store struct {
	// Writer gives the store Apply and ApplyAll: driver.Write, the one
	// write loop, over this store's backend (write.go). ApplyAll writes
	// several workloads' updates as one commit, each planned on top of the
	// ones before it, with the first update's message.
	driver.Writer
	cfg    Config
	prefix string
	repo   repository
}

// repository is how a Store reads and moves one branch: in place for a
// local repository, through a clone and a push for a remote one.
type repository interface {
	// head returns the branch tip (zero if the branch or repository is
	// empty) and an object store to read it from and write new objects to.
	// refresh asks for the newest tip, not a cached one.
	head(ctx context.Context, refresh bool) (plumbing.Hash, storer.EncodedObjectStorer, error)
	// publish moves the branch from old to commit, or fails with errStale
	// when someone else moved it first.
	publish(ctx context.Context, objects storer.EncodedObjectStorer, old, commit plumbing.Hash) error
	close() error
	// server is the branch's server, for what only a remote repository
	// has: refs besides the branch (group commit's requests, proposal
	// branches) and partial reads. It is nil for a repository on this
	// machine.
	server() *remoteRepo
}

// errStale means the branch moved between reading and publishing.
var errStale = errors.New("branch moved")

var _ statestore.Store = (*Store)(nil)

// New opens the store described by cfg. It does not contact a remote; the
// first Records or Apply does.
func New(cfg Config) (*Store, error) {
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	if cfg.AuthorName == "" {
		cfg.AuthorName = "render"
	}
	if cfg.AuthorEmail == "" {
		cfg.AuthorEmail = "render@localhost"
	}
	if cfg.RetryDeadline <= 0 {
		cfg.RetryDeadline = wait.DefaultRetryDeadline
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = RedactURL(cfg.URL)
	}
	if !plumbing.NewBranchReferenceName(cfg.Branch).IsBranch() || strings.ContainsAny(cfg.Branch, " ~^:?*[\\") {
		return nil, fmt.Errorf("%s: invalid branch %q", cfg.Name, cfg.Branch)
	}
	prefix := strings.Trim(cfg.Path, "/")
	if prefix == "." {
		prefix = ""
	}
	if prefix != "" {
		if err := layout.ValidPath(prefix); err != nil {
			return nil, fmt.Errorf("%s: path: %w", cfg.Name, err)
		}
	}
	s := &Store{cfg: cfg, prefix: prefix}
	s.Writer = driver.Writer{Backend: backend{s}, Batch: true,
		Policy: driver.RetryPolicy{Limit: time.Second, MaxAttempts: cfg.MaxAttempts, Deadline: cfg.RetryDeadline}}
	if dir, ok := LocalPath(cfg.URL); ok {
		s.repo = &localRepo{dir: dir, branch: plumbing.NewBranchReferenceName(cfg.Branch), warn: cfg.Warn}
	} else {
		s.repo = newRemoteRepo(cfg)
	}
	return s, nil
}

// String names the store and its branch, with no credentials.
func (s *Store) String() string {
	return fmt.Sprintf("%s (%s, branch %s)", s.cfg.Name, RedactURL(s.cfg.URL), s.cfg.Branch)
}

// Close releases the clone.
func (s *Store) Close() error { return s.repo.close() }

func (s *Store) wrap(op string, err error) error {
	var se *statestore.StoreError
	if errors.As(err, &se) {
		return err
	}
	return &statestore.StoreError{Store: s.String(), Op: op, Err: err}
}

// Records reads every workload record on the branch's newest tip. It
// reads the whole store: renders look records up by path instead (see
// bookkeeping.ReadFacts); tools and tests use this.
func (s *Store) Records(ctx context.Context) ([]statestore.Record, error) {
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := statestore.ReadRecords(snap)
	if err != nil {
		return nil, s.wrap("read records", err)
	}
	return recs, nil
}

// Snapshot returns a read-only view of the branch's newest tip. Given
// back to a write (Update.View), it is the tip the write's first attempt
// plans on.
func (s *Store) Snapshot(ctx context.Context) (statestore.Snapshot, error) {
	a, err := s.readTip(s.Policy.Context(ctx), true)
	if err != nil {
		return nil, s.wrap("read", err)
	}
	return a, nil
}

var _ statestore.Store = (*Store)(nil)

// Capabilities declares, besides the batches its Writer commits as one
// commit, what the store fetched from its server (FetchStats).
func (s *Store) Capabilities() statestore.Capabilities {
	c := s.Writer.Capabilities()
	c.FetchStats = s.FetchStats
	return c
}

// debug logs msg at debug level, when the store has a Debug logger: what
// each attempt of a write did, and how long it took.
func (s *Store) debug(msg string, args ...any) {
	if s.cfg.Debug != nil {
		s.cfg.Debug(msg, args...)
	}
}

// signature is this store's author and committer, now.
func (s *Store) signature() object.Signature {
	return object.Signature{Name: s.cfg.AuthorName, Email: s.cfg.AuthorEmail, When: s.cfg.Now()}
}

// author is u's author, or this store's identity; now.
func (s *Store) author(u statestore.Update) object.Signature {
	sig := s.signature()
	if u.Author != nil {
		sig.Name, sig.Email = u.Author.Name, u.Author.Email
	}
	return sig
}

// commit writes a commit of tree on parent, by author; this store commits it.
func (s *Store) commit(objs storer.EncodedObjectStorer, parent, tree plumbing.Hash, msg statestore.Message, author object.Signature) (plumbing.Hash, error) {
	if r := s.repo.server(); r != nil && r.isLarge() {
		// Tell the next writer to read this store partially (lazy.go).
		msg.Trailers = append(append([]statestore.Trailer(nil), msg.Trailers...), statestore.Trailer{Key: largeTrailer, Value: largeValue})
	}
	c := &object.Commit{Author: author, Committer: s.signature(), Message: msg.String(), TreeHash: tree}
	if c.Message == "\n" {
		c.Message = "render: update\n"
	}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	if s.cfg.Signer != nil {
		if err := sign(s.cfg.Signer, c); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	obj := objs.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return objs.SetEncodedObject(obj)
}
