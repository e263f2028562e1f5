package bookkeeping

// Load ledgers: the load summary of a store whose writers of different
// workloads do not take turns (an S3 bucket, where each record is its own
// lock). See docs/design.md, "Load summaries".
//
// A count kept beside a commit drifts when a writer dies between the two,
// and concurrent increments need the summary to be the only source of
// truth. So each destination's ledger, LedgerPath(d), names its resource
// entries (entry name -> flavour folder, about 30 bytes each) and the
// changes under way, and is kept exact by a two-phase protocol built on
// conditional writes of the ledger:
//
//  1. announce: before writing any index entry, a writer whose plan changes
//     a workload's resource entries on a destination adds to its ledger a
//     pending change, under a random nonce of its write: the workload and
//     every entry name it may add or remove there;
//  2. the writer commits;
//  3. settle, whatever the outcome: each announced name is set from its
//     workload's record as it is now, and the pending change is dropped.
//
// A reader counts a ledger's entries, except the names of pending changes,
// which it decides from their workloads' records. The storage is the
// backend's (LedgerStorage); the protocol is here.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/render-dev/render/statestore"
)

// LedgerStorage is where a store keeps its load ledgers: the few
// operations the protocol needs, on one object per destination.
type LedgerStorage interface {
	// ReadObject returns the object at p (a path relative to the store)
	// as it is now, and its version (never ""); ErrNoObject when there
	// is none.
	ReadObject(ctx context.Context, p string) (data []byte, version string, err error)
	// WriteObject writes p when it is still at version (IfAbsent: when
	// there is none; AnyVersion: whatever is there) and returns the new
	// version. A failed condition is an error wrapping ErrVersionMoved.
	WriteObject(ctx context.Context, p string, data []byte, version string) (string, error)
	// ListEntries lists destination d's resource index entries as they
	// are now: every path below IndexDir/<d>/resource/.
	ListEntries(ctx context.Context, d string) ([]string, error)
	// CurrentRecord reads workload's record as it is now: nil when there
	// is none.
	CurrentRecord(ctx context.Context, workload string) (*statestore.Record, error)
}

// Versions a WriteObject is conditioned on, besides one that was read.
const (
	// IfAbsent writes only where there is no object yet.
	IfAbsent = ""
	// AnyVersion writes whatever is there (seeding a store nobody else
	// writes yet).
	AnyVersion = "*"
)

// ErrNoObject is what a ReadObject of an object that does not exist
// returns.
var ErrNoObject = errors.New("no such object")

// ErrVersionMoved is what a WriteObject whose condition failed wraps:
// someone wrote the object first. It is a conflict.
var ErrVersionMoved = fmt.Errorf("%w: the load ledger changed underneath", statestore.ErrConflict)

// errUnreadable marks a ledger this render cannot read.
var errUnreadable = errors.New("unreadable load summary")

// LedgerPath is the load ledger of destination d.
func LedgerPath(d string) string { return path.Join(LoadDir, d+".json") }

// ledgerFormat is the ledgers' format; a newer one is not read (the
// destination's index entries are listed instead).
const ledgerFormat = 1

// Ledger is what a load ledger holds: the resource index entries of one
// destination d (.render/placed/<d>/resource/<flavour>/<name>) as name ->
// flavour folder, and the changes under way there: by the nonce of the
// write making them, the entry names of each workload it may add or
// remove. Until a change is settled, readers decide those names from the
// workload's record.
type Ledger struct {
	Format  int                            `json:"format"`
	Entries map[string]string              `json:"entries"`
	Pending map[string]map[string][]string `json:"pending,omitempty"`
}

// newLedger is a ledger of entries with nothing pending.
func newLedger(entries map[string]string) *Ledger {
	return &Ledger{Format: ledgerFormat, Entries: entries, Pending: map[string]map[string][]string{}}
}

func (l *Ledger) encode() []byte {
	data, err := json.Marshal(l)
	if err != nil {
		panic(err) // only strings
	}
	return append(data, '\n')
}

func decodeLedger(p string, data []byte) (*Ledger, error) {
	var l Ledger
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("load summary %s: %w", p, err)
	}
	if l.Format != ledgerFormat {
		return nil, fmt.Errorf("load summary %s: format %d is not %d", p, l.Format, ledgerFormat)
	}
	if l.Entries == nil {
		l.Entries = map[string]string{}
	}
	if l.Pending == nil {
		l.Pending = map[string]map[string][]string{}
	}
	return &l, nil
}

func (l *Ledger) clone() *Ledger {
	out := &Ledger{Format: l.Format, Entries: maps.Clone(l.Entries), Pending: map[string]map[string][]string{}}
	for k, v := range l.Pending {
		out.Pending[k] = maps.Clone(v)
	}
	return out
}

// Counts returns how many entries l, destination d's ledger, holds by
// flavour folder, with the entries pending changes name decided by their
// workloads' records (recs, by workload key; a missing or nil one holds
// nothing).
func (l *Ledger) Counts(d string, recs map[string]*statestore.Record) map[string]int {
	members := maps.Clone(l.Entries)
	for _, change := range l.Pending {
		for _, names := range change {
			for _, n := range names {
				delete(members, n)
			}
		}
	}
	for _, change := range l.Pending {
		for w, names := range change {
			mine := ResourceEntries(recs[w])[d]
			for _, n := range names {
				if fl, ok := mine[n]; ok {
					members[n] = fl
				}
			}
		}
	}
	out := map[string]int{}
	for _, fl := range members {
		out[fl]++
	}
	return out
}

// settle sets the names of change (by workload) on destination d from the
// workloads' records (rec), and drops the pending change nonce.
func (l *Ledger) settle(d, nonce string, change map[string][]string, rec func(w string) (*statestore.Record, error)) error {
	for w, names := range change {
		r, err := rec(w)
		if err != nil {
			return err
		}
		for _, n := range names {
			delete(l.Entries, n)
		}
		for n, fl := range ResourceEntries(r)[d] {
			if slices.Contains(names, n) {
				l.Entries[n] = fl
			}
		}
	}
	delete(l.Pending, nonce)
	return nil
}

// LedgerChanges returns the entry names, by destination and by workload,
// whose presence a write of workload may change: the workload's own
// entries on each destination where they differ between its record before
// (old) and the one it writes (now), added, removed or moved to another
// flavour folder; and the entries of other workloads that a store which
// predates the index gains by this write (added: the index entries the
// write adds, with their content, which names their workload).
func LedgerChanges(workload string, old, now *statestore.Record, added map[string][]byte) map[string]map[string][]string {
	sets := map[string]map[string]map[string]bool{}
	add := func(d, w, n string) {
		if sets[d] == nil {
			sets[d] = map[string]map[string]bool{}
		}
		if sets[d][w] == nil {
			sets[d][w] = map[string]bool{}
		}
		sets[d][w][n] = true
	}
	before, after := ResourceEntries(old), ResourceEntries(now)
	for _, d := range slices.Concat(slices.Collect(maps.Keys(before)), slices.Collect(maps.Keys(after))) {
		if maps.Equal(before[d], after[d]) {
			continue
		}
		for n := range before[d] {
			add(d, workload, n)
		}
		for n := range after[d] {
			add(d, workload, n)
		}
	}
	for p, data := range added {
		e, ok := ParseIndexPath(p)
		if !ok || !e.Resource() {
			continue
		}
		if w := strings.TrimSpace(string(data)); w != "" && w != workload {
			add(e.Destination, w, e.Name)
		}
	}
	out := map[string]map[string][]string{}
	for d, byW := range sets {
		out[d] = map[string][]string{}
		for w, names := range byW {
			out[d][w] = slices.Sorted(maps.Keys(names))
		}
	}
	return out
}

// union is the sorted set of the names in a and b.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// LoadState is what one write, or one batch of writes, announced in load
// ledgers, and what its writes committed. A batch announces the changes
// of all its updates at once, before any of them writes, and settles them
// at once after the last: its writes of different workloads then do not
// take turns on the ledgers they all change.
type LoadState struct {
	// nonce names the pending changes in ledgers.
	nonce string
	// mu guards what follows; announcing holds it throughout, so that
	// the writes of a batch widen one announcement in turn.
	mu        sync.Mutex
	announced map[string]map[string][]string // by destination and workload (see Announce)
	sums      map[string]writtenLedger       // as Announce wrote them
	// done holds, by workload, the record a write committed (nil: the
	// workload was removed).
	done map[string]*statestore.Record
}

// writtenLedger is a ledger as an announcement wrote it, with its new
// version.
type writtenLedger struct {
	l       *Ledger
	version string
}

// NewLoadState returns the state of a write (or batch) that announced
// nothing yet.
func NewLoadState() *LoadState {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &LoadState{nonce: hex.EncodeToString(b[:]), announced: map[string]map[string][]string{},
		sums: map[string]writtenLedger{}, done: map[string]*statestore.Record{}}
}

// Committed notes that workload's write committed rec.
func (ls *LoadState) Committed(workload string, rec *statestore.Record) {
	ls.mu.Lock()
	ls.done[workload] = rec
	ls.mu.Unlock()
}

// Ledgers runs the protocol on a store's ledgers. Listed, shared by the
// reads and writes of one store, remembers the destinations counted from
// a listing for want of a ledger, so that the next write makes theirs.
type Ledgers struct {
	Storage LedgerStorage
	// Reads runs jobs that read, side by side as the store allows, and
	// returns the first error; the first failure cancels the context the
	// others get.
	Reads func(ctx context.Context, jobs []func(context.Context) error) error
	// Writes runs jobs that write, side by side as the store allows; the
	// first failure starts no more, and those under way finish (a write
	// is never cut off halfway). It returns the first error.
	Writes func(ctx context.Context, jobs []func(context.Context) error) error
	// Conflicts runs try until it returns an error that is not a
	// conflict, waiting in between (the store's retry policy); lost says
	// what kept moving.
	Conflicts func(ctx context.Context, lost string, try func(attempt int) error) error
	Listed    *Listed
}

// Listed holds the resource entries of the destinations whose load was
// counted from a listing, for lack of a ledger.
type Listed struct {
	mu      sync.Mutex
	entries map[string]map[string]string
}

// Read reads d's ledger as it is now and its version: nil when there is
// none. A ledger this render cannot read (a newer format, or damaged) is
// an error wrapping errUnreadable: readers list the destination instead,
// and writers refuse to change its entries.
func (lg Ledgers) Read(ctx context.Context, d string) (*Ledger, string, error) {
	p := LedgerPath(d)
	data, version, err := lg.Storage.ReadObject(ctx, p)
	if errors.Is(err, ErrNoObject) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	l, err := decodeLedger(p, data)
	if err != nil {
		return nil, "", fmt.Errorf("%w (delete it, and render rebuilds it from the placement index): %w", err, errUnreadable)
	}
	return l, version, nil
}

// ListEntries lists d's resource entries as they are now, as name ->
// flavour folder: what a destination with no ledger is counted from.
func (lg Ledgers) ListEntries(ctx context.Context, d string) (map[string]string, error) {
	paths, err := lg.Storage.ListEntries(ctx, d)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range paths {
		if e, ok := ParseIndexPath(p); ok && e.Resource() && e.Destination == d {
			out[e.Name] = e.Flavour
		}
	}
	return out, nil
}

// Counts counts the resource entries of each of dests, by flavour folder:
// from its ledger and the records of the workloads with a change pending
// there, or, for a destination with no ledger, from a listing of its
// entries, which lg.Listed keeps so that the next write makes the ledger
// (see CreateListed).
func (lg Ledgers) Counts(ctx context.Context, dests []string) (map[string]map[string]int, error) {
	var mu sync.Mutex
	sums := map[string]*Ledger{}
	listed := map[string]map[string]string{}  // no ledger: one is made on the next write
	counted := map[string]map[string]string{} // an unreadable ledger: left alone
	jobs := make([]func(context.Context) error, 0, len(dests))
	for _, d := range dests {
		jobs = append(jobs, func(ctx context.Context) error {
			l, _, err := lg.Read(ctx, d)
			unreadable := errors.Is(err, errUnreadable)
			if err != nil && !unreadable {
				return err
			}
			var entries map[string]string
			if l == nil {
				if entries, err = lg.ListEntries(ctx, d); err != nil {
					return err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case l != nil:
				sums[d] = l
			case unreadable:
				counted[d] = entries
			default:
				listed[d] = entries
			}
			return nil
		})
	}
	if err := lg.Reads(ctx, jobs); err != nil {
		return nil, err
	}
	workloads := map[string]bool{}
	for _, l := range sums {
		for _, change := range l.Pending {
			for w := range change {
				workloads[w] = true
			}
		}
	}
	recs := map[string]*statestore.Record{}
	jobs = jobs[:0]
	for w := range workloads {
		jobs = append(jobs, func(ctx context.Context) error {
			rec, err := lg.Storage.CurrentRecord(ctx, w)
			if err != nil {
				return err
			}
			mu.Lock()
			recs[w] = rec
			mu.Unlock()
			return nil
		})
	}
	if err := lg.Reads(ctx, jobs); err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for d, l := range sums {
		out[d] = l.Counts(d, recs)
	}
	for _, m := range []map[string]map[string]string{listed, counted} {
		for d, entries := range m {
			out[d] = (&Ledger{Entries: entries}).Counts(d, nil)
		}
	}
	if lg.Listed != nil {
		lg.Listed.mu.Lock()
		if lg.Listed.entries == nil {
			lg.Listed.entries = map[string]map[string]string{}
		}
		maps.Copy(lg.Listed.entries, listed)
		lg.Listed.mu.Unlock()
	}
	return out, nil
}

// Announce adds (or widens) the pending change of ls in the ledger of
// each destination of changes, before any index entry is written: from
// then until Settle, readers count the names it gives from the records. A
// missing ledger is made from a listing of the destination's entries,
// conditionally on its still being missing (a writer that keeps ledgers
// makes one before it changes an entry, so the listing misses none of
// theirs).
func (lg Ledgers) Announce(ctx context.Context, ls *LoadState, changes map[string]map[string][]string) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	want := map[string]map[string][]string{}
	for d, byW := range changes {
		merged := maps.Clone(ls.announced[d])
		if merged == nil {
			merged = map[string][]string{}
		}
		grew := false
		for w, names := range byW {
			if !isSubset(names, merged[w]) {
				merged[w] = union(merged[w], names)
				grew = true
			}
		}
		if grew {
			want[d] = merged
		}
	}
	if len(want) == 0 {
		return nil
	}
	var mu sync.Mutex
	jobs := make([]func(context.Context) error, 0, len(want))
	for d, change := range want {
		jobs = append(jobs, func(ctx context.Context) error {
			l, version, err := lg.Update(ctx, d, func(l *Ledger) error {
				l.Pending[ls.nonce] = change
				return nil
			})
			if err == nil {
				mu.Lock()
				ls.announced[d] = change
				ls.sums[d] = writtenLedger{l, version}
				mu.Unlock()
			}
			return err
		})
	}
	return lg.Writes(ctx, jobs)
}

// Settle folds the pending changes of ls into the ledgers: each announced
// name is set from its workload's record as it is now (read after the
// ledger, whoever committed it), and the announcement is removed. When
// the ledger is still the version the announcement wrote, and every
// workload of the change had its write committed, their records are the
// ones committed: any later commit that changes those entries announces
// first, which would have changed the ledger; so the settlement is then
// written without reading anything. It is best effort: a change left
// pending (this writer died, or the ledger kept changing) is still counted
// right, from the records, by every reader; it costs each reader one read
// per workload of the change, and stays, since only the write that made
// an announcement settles it.
func (lg Ledgers) Settle(ctx context.Context, ls *LoadState) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.announced) == 0 {
		return
	}
	allDone := func(change map[string][]string) bool {
		for w := range change {
			if _, ok := ls.done[w]; !ok {
				return false
			}
		}
		return true
	}
	var mu sync.Mutex
	settled := func(d string) {
		mu.Lock()
		delete(ls.announced, d)
		mu.Unlock()
	}
	jobs := make([]func(context.Context) error, 0, len(ls.announced))
	for d, change := range ls.announced {
		jobs = append(jobs, func(ctx context.Context) error {
			if a, ok := ls.sums[d]; ok && allDone(change) {
				l := a.l.clone()
				_ = l.settle(d, ls.nonce, change, func(w string) (*statestore.Record, error) { return ls.done[w], nil })
				_, err := lg.Storage.WriteObject(ctx, LedgerPath(d), l.encode(), a.version)
				if !errors.Is(err, ErrVersionMoved) {
					if err == nil {
						settled(d)
					}
					return err
				}
			}
			_, _, err := lg.Update(ctx, d, func(l *Ledger) error {
				return l.settle(d, ls.nonce, change, func(w string) (*statestore.Record, error) { return lg.Storage.CurrentRecord(ctx, w) })
			})
			if err == nil {
				settled(d)
			}
			return err
		})
	}
	_ = lg.Writes(ctx, jobs)
}

// Update changes d's ledger with change, conditionally on the version
// change saw, until a write succeeds. A missing ledger is made from a
// listing of d's entries first.
func (lg Ledgers) Update(ctx context.Context, d string, change func(*Ledger) error) (*Ledger, string, error) {
	p := LedgerPath(d)
	var l *Ledger
	var version string
	err := lg.Conflicts(ctx, "other renders kept changing the load summary "+p, func(int) error {
		var err error
		if l, version, err = lg.Read(ctx, d); err != nil {
			return err
		}
		cond := version
		if l == nil {
			entries, err := lg.ListEntries(ctx, d)
			if err != nil {
				return err
			}
			l, cond = newLedger(entries), IfAbsent
		}
		if err := change(l); err != nil {
			return err
		}
		version, err = lg.Storage.WriteObject(ctx, p, l.encode(), cond)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return l, version, nil
}

// CreateListed writes the ledgers of the destinations lg.Listed counted
// from a listing, each only where none exists yet. The listing may be
// older than the write: no writer that keeps ledgers changed those
// entries meanwhile, since it would have made the ledger first. Failures
// are not errors: the destination is listed again next time.
func (lg Ledgers) CreateListed(ctx context.Context) {
	if lg.Listed == nil {
		return
	}
	lg.Listed.mu.Lock()
	listed := lg.Listed.entries
	lg.Listed.entries = nil
	lg.Listed.mu.Unlock()
	if len(listed) == 0 {
		return
	}
	jobs := make([]func(context.Context) error, 0, len(listed))
	for d, entries := range listed {
		jobs = append(jobs, func(ctx context.Context) error {
			_, err := lg.Storage.WriteObject(ctx, LedgerPath(d), (&Ledger{Format: ledgerFormat, Entries: entries}).encode(), IfAbsent)
			if errors.Is(err, ErrVersionMoved) {
				return nil // somebody made it first
			}
			return err
		})
	}
	_ = lg.Writes(ctx, jobs)
}

// Seed adds entries (by destination, name -> flavour folder) to the
// ledgers of a store that nobody else writes yet, unconditionally: a
// missing or unreadable ledger is made from a listing of the
// destination's entries.
func (lg Ledgers) Seed(ctx context.Context, entries map[string]map[string]string) error {
	jobs := make([]func(context.Context) error, 0, len(entries))
	for d, names := range entries {
		jobs = append(jobs, func(ctx context.Context) error {
			l, _, err := lg.Read(ctx, d)
			if err != nil && !errors.Is(err, errUnreadable) {
				return err
			}
			if l == nil {
				all, err := lg.ListEntries(ctx, d)
				if err != nil {
					return err
				}
				l = &Ledger{Format: ledgerFormat, Entries: all}
			}
			maps.Copy(l.Entries, names)
			_, err = lg.Storage.WriteObject(ctx, LedgerPath(d), l.encode(), AnyVersion)
			return err
		})
	}
	return lg.Writes(ctx, jobs)
}

// isSubset reports whether every name of names is in of.
func isSubset(names, of []string) bool {
	set := make(map[string]bool, len(of))
	for _, n := range of {
		set[n] = true
	}
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
}
