// Package memstore is a state store in memory with conditional writes, as
// S3's are: every object has a version, and a commit succeeds only while
// every object and folder its plan read is as it was read. It implements
// nothing but statestore's Backend, so the conformance suite
// (statestore/storetest) runs the shared write loop on every `go test`,
// with no server. Tests use it; render does not.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
)

// Mem is one store's content, shared by every client of it.
type Mem struct {
	mu      sync.Mutex
	objs    map[string]object
	version uint64 // bumped by every commit
	commits int
}

type object struct {
	data    []byte
	version uint64
}

// New returns an empty store.
func New() *Mem { return &Mem{objs: map[string]object{}} }

// Commits counts the commits that changed the store.
func (m *Mem) Commits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits
}

// Client is one writer's view of a Mem, as a separate render process
// would have: a statestore.Store.
type Client struct {
	driver.Writer
	mem     *Mem
	name    string
	missing bool
}

var _ statestore.Store = (*Client)(nil)

// Open returns a new client of m.
func (m *Mem) Open(name string, policy driver.RetryPolicy) *Client {
	c := &Client{mem: m, name: name}
	c.Writer = driver.Writer{Backend: backend{c}, Policy: policy, Batch: true}
	return c
}

// Missing returns a client of a store that does not exist: every read
// fails with statestore.ErrNotFound.
func Missing(name string) *Client {
	c := New().Open(name, driver.RetryPolicy{})
	c.missing = true
	return c
}

// String names the store.
func (c *Client) String() string { return "memory store " + c.name }

// Close releases nothing.
func (c *Client) Close() error { return nil }

// Snapshot reads the store's current content.
func (c *Client) Snapshot(ctx context.Context) (statestore.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, driver.Wrap(c.String(), "read", err)
	}
	if c.missing {
		return nil, driver.Wrap(c.String(), "read", fmt.Errorf("store does not exist: %w", statestore.ErrNotFound))
	}
	return c.mem.snapshot(), nil
}

// Records reads every workload record.
func (c *Client) Records(ctx context.Context) ([]statestore.Record, error) {
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := statestore.ReadRecords(snap)
	return recs, driver.Wrap(c.String(), "read records", err)
}

// snapshot is a consistent copy of the store that remembers what was read
// of it, for the conditional commit.
type snapshot struct {
	objs    map[string]object
	version uint64
	mu      sync.Mutex
	read    map[string]uint64 // path -> version seen (0: absent)
	listed  map[string]string // folder -> its listing as seen
}

func (m *Mem) snapshot() *snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	objs := make(map[string]object, len(m.objs))
	for p, o := range m.objs {
		objs[p] = o
	}
	return &snapshot{objs: objs, version: m.version, read: map[string]uint64{}, listed: map[string]string{}}
}

func (s *snapshot) seen(p string) object {
	o := s.objs[p]
	s.mu.Lock()
	s.read[p] = o.version
	s.mu.Unlock()
	return o
}

// Capabilities: a memory snapshot holds what it shows, and logs nothing.
// Like git and OCI (and unlike S3's flat keys), the memory store holds a
// path as a file or a folder, never both (TreeShaped), so the
// conformance suite checks the planner's refusal of a path that is in
// the way on every go test.
func (s *snapshot) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{TreeShaped: true}
}

// Revision is the store's version the snapshot shows.
func (s *snapshot) Revision() string { return fmt.Sprintf("v%d", s.version) }

// revision is a committer's Revision: the version its snapshot shows.
func revision(s statestore.Snapshot) string { return s.(*snapshot).Revision() }

// Compare reports whether p exists and holds data.
func (s *snapshot) Compare(p string, data []byte) (bool, bool, error) {
	o := s.seen(p)
	if o.version == 0 {
		return false, false, nil
	}
	return true, string(o.data) == string(data), nil
}

// ReadFile returns p's content.
func (s *snapshot) ReadFile(p string) ([]byte, error) {
	o := s.seen(p)
	if o.version == 0 {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	return slices.Clone(o.data), nil
}

// List returns every file below dir, sorted.
func (s *snapshot) List(dir string) ([]string, error) {
	dir = strings.Trim(dir, "/")
	out := listing(s.objs, dir)
	s.mu.Lock()
	s.listed[dir] = strings.Join(out, "\n")
	s.mu.Unlock()
	return out, nil
}

func listing(objs map[string]object, dir string) []string {
	var out []string
	for p := range objs {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// backend is a Client's side of driver.Write.
type backend struct{ c *Client }

func (b backend) String() string { return b.c.String() }

func (b backend) Begin(ctx context.Context, us []statestore.Update) (driver.Committer, error) {
	if b.c.missing {
		return driver.Committer{}, fmt.Errorf("store does not exist: %w", statestore.ErrNotFound)
	}
	c := committer{b.c.mem}
	return driver.Committer{Snapshot: c.Snapshot, Commit: c.Commit, Revision: revision}, nil
}

type committer struct{ mem *Mem }

// Snapshot is the store as it is now, whatever view the caller read: a
// read of memory costs nothing.
func (c committer) Snapshot(ctx context.Context, attempt int, _ statestore.Snapshot) (statestore.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.mem.snapshot(), nil
}

// Commit applies ch's operations if nothing the plan read or listed has
// changed since, as one step.
func (c committer) Commit(ctx context.Context, ch *driver.Change) (driver.Outcome, error) {
	if !ch.Plan.Changed() || ch.DryRun {
		return driver.Outcome{}, nil
	}
	if err := ctx.Err(); err != nil {
		return driver.Outcome{}, err
	}
	snap := ch.Snapshot.(*snapshot)
	m := c.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	snap.mu.Lock()
	defer snap.mu.Unlock()
	for p, v := range snap.read {
		if m.objs[p].version != v {
			return driver.Outcome{}, &driver.ConflictError{Op: "write", What: "another writer changed " + p}
		}
	}
	for dir, seen := range snap.listed {
		if strings.Join(listing(m.objs, dir), "\n") != seen {
			return driver.Outcome{}, &driver.ConflictError{Op: "write", What: "another writer changed the folder " + dir}
		}
	}
	// Whatever the plan writes it looked at first (the planner compares
	// every path before it writes it), so the checks above cover them.
	m.version++
	for _, op := range ch.Plan.Ops {
		if op.Delete {
			delete(m.objs, op.Path)
			continue
		}
		m.objs[op.Path] = object{data: slices.Clone(op.Data), version: m.version}
	}
	m.commits++
	return driver.Outcome{Revision: fmt.Sprintf("v%d", m.version)}, nil
}
