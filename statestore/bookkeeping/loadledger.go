package bookkeeping

// Load ledgers: the load summary of a store whose writers of different
// workloads do not take turns (an S3 bucket, where each record is its own
// lock). See docs/design.md, "Load summaries".
//
// A count kept beside a commit drifts when a writer dies between the two,
// and concurrent increments need the summary to be the only source of
// truth. So a destination's ledger names its resource entries (entry name
// -> flavour folder, about 30 bytes each), and no two writers of
// different workloads ever need the newest version of one object:
//
//   - the base, LedgerPath(d), holds the entries as of its last fold, and
//     the changes a fold found under way (Ledger.Pending); only a fold
//     writes it, conditionally, and a fold that loses does nothing more;
//   - each write that changes a workload's resource entries on d adds
//     objects of its own to the folder ChangeDir(d), named by a random
//     nonce of the write: before it writes any entry, a *pending* one
//     (announce: the workloads and every entry name they may add or
//     remove there); after its commit, whatever the outcome, a *settled*
//     one (settle: for each of those names, the flavour folder its
//     workload's record has it under, or none), as of the record the
//     write committed, or, when it did not commit, the record as it is
//     now. What they say is in their names (a short base64 of their
//     content) unless it is too long, when their content says it.
//
// A reader lists the folder, then reads the base, and counts the base's
// entries, each name that a change object names replaced: by the settled
// object of the one write that names it, when exactly one does and the
// base does not hold that write's change as under way; otherwise from its
// workload's record as it is now. A fold is such a read written back: the
// base becomes what the read counted, the writes found pending are kept in
// it as under way, and only once that write landed are the objects of the
// writes found settled deleted.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/render-dev/render/statestore"
)

// LedgerStorage is where a store keeps its load ledgers: the few
// operations the protocol needs.
type LedgerStorage interface {
	// ReadObject returns the object at p (a path relative to the store)
	// as it is now, and its version (never ""); ErrNoObject when there
	// is none.
	ReadObject(ctx context.Context, p string) (data []byte, version string, err error)
	// WriteObject writes p when it is still at version (IfAbsent: when
	// there is none; AnyVersion: whatever is there) and returns the new
	// version. A failed condition is an error wrapping ErrVersionMoved.
	WriteObject(ctx context.Context, p string, data []byte, version string) (string, error)
	// ListFolder lists the names of the objects directly in folder dir as
	// they are now (not those below its sub-folders).
	ListFolder(ctx context.Context, dir string) ([]string, error)
	// DeleteObjects deletes paths; one that does not exist is no error.
	DeleteObjects(ctx context.Context, paths []string) error
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

// LedgerPath is the base of destination d's load ledger.
func LedgerPath(d string) string { return path.Join(LoadDir, d+".json") }

// ChangeDir is the folder of the change objects of destination d's load
// ledger. A destination below d (d/x) keeps its base in it (x.json) and
// its changes in a sub-folder (x/): neither is named like a change.
func ChangeDir(d string) string { return path.Join(LoadDir, d) }

// Ledger formats. Format 1 is what render wrote before change objects:
// writers announced and settled their changes in the base itself. This
// render reads it, and writes format 2, which an older render does not
// read (it lists the destination's entries instead) nor change (its writes
// that would change it fail, naming it): so no writer of a store this
// render folded changes a base behind its change objects.
const (
	ledgerFormatOld = 1
	ledgerFormat    = 2
)

// Ledger is the base of a load ledger: the resource index entries of one
// destination d (.render/placed/<d>/resource/<flavour>/<name>) as name ->
// flavour folder, and the changes that were under way when it was
// written: by the nonce of the write making them, the entry names of each
// workload it may add or remove. Until a change is settled and folded,
// readers decide those names from the workload's record.
type Ledger struct {
	Format  int                            `json:"format"`
	Entries map[string]string              `json:"entries"`
	Pending map[string]map[string][]string `json:"pending,omitempty"`
	// Folded are the nonces of the writes folded into it whose change
	// objects may still be listed (a fold deletes them after it wrote
	// the base, and may be cut off): readers pass over them.
	Folded []string `json:"folded,omitempty"`
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
	if l.Format != ledgerFormat && l.Format != ledgerFormatOld {
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

// Counts returns how many entries l, destination d's base, holds by
// flavour folder, with the entries its pending changes name decided by
// their workloads' records (recs, by workload key; a missing or nil one
// holds nothing). It is the count of a ledger without change objects.
func (l *Ledger) Counts(d string, recs map[string]*statestore.Record) map[string]int {
	members := maps.Clone(l.Entries)
	if members == nil {
		members = map[string]string{}
	}
	decide := map[string]string{}
	for _, change := range l.Pending {
		for w, names := range change {
			for _, n := range names {
				decide[n] = w
			}
		}
	}
	fromRecords(members, d, decide, recs)
	return countMembers(members)
}

// fromRecords sets each name of decide (name -> workload) in members from
// its workload's record in recs.
func fromRecords(members map[string]string, d string, decide map[string]string, recs map[string]*statestore.Record) {
	mine := map[string]map[string]string{}
	for n, w := range decide {
		if _, ok := mine[w]; !ok {
			mine[w] = ResourceEntries(recs[w])[d]
		}
		if fl, ok := mine[w][n]; ok {
			members[n] = fl
		} else {
			delete(members, n)
		}
	}
}

func countMembers(members map[string]string) map[string]int {
	out := map[string]int{}
	for _, fl := range members {
		out[fl]++
	}
	return out
}

// A change object's name: <nonce>.<kind>.<base64 of its content> when
// that is short enough, else <nonce>.<kind>-<hash of its content>, whose
// content is then read. Names are never rewritten: a write that widens its
// pending change writes another pending object.
const (
	kindPending = 'p'
	kindSettled = 's'
	// maxInline is the longest base64 content a name carries: MinIO keeps
	// an object's name as a file name (at most 255 bytes).
	maxInline = 200
	nonceLen  = 32
)

// pendingChange is a pending object's content: by workload, the entry
// names it may add or remove.
type pendingChange map[string][]string

// settledChange is a settled object's content: by workload, each announced
// name with the flavour folder the workload has it under, or "" for none.
type settledChange map[string]map[string]string

// changeName is the object name of a change of kind with content data,
// and whether its content must be written (read) as the object's body.
func changeName(nonce string, kind byte, data []byte) string {
	enc := base64.RawURLEncoding.EncodeToString(data)
	if len(enc) <= maxInline {
		return nonce + "." + string(kind) + "." + enc
	}
	sum := sha256.Sum256(data)
	return nonce + "." + string(kind) + "-" + hex.EncodeToString(sum[:8])
}

// changeObj is a change object as a listing shows it.
type changeObj struct {
	name   string
	nonce  string
	kind   byte
	inline []byte // its content, from its name; nil: read its body
}

func parseChange(name string) (changeObj, bool) {
	if len(name) < nonceLen+3 || name[nonceLen] != '.' {
		return changeObj{}, false
	}
	nonce := name[:nonceLen]
	if _, err := hex.DecodeString(nonce); err != nil {
		return changeObj{}, false
	}
	c := changeObj{name: name, nonce: nonce, kind: name[nonceLen+1]}
	if c.kind != kindPending && c.kind != kindSettled {
		return changeObj{}, false
	}
	switch rest := name[nonceLen+2:]; {
	case strings.HasPrefix(rest, "."):
		data, err := base64.RawURLEncoding.DecodeString(rest[1:])
		if err != nil || len(data) == 0 {
			return changeObj{}, false
		}
		c.inline = data
	case strings.HasPrefix(rest, "-") && len(rest) == 17:
	default:
		return changeObj{}, false
	}
	return c, true
}

func encodeJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings
	}
	return data
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
// at once after the last.
type LoadState struct {
	// nonce names the change objects of this write.
	nonce string
	// mu guards what follows; announcing holds it throughout, so that
	// the writes of a batch widen one announcement in turn.
	mu        sync.Mutex
	announced map[string]map[string][]string // by destination and workload (see Announce)
	// done holds, by workload, the record a write committed (nil: the
	// workload was removed).
	done map[string]*statestore.Record
}

// NewLoadState returns the state of a write (or batch) that announced
// nothing yet.
func NewLoadState() *LoadState {
	var b [nonceLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &LoadState{nonce: hex.EncodeToString(b[:]), announced: map[string]map[string][]string{},
		done: map[string]*statestore.Record{}}
}

// Committed notes that workload's write committed rec.
func (ls *LoadState) Committed(workload string, rec *statestore.Record) {
	ls.mu.Lock()
	ls.done[workload] = rec
	ls.mu.Unlock()
}

// How often ledgers are folded, by default.
const (
	// DefaultFoldAt is how many settled writes a reader that finds them in
	// a ledger's folder folds into its base.
	DefaultFoldAt = 16
	// DefaultFoldEvery: one write in this many (by its nonce) reads the
	// ledgers it settled in afterwards, and folds those that hold
	// DefaultFoldAt settled writes or more; so that a store nobody reads
	// the load of does not gather change objects without end.
	DefaultFoldEvery = 8
)

// Ledgers runs the protocol on a store's ledgers. Listed, shared by the
// reads and writes of one store, remembers the destinations counted from
// a listing for want of a base, so that the next write makes theirs.
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
	Listed *Listed
	// FoldAt and FoldEvery replace DefaultFoldAt and DefaultFoldEvery
	// when set (tests).
	FoldAt, FoldEvery int
}

func (lg Ledgers) foldAt() int {
	if lg.FoldAt > 0 {
		return lg.FoldAt
	}
	return DefaultFoldAt
}

// foldsAfter reports whether the write of nonce reads d's ledger after
// settling there, to fold it.
func (lg Ledgers) foldsAfter(nonce, d string) bool {
	every := lg.FoldEvery
	if every <= 0 {
		every = DefaultFoldEvery
	}
	h := fnv.New32a()
	h.Write([]byte(nonce + "\x00" + d))
	return h.Sum32()%uint32(every) == 0
}

// Listed holds the resource entries of the destinations whose load was
// counted from a listing, for lack of a base.
type Listed struct {
	mu      sync.Mutex
	entries map[string]map[string]string
}

// forget drops d's listed entries: its base exists (a fold made it, or a
// read found it), and CreateListed's write of it would only be refused.
func (l *Listed) forget(d string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.entries, d)
	l.mu.Unlock()
}

// Read reads d's base as it is now and its version: nil when there is
// none. A base this render cannot read (a newer format, or damaged) is an
// error wrapping errUnreadable: readers list the destination instead, and
// nobody folds into it.
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
// flavour folder: what a destination with no base is counted from.
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

// ledgerRead is one read of a destination's ledger: what it counted, and
// what a fold of it writes and deletes.
type ledgerRead struct {
	d string
	// base is the base read (nil: none, or unreadable), at version.
	base    *Ledger
	version string
	// unreadable: the base is in a format this render does not read; the
	// destination was counted from a listing and is left alone.
	unreadable bool
	// listed: there was no base; the destination's entries were listed.
	listed map[string]string
	// members are the entries counted, name -> flavour folder.
	members map[string]string
	// pending are the changes found under way, by nonce (their pending
	// objects' content, and the base's own).
	pending map[string]map[string][]string
	// settled are the objects of the writes found settled, by nonce.
	settled map[string][]string
	// gone: a change object listed was deleted before it was read (a
	// fold ran meanwhile); the base was read again after it, and this
	// read folds nothing.
	gone bool
	// objects are the names of the change objects listed.
	objects []string
	// stale are the change objects listed of writes the base holds
	// folded already (Ledger.Folded), and folded the nonces of those
	// writes: a fold deletes those objects again and keeps their nonces
	// while they are listed.
	stale  []string
	folded map[string]bool
}

// readLedger reads d's ledger: its folder's listing first, then the
// base, the contents the names do not carry, and the records of the
// workloads whose names are decided from them. The base is read after
// the listing: a fold writes the base before it deletes what it folded,
// so whatever the listing misses, the base holds.
func (lg Ledgers) readLedger(ctx context.Context, d string) (*ledgerRead, error) {
	objs, err := lg.listChanges(ctx, d)
	if err != nil {
		return nil, err
	}
	r := &ledgerRead{d: d, pending: map[string]map[string][]string{}, settled: map[string][]string{}}
	for _, c := range objs {
		r.objects = append(r.objects, c.name)
	}
	contents, err := lg.readContents(ctx, r, objs)
	if err != nil {
		return nil, err
	}
	if r.unreadable {
		entries, err := lg.ListEntries(ctx, d)
		if err != nil {
			return nil, err
		}
		r.members = entries
		return r, nil
	}
	objs, contents = r.passFolded(objs, contents)
	names := r.collect(objs, contents)
	decide := r.toDecide(names)
	if err := lg.countMembers(ctx, r, names.value, decide); err != nil {
		return nil, err
	}
	return r, lg.decideFromRecords(ctx, r, decide)
}

// listChanges lists d's change objects, sorted by name (objects of other
// names in the folder are not ours, and passed over).
func (lg Ledgers) listChanges(ctx context.Context, d string) ([]changeObj, error) {
	names, err := lg.Storage.ListFolder(ctx, ChangeDir(d))
	if err != nil {
		return nil, err
	}
	var objs []changeObj
	for _, n := range names {
		if c, ok := parseChange(n); ok {
			objs = append(objs, c)
		}
	}
	slices.SortFunc(objs, func(a, b changeObj) int { return strings.Compare(a.name, b.name) })
	return objs, nil
}

// settledNonces are the writes of objs that settled.
func settledNonces(objs []changeObj) map[string]bool {
	out := map[string]bool{}
	for _, c := range objs {
		if c.kind == kindSettled {
			out[c.nonce] = true
		}
	}
	return out
}

// readContents reads, at once, r's base and the contents of objs that
// their names do not carry (a pending object only while its write has
// not settled), index by index; a content left nil was not needed. A
// change object deleted since the listing (a fold ran meanwhile: r.gone)
// has its base read again after the miss, which holds what it said.
func (lg Ledgers) readContents(ctx context.Context, r *ledgerRead, objs []changeObj) ([][]byte, error) {
	settled := settledNonces(objs)
	contents := make([][]byte, len(objs))
	var mu sync.Mutex
	readBase := func(ctx context.Context) error {
		l, version, err := lg.Read(ctx, r.d)
		if errors.Is(err, errUnreadable) {
			mu.Lock()
			r.base, r.version, r.unreadable = nil, "", true
			mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		r.base, r.version, r.unreadable = l, version, false
		mu.Unlock()
		return nil
	}
	jobs := []func(context.Context) error{readBase}
	for i, c := range objs {
		if c.inline != nil {
			contents[i] = c.inline
			continue
		}
		if c.kind == kindPending && settled[c.nonce] {
			continue
		}
		jobs = append(jobs, func(ctx context.Context) error {
			data, _, err := lg.Storage.ReadObject(ctx, path.Join(ChangeDir(r.d), c.name))
			if errors.Is(err, ErrNoObject) {
				mu.Lock()
				r.gone = true
				mu.Unlock()
				return nil
			}
			contents[i] = data
			return err
		})
	}
	if err := lg.Reads(ctx, jobs); err != nil {
		return nil, err
	}
	if r.gone {
		if err := readBase(ctx); err != nil {
			return nil, err
		}
	}
	return contents, nil
}

// passFolded passes over the change objects of the writes r's base holds
// folded already: they are r.stale (a fold deletes them again), their
// writes r.folded. It returns the others, with their contents.
func (r *ledgerRead) passFolded(objs []changeObj, contents [][]byte) ([]changeObj, [][]byte) {
	r.folded = map[string]bool{}
	if r.base == nil || len(r.base.Folded) == 0 {
		return objs, contents
	}
	folded := setOfNames(r.base.Folded)
	kept := objs[:0:0]
	var kc [][]byte
	for i, c := range objs {
		if folded[c.nonce] {
			r.stale = append(r.stale, c.name)
			r.folded[c.nonce] = true
			continue
		}
		kept = append(kept, c)
		kc = append(kc, contents[i])
	}
	return kept, kc
}

// changeNames is what a ledger's change objects say of each entry's
// name.
type changeNames struct {
	// writers are the writes (nonces) that name it, under way or settled.
	writers map[string]map[string]bool
	// value is its flavour folder ("": none) as its settled write left it.
	value map[string]string
	// owner is the workload of the last write read that names it.
	owner map[string]string
}

// collect reads objs' contents (unparseable ones are not ours): the
// changes under way into r.pending, the settled writes' objects into
// r.settled (a settled write is no longer under way), and what they say
// of each name.
func (r *ledgerRead) collect(objs []changeObj, contents [][]byte) changeNames {
	cn := changeNames{writers: map[string]map[string]bool{}, value: map[string]string{}, owner: map[string]string{}}
	note := func(nonce, n, w string) {
		if cn.writers[n] == nil {
			cn.writers[n] = map[string]bool{}
		}
		cn.writers[n][nonce] = true
		cn.owner[n] = w
	}
	for i, c := range objs {
		data := contents[i]
		if data == nil {
			continue
		}
		switch c.kind {
		case kindPending:
			var pc pendingChange
			if err := json.Unmarshal(data, &pc); err != nil {
				continue // not ours
			}
			if r.pending[c.nonce] == nil {
				r.pending[c.nonce] = map[string][]string{}
			}
			for w, names := range pc {
				r.pending[c.nonce][w] = union(r.pending[c.nonce][w], names)
				for _, n := range names {
					note(c.nonce, n, w)
				}
			}
		case kindSettled:
			var sc settledChange
			if err := json.Unmarshal(data, &sc); err != nil {
				continue
			}
			for w, names := range sc {
				for n, fl := range names {
					note(c.nonce, n, w)
					cn.value[n] = fl
				}
			}
		}
	}
	settled := settledNonces(objs)
	for _, c := range objs {
		if settled[c.nonce] {
			r.settled[c.nonce] = append(r.settled[c.nonce], c.name)
			delete(r.pending, c.nonce)
		}
	}
	return cn
}

// toDecide is the names decided from records, name -> workload: those
// the base holds as under way, those of writes under way, those more
// than one write names, and all the changes' names on a base of the old
// format (whose older writers change its entries behind the change
// objects).
func (r *ledgerRead) toDecide(cn changeNames) map[string]string {
	decide := map[string]string{}
	var held map[string]map[string][]string
	if r.base != nil {
		held = r.base.Pending
	}
	for _, changes := range []map[string]map[string][]string{held, r.pending} {
		for _, change := range changes {
			for w, names := range change {
				for _, n := range names {
					decide[n] = w
				}
			}
		}
	}
	old := r.base != nil && r.base.Format == ledgerFormatOld
	for n, ws := range cn.writers {
		heldWrite := false
		for nonce := range ws {
			if _, ok := held[nonce]; ok {
				heldWrite = true
			}
		}
		if len(ws) > 1 || old || heldWrite {
			decide[n] = cn.owner[n]
		}
	}
	return decide
}

// countMembers counts r's members: the base's entries (or a listing of
// d's entries when there is no base), with the value each settled write
// left to a name no record decides.
func (lg Ledgers) countMembers(ctx context.Context, r *ledgerRead, value, decide map[string]string) error {
	switch {
	case r.base != nil:
		r.members = maps.Clone(r.base.Entries)
	default:
		entries, err := lg.ListEntries(ctx, r.d)
		if err != nil {
			return err
		}
		r.listed, r.members = entries, maps.Clone(entries)
	}
	for n, fl := range value {
		if _, ok := decide[n]; ok {
			continue
		}
		if fl == "" {
			delete(r.members, n)
		} else {
			r.members[n] = fl
		}
	}
	return nil
}

// decideFromRecords reads, at once, the records of the workloads decide
// names, and sets each decided name in r's members as its record says.
func (lg Ledgers) decideFromRecords(ctx context.Context, r *ledgerRead, decide map[string]string) error {
	recs := map[string]*statestore.Record{}
	var mu sync.Mutex
	var jobs []func(context.Context) error
	for _, w := range slices.Sorted(maps.Keys(invert(decide))) {
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
		return err
	}
	fromRecords(r.members, r.d, decide, recs)
	return nil
}

func setOfNames(names []string) map[string]bool {
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// invert is the set of decide's workloads.
func invert(decide map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, w := range decide {
		out[w] = true
	}
	return out
}

// fold writes what r counted as d's base, with the changes r found under
// way (and those the base held, unless r found them settled) kept as
// under way, conditioned on the base r read (or its absence); only once
// that landed, it deletes the objects of the writes r found settled. A
// fold that loses its write does nothing more. It reports whether it
// folded.
//
// r's listing came before its base. Another fold between the two wrote a
// base that r's count may not agree with: a name r took from the one
// settled write its listing showed, while the other fold counted it from
// a later write of the workload (listed after r's) and deleted both. As a
// read, r is still right (that name was so when r listed it); as a base,
// it would be wrong for good. Such a fold deleted an object r listed, so
// the folder is listed again first, and a fold whose listed objects are
// not all there any more does nothing.
func (lg Ledgers) fold(ctx context.Context, r *ledgerRead) bool {
	if r.unreadable || r.gone || len(r.settled) == 0 && len(r.pending) == 0 && len(r.stale) == 0 {
		return false
	}
	now, err := lg.Storage.ListFolder(ctx, ChangeDir(r.d))
	if err != nil {
		return false
	}
	there := make(map[string]bool, len(now))
	for _, n := range now {
		there[n] = true
	}
	for _, n := range r.objects {
		if !there[n] {
			return false
		}
	}
	next := &Ledger{Format: ledgerFormat, Entries: r.members, Pending: map[string]map[string][]string{}}
	if r.base != nil {
		for nonce, change := range r.base.Pending {
			if _, done := r.settled[nonce]; !done {
				next.Pending[nonce] = change
			}
		}
	}
	for nonce, change := range r.pending {
		merged := maps.Clone(next.Pending[nonce])
		if merged == nil {
			merged = map[string][]string{}
		}
		for w, names := range change {
			merged[w] = union(merged[w], names)
		}
		next.Pending[nonce] = merged
	}
	if len(next.Pending) == 0 {
		next.Pending = nil
	}
	next.Folded = slices.Sorted(maps.Keys(r.settled))
	for nonce := range r.folded {
		next.Folded = append(next.Folded, nonce)
	}
	slices.Sort(next.Folded)
	cond := r.version
	if r.base == nil {
		cond = IfAbsent
	}
	if _, err := lg.Storage.WriteObject(ctx, LedgerPath(r.d), next.encode(), cond); err != nil {
		return false
	}
	gone := slices.Clone(r.stale)
	for i := range gone {
		gone[i] = path.Join(ChangeDir(r.d), gone[i])
	}
	for _, nonce := range slices.Sorted(maps.Keys(r.settled)) {
		for _, name := range r.settled[nonce] {
			gone = append(gone, path.Join(ChangeDir(r.d), name))
		}
	}
	_ = lg.Storage.DeleteObjects(ctx, gone)
	return true
}

// Counts counts the resource entries of each of dests, by flavour folder,
// from its ledger (see readLedger), and folds a ledger that holds FoldAt
// settled writes or more. A destination with no base is counted from a
// listing of its entries, which lg.Listed keeps so that the next write
// makes the base (see CreateListed).
func (lg Ledgers) Counts(ctx context.Context, dests []string) (map[string]map[string]int, error) {
	var mu sync.Mutex
	out := map[string]map[string]int{}
	listed := map[string]map[string]string{}
	jobs := make([]func(context.Context) error, 0, len(dests))
	for _, d := range dests {
		jobs = append(jobs, func(ctx context.Context) error {
			r, err := lg.readLedger(ctx, d)
			if err != nil {
				return err
			}
			folded := len(r.settled) >= lg.foldAt() && lg.fold(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			out[d] = countMembers(r.members)
			if r.listed != nil && !folded {
				listed[d] = r.listed
			}
			return nil
		})
	}
	if err := lg.Reads(ctx, jobs); err != nil {
		return nil, err
	}
	if lg.Listed != nil && len(listed) > 0 {
		lg.Listed.mu.Lock()
		if lg.Listed.entries == nil {
			lg.Listed.entries = map[string]map[string]string{}
		}
		maps.Copy(lg.Listed.entries, listed)
		lg.Listed.mu.Unlock()
	}
	return out, nil
}

// Fold reads d's ledger and folds whatever it holds, settled or pending,
// into its base (see fold): for tests and tools. It reports whether it
// folded.
func (lg Ledgers) Fold(ctx context.Context, d string) (bool, error) {
	r, err := lg.readLedger(ctx, d)
	if err != nil {
		return false, err
	}
	return lg.fold(ctx, r), nil
}

// Pending returns the changes under way on d, by the nonce of the write
// making them: those whose pending object has no settled one yet, and
// those a fold found so and the base still holds (for tests and tools).
func (lg Ledgers) Pending(ctx context.Context, d string) (map[string]map[string][]string, error) {
	r, err := lg.readLedger(ctx, d)
	if err != nil {
		return nil, err
	}
	out := maps.Clone(r.pending)
	if r.base != nil {
		for nonce, change := range r.base.Pending {
			if _, done := r.settled[nonce]; !done && out[nonce] == nil {
				out[nonce] = change
			}
		}
	}
	return out, nil
}

// Announce writes, in the ledger of each destination of changes, a pending
// object of ls's write naming its changes there (widened: another one,
// naming them all), before any index entry is written: from then until
// the write's settled object is folded, readers decide the names it gives
// from its records. It writes objects of its own only.
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
			if err := lg.writeChange(ctx, d, ls.nonce, kindPending, encodeJSON(pendingChange(change))); err != nil {
				return err
			}
			mu.Lock()
			ls.announced[d] = change
			mu.Unlock()
			return nil
		})
	}
	return lg.Writes(ctx, jobs)
}

// writeChange writes a change object where none of its name exists: its
// name is its write's and its content's, so one that exists already is
// this very object (a try whose answer was lost).
func (lg Ledgers) writeChange(ctx context.Context, d, nonce string, kind byte, data []byte) error {
	p := path.Join(ChangeDir(d), changeName(nonce, kind, data))
	_, err := lg.Storage.WriteObject(ctx, p, append(data, '\n'), IfAbsent)
	if errors.Is(err, ErrVersionMoved) {
		return nil
	}
	return err
}

// Settle writes, in each ledger ls announced a change in, the settled
// object of its write: each announced name set from its workload's record,
// the one its write committed or, for a write that did not commit, the
// record as it is now. Then, for one write in FoldEvery, it reads those
// ledgers and folds those that hold FoldAt settled writes or more. It is
// best effort: a change left pending (this writer died) is still counted
// right, from the records, by every reader, at one read per workload of
// the change.
func (lg Ledgers) Settle(ctx context.Context, ls *LoadState) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.announced) == 0 {
		return
	}
	var mu sync.Mutex
	recs := map[string]*statestore.Record{}
	record := func(ctx context.Context, w string) (*statestore.Record, error) {
		mu.Lock()
		rec, ok := ls.done[w]
		if !ok {
			rec, ok = recs[w]
		}
		mu.Unlock()
		if ok {
			return rec, nil
		}
		rec, err := lg.Storage.CurrentRecord(ctx, w)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		recs[w] = rec
		mu.Unlock()
		return rec, nil
	}
	var settled []string
	jobs := make([]func(context.Context) error, 0, len(ls.announced))
	for d, change := range ls.announced {
		jobs = append(jobs, func(ctx context.Context) error {
			sc := settledChange{}
			for w, names := range change {
				rec, err := record(ctx, w)
				if err != nil {
					return err
				}
				mine := ResourceEntries(rec)[d]
				sc[w] = map[string]string{}
				for _, n := range names {
					sc[w][n] = mine[n]
				}
			}
			if err := lg.writeChange(ctx, d, ls.nonce, kindSettled, encodeJSON(sc)); err != nil {
				return err
			}
			mu.Lock()
			settled = append(settled, d)
			mu.Unlock()
			return nil
		})
	}
	_ = lg.Writes(ctx, jobs)
	jobs = jobs[:0]
	for _, d := range settled {
		delete(ls.announced, d)
		if !lg.foldsAfter(ls.nonce, d) {
			continue
		}
		jobs = append(jobs, func(ctx context.Context) error {
			r, err := lg.readLedger(ctx, d)
			if err != nil {
				return nil
			}
			there := r.base != nil || r.unreadable
			if len(r.settled) >= lg.foldAt() || !there {
				// A missing base is made, since it was listed for.
				there = lg.fold(ctx, r) || there
			}
			if there {
				lg.Listed.forget(d) // nothing left for CreateListed to make
			}
			return nil
		})
	}
	_ = lg.Writes(ctx, jobs)
}

// CreateListed writes the bases of the destinations lg.Listed counted
// from a listing, each only where none exists yet. The listing may be
// older than the write: whatever changed an entry since was announced in
// a change object first, which stays until a fold, and no fold runs
// without a base. Failures are not errors: the destination is listed
// again next time.
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

// Seed adds entries (by destination, name -> flavour folder) to the bases
// of a store that nobody else writes yet, unconditionally: a missing or
// unreadable base is made from a listing of the destination's entries.
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
				l = &Ledger{Entries: all}
			}
			l.Format = ledgerFormat
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
