// Package statestore is the contract between render and a GitOps state
// store (a git branch, an S3 bucket, an OCI repository): the Store
// interface, the Update a render asks a store to hold, the Result it
// gets back, the Record a store keeps of each workload, the Snapshot a
// store is read through, and the errors every store returns (errors.go),
// which callers test with errors.Is. What a store or a snapshot does
// beyond the interface it declares (Capabilities, SnapshotCapabilities):
// a caller reads that, and asserts no store's type to learn it. It is
// what a caller of a store reads; it holds no backend, no planning and
// no waiting.
//
// The rest is split by who reads it:
//   - statestore/wait is how every loop waits: the Policy, the render's
//     one retry deadline (WithRetryDeadline), the Clock every wait and
//     deadline reads (WithClock), and the classes of errors a loop
//     retries or gives up on (Classify).
//   - statestore/driver is the backend side: the Backend and Committer a
//     store kind implements (its optional steps declared, not
//     discovered), Write, the one write loop every store runs, and the
//     classification of network failures every backend shares
//     (TranslateNetwork, Transient).
//   - statestore/planner decides the operations that make a snapshot
//     hold an update: ownership, pruning, shared and aggregated files.
//   - statestore/bookkeeping is what render keeps beside the workloads'
//     files and reads back: the placement index and load, object claims,
//     Kratix adoption, and the mass-deletion breaker.
//   - statestore/gitstore, s3store, ocistore and memstore are the
//     backends; statestore/storetest is the suite each must pass.
package statestore

import (
	"bytes"
	"context"
)

// Store is one state store as render sees it: a git branch or an S3 bucket,
// both under the store's configured path. Every path given to or returned by
// a Store is slash-separated and relative to that path.
//
// Contract:
//   - Records returns every workload record in the store, read from one
//     consistent view. An empty or missing store has no records and is not an
//     error.
//   - Apply makes the store hold u: u.Files replace exactly the files the
//     workload owned before (stale ones are deleted), u.Shared files are
//     written only where absent, and other workloads' files are never
//     touched. When the store changed underneath (another writer), Apply
//     re-reads it and re-plans u against the fresh state, a bounded number
//     of times. It never discards another writer's work.
//   - An Apply that changes nothing writes nothing and reports
//     Result.Updated == false; that is a result, not an error.
//   - With u.DryRun, Apply computes the same Result and writes nothing.
//   - Snapshot reads one consistent view; its ReadFile of a missing path
//     wraps ErrNotFound.
//   - Errors name the store. Unreachable stores wrap ErrUnreachable, refused
//     credentials wrap ErrAuth, a missing repository or bucket wraps
//     ErrNotFound, and a conflict that retries could not resolve wraps
//     ErrConflict. A path the store cannot take as it is (a file where
//     the plan needs a folder) is a *BlockedError, never retried.
type Store interface {
	// String names the store for messages, with no credentials in it.
	String() string
	// Records returns every workload record in the store.
	Records(ctx context.Context) ([]Record, error)
	// Snapshot returns a read-only view of what the store holds now.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Apply writes one workload's update.
	Apply(ctx context.Context, u Update) (Result, error)
	// ApplyAll writes several workloads' updates, each planned on top of
	// the ones before it: as one change where the store can
	// (Capabilities.AtomicBatches), one after the other otherwise.
	ApplyAll(ctx context.Context, us []Update) (Result, error)
	// Capabilities declares what the store does beyond this interface.
	Capabilities() Capabilities
	// Close releases what the store holds (clones, connections).
	Close() error
}

// Capabilities is what a store does beyond Store's methods, declared,
// not discovered: a caller reads them from Store.Capabilities, never by
// asserting the store's type, and calls no step that is nil. (Pull
// requests are the store kind's to declare: see Proposer.)
type Capabilities struct {
	// AtomicBatches is set when ApplyAll writes a batch as one change,
	// all of it or none of it (git, OCI, the memory store); otherwise it
	// writes one update after the other and stops at the first that
	// fails, having written those before it (S3).
	AtomicBatches bool
	// FetchStats, set by a store that counts what it fetches from its
	// server (git), reports what it fetched since it was opened.
	FetchStats func() FetchStats
}

// Update is everything one render wants one store to hold for one workload.
type Update struct {
	// Workload is the workload's key (see WorkloadKey); it names the record.
	Workload string
	// Files are the workload's own files, by path. They replace whatever the
	// workload owned before. Empty Files and a nil Record remove the workload.
	Files map[string][]byte
	// Shared files (the canaries) are written only where nothing exists yet,
	// are owned by nobody and are never deleted.
	Shared map[string][]byte
	// Aggregates are multi-document files shared by several workloads
	// (aggregatedYAML destinations): each workload contributes a part, and
	// the target holds every contribution, ordered by workload.
	Aggregates []Aggregate
	// Record is written beside the files, outside every destination. Its
	// Files field is filled in by the planner. A nil Record deletes it.
	Record *Record
	// Destinations are the destination paths this update writes to; backends
	// that keep per-destination markers (S3) use them.
	Destinations []string
	// Message describes the change (git commit message; S3 marker provenance).
	Message Message
	// Compose, when set, makes the message from what the write changes
	// (the planned diff); backends call it through MessageFor each time
	// they commit a plan. Its errors fail the write before anything is
	// published.
	Compose func(Diff) (Message, error)
	// Author, when set, is the git author of the change; the committer is
	// always the store's own identity.
	Author *Author
	// DryRun computes the Result and writes nothing.
	DryRun bool
	// Adopt, set when the store holds no record of the workload, names
	// what Kratix wrote for it there (see Adoption).
	Adopt *Adoption
	// View, when set, is the snapshot of this store the update was
	// computed from, as the store's Snapshot returned it (or as a
	// Result.View of an earlier write handed it on). The write's first
	// attempt plans on it instead of reading the store again, and lists or
	// fetches only what it did not cover; a later attempt, after a lost
	// race, reads the store as it is now. It is passed, never kept: a
	// store remembers no view of its own between calls. In a batch
	// (ApplyAll) the first update's View counts. A view of another store,
	// or one a store cannot plan on (an S3 view that did not look the
	// update's record up first), is not used.
	View Snapshot
	// Basis, when set, is what the update was computed from: the
	// workload's record as the caller read it. The planner refuses the
	// update with a *StaleError when the store's record is another one by
	// then and the update is not in the store already (see Basis). nil
	// plans the update on whatever the store holds.
	Basis *Basis
}

// Basis is what an update was computed from. A render places a workload
// where its record says it is (a placed resource stays there); a drain
// also copies the files the record lists. Planned on top of another record
// (another render of the workload, or a drain, landed in between), such
// an update would move the workload back where it was, or write older
// files over newer ones. So a write planned on a store whose record is no
// longer the basis's, or whose files no longer hold the bytes the update
// copied, fails with a *StaleError, and the caller computes the update
// again from the store as it is now. An update the store already holds
// (its own, landed by another writer's push) is not stale.
type Basis struct {
	// Record is the record read; nil when the store held none. Which
	// files it lists does not matter to Holds (a render replaces
	// whatever the fresh record owns; an update computed from the files
	// is held to them by Files), and a record that places nothing and
	// says nothing else (the start of a first write that did not
	// commit) is none.
	Record *Record
	// Files are files the update was computed from, by path, with the
	// bytes read (a drain's copies, the files a prune keeps): each must
	// still hold them. Set (even empty), they say the update was
	// computed from the files its record listed, keeping or moving them
	// (a prune, a drain, a drain's undo): its plan may then delete only
	// files the basis knew (Record lists them or Files holds them). A
	// file the store's record lists besides, added by another render of
	// the workload that left the rest of the record as it was (a file
	// that holds no object), it never read, and the update is stale. A
	// render's update (Files nil) is not: it replaces the workload's
	// files with its workflow's output whatever the record lists, as it
	// would after reading the store again.
	Files map[string][]byte
}

// Holds reports whether r, the store's record of the workload now, is the
// basis's, its file list aside (see Basis.Record, and Basis.Files for
// what an update computed from the files is held to).
func (b *Basis) Holds(r *Record) bool {
	x, y := basisOf(b.Record), basisOf(r)
	if x == nil || y == nil {
		return x == nil && y == nil
	}
	return bytes.Equal(x, y)
}

// basisOf is what a record says that an update is computed from: the
// record without its files, nil when it places nothing and says nothing.
func basisOf(r *Record) []byte {
	if r == nil || len(r.Placements) == 0 && len(r.Objects) == 0 && len(r.DefaultSelector) == 0 {
		return nil
	}
	c := *r
	c.Files = nil
	return c.Encode()
}

// MessageFor is the message for a plan with diff d: Compose's, or Message.
func (u Update) MessageFor(d Diff) (Message, error) {
	if u.Compose == nil {
		return u.Message, nil
	}
	return u.Compose(d)
}

// Author is who a change is written for (git's author).
type Author struct {
	Name, Email string
}

// Message is the provenance of a write.
type Message struct {
	Subject string
	// Body is free text between the subject and the trailers.
	Body     string
	Trailers []Trailer // rendered as "Key: value" lines, in order
}

// Trailer is one "Key: value" provenance line. Its JSON form is what
// backends that keep provenance outside git (S3 markers) store.
type Trailer struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// String renders the message as a git commit message.
func (m Message) String() string {
	s := m.Subject + "\n"
	if m.Body != "" {
		s += "\n" + m.Body + "\n"
	}
	if len(m.Trailers) > 0 {
		s += "\n"
		for _, t := range m.Trailers {
			s += t.Key + ": " + t.Value + "\n"
		}
	}
	return s
}

// Result says what an Apply did (or, with DryRun, would do).
type Result struct {
	Diff
	// Updated is false when the store already held the update (with
	// DryRun: when it would write nothing).
	Updated bool
	// Revision identifies what was written: a commit hash for git, a digest for S3.
	Revision string
	// Attempts counts how many times the update was planned (1 + retries after conflicts).
	Attempts int
	// View, when set, is the store as the write left it (the state it
	// committed, or found holding the update already): a later write
	// given it as its Update.View plans on it without reading the store
	// again. Stores that cannot say leave it nil.
	View Snapshot
}

// Diff lists paths by what happens to them. Records and other files render
// keeps for itself are not listed.
type Diff struct {
	Added, Changed, Deleted []string
}
