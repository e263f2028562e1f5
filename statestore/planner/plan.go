package planner

import (
	"bytes"
	"fmt"
	"path"
	"sort"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// Op is one write the planner asks a backend to make.
type Op struct {
	Path   string
	Data   []byte
	Delete bool
}

// Plan is the outcome of planning an Update against a Snapshot.
type Plan struct {
	Ops  []Op
	Diff statestore.Diff
	// Record is the record as written (nil when the workload is removed).
	Record *statestore.Record
}

// Changed reports whether the plan writes anything.
func (p Plan) Changed() bool { return len(p.Ops) > 0 }

// PlanUpdate decides the operations that make snap hold u. It is the single
// place where ownership is enforced: only files recorded as the workload's
// (or new paths no other workload owns) are written or deleted. An update
// with a Basis that snap's record no longer is, whose copied files changed,
// or whose plan deletes a file its basis never read (see
// statestore.Basis.Files), and that snap does not hold already, is refused
// with a *StaleError.
func PlanUpdate(snap statestore.Snapshot, u statestore.Update) (Plan, error) {
	plan, err := planUpdate(snap, u)
	if u.Basis == nil || err == nil && !plan.Changed() {
		return plan, err
	}
	old, rerr := statestore.ReadRecord(snap, statestore.RecordPath(u.Workload))
	switch {
	case rerr != nil && err != nil:
		return plan, err
	case rerr != nil:
		return plan, rerr
	case !u.Basis.Holds(old):
		return Plan{}, &statestore.StaleError{Workload: u.Workload}
	}
	for _, p := range sortedKeys(u.Basis.Files) {
		if _, equal, cerr := snap.Compare(p, u.Basis.Files[p]); cerr != nil {
			return plan, cerr
		} else if !equal {
			return Plan{}, &statestore.StaleError{Workload: u.Workload}
		}
	}
	if err == nil && unread(plan, old, u.Basis) {
		return Plan{}, &statestore.StaleError{Workload: u.Workload}
	}
	return plan, err
}

// unread reports whether plan, of an update computed from the files its
// record listed (b.Files set: a prune, a drain, a drain's undo), deletes
// a file that old, the store's record now, lists and the basis never
// read: neither b.Record lists it nor b.Files holds it. Another render of
// the workload added it meanwhile, leaving the rest of the record as it
// was (so b.Holds(old)); the update would have kept it. The file lists
// are not simply compared: the record of a drain's undo is the one the
// drain wrote, whose list the planner filled only as it wrote it, and
// its Files name what the drain added.
func unread(plan Plan, old *statestore.Record, b *statestore.Basis) bool {
	if b.Files == nil || old == nil {
		return false
	}
	var listed, known map[string]bool // built at the first delete
	for _, op := range plan.Ops {
		if !op.Delete || layout.IsMeta(op.Path) {
			// What render keeps beside the files (the record, its claims,
			// index entries and aggregated parts) is made from the record,
			// never read: the basis's record stands for it.
			continue
		}
		if listed == nil {
			listed, known = map[string]bool{}, map[string]bool{}
			for _, f := range old.Files {
				listed[f] = true
			}
			if b.Record != nil {
				for _, f := range b.Record.Files {
					known[f] = true
				}
			}
		}
		if _, read := b.Files[op.Path]; listed[op.Path] && !read && !known[op.Path] {
			return true
		}
	}
	return false
}

// planUpdate plans u on snap, step by step (see planning): what the
// workload owns, what it wants, then the operations that make snap hold
// what it wants, and its record last.
func planUpdate(snap statestore.Snapshot, u statestore.Update) (Plan, error) {
	pl := &planning{snap: snap, u: u, recPath: statestore.RecordPath(u.Workload), owned: map[string]bool{}}
	if u.Record != nil {
		r := *u.Record
		r.Workload = u.Workload
		pl.newRec = &r
	}
	first := UpdateHint(u)
	statestore.Prefetch(snap, first)
	old, err := statestore.ReadRecord(snap, pl.recPath)
	if err != nil {
		return pl.plan, err
	}
	pl.old = old
	if err := pl.findOwned(first.Paths); err != nil {
		return pl.plan, err
	}
	indexed, err := bookkeeping.Indexed(snap)
	if err != nil {
		return pl.plan, err
	}
	var migrate map[string][]byte
	if !indexed {
		if migrate, err = bookkeeping.Migration(snap); err != nil {
			return pl.plan, err
		}
	}
	if err := pl.findWanted(); err != nil {
		return pl.plan, err
	}
	// A path the plan adds must be free to take a file (a tree-shaped snapshot: see shapes).
	pl.sh = newShapes(snap, u.Workload, func(f string) bool {
		_, keep := pl.want[f]
		return pl.owned[f] && !keep
	}, func(f string) bool {
		_, w := pl.want[f]
		return w
	}, pl.ownerIdx)
	if err := pl.addWanted(); err != nil {
		return pl.plan, err
	}
	if err := pl.deleteUnwanted(); err != nil {
		return pl.plan, err
	}
	for _, t := range sortedKeys(pl.targets) {
		if err := pl.plan.aggregate(snap, t, u.Workload, pl.owned[statestore.AggregatePath(t, u.Workload)], pl.want, pl.sh); err != nil {
			return pl.plan, err
		}
	}
	if err := pl.addShared(); err != nil {
		return pl.plan, err
	}
	if err := pl.addMigration(migrate); err != nil {
		return pl.plan, err
	}
	if err := pl.addRecord(); err != nil {
		return pl.plan, err
	}
	return pl.plan, nil
}

// planning is the state of planning one update: what the workload owns
// and wants, and the plan made so far. Each step of planUpdate fills in a
// part of it.
type planning struct {
	snap    statestore.Snapshot
	u       statestore.Update
	recPath string
	// newRec is the record the update asks for, naming the workload (nil
	// when the workload is removed); old is the stored one (nil: none).
	newRec, old *statestore.Record
	// owned are the paths the workload owns (see findOwned); want is what
	// it wants written, by path, claimed the claims among them, and
	// targets the aggregated files it has or had a part of (see
	// findWanted).
	owned   map[string]bool
	want    map[string][]byte
	claimed map[string]statestore.Object
	targets map[string]bool
	// owners is every record's files, by path, built only when needed
	// (see ownerIdx).
	owners map[string]string
	// sh says which paths can take a file (see shapes).
	sh   *shapes
	plan Plan
}

// ownerIdx returns which workload's record lists each path, read from
// every record the first time a step needs it.
func (pl *planning) ownerIdx() (map[string]string, error) {
	var err error
	if pl.owners == nil {
		pl.owners, err = ownerIndex(pl.snap)
	}
	return pl.owners, err
}

// refuse drops the plan made so far and returns err: an update refused
// (a path another workload owns or claims, or one with no room for a
// file) gets no plan.
func (pl *planning) refuse(err error) error {
	pl.plan = Plan{}
	return err
}

// findOwned finds what the workload owns: the files its record lists,
// with their index entries and the claims a migrated store holds for it,
// prefetched together with hint (what planning looks at first) and the
// parts folders of its aggregated files. Without a record, in a store
// Kratix wrote, it owns what Kratix wrote for it, when the update asks to
// adopt that.
func (pl *planning) findOwned(hint []string) error {
	snap, u, old := pl.snap, pl.u, pl.old
	if old != nil {
		for _, f := range old.Files {
			pl.owned[f] = true
		}
		// Index entries follow from the record, and a store migrated to
		// the index holds entries and claims its records do not list yet.
		for p := range bookkeeping.IndexPaths(old) {
			pl.owned[p] = true
		}
		if err := bookkeeping.OwnMigratedClaims(snap, old, pl.owned); err != nil {
			return err
		}
		var dirs []string
		for _, a := range u.Aggregates {
			dirs = append(dirs, path.Join(layout.MetaDir, "aggregate", a.Target))
		}
		for f := range pl.owned {
			hint = append(hint, f)
			if t, ok := statestore.AggregateTarget(f, u.Workload); ok {
				dirs = append(dirs, path.Join(layout.MetaDir, "aggregate", t))
			}
		}
		statestore.Prefetch(snap, statestore.Hint{Paths: hint, Dirs: dirs})
	} else if u.Adopt != nil {
		// A store Kratix wrote: what it wrote for the workload is its own.
		if err := bookkeeping.CheckAdoption(u.Adopt, u.Workload); err != nil {
			return fmt.Errorf("refused to take over files for workload %s: %w", u.Workload, err)
		}
		files, err := bookkeeping.Adopted(snap, u.Workload, u.Adopt, pl.ownerIdx)
		if err != nil {
			return err
		}
		for _, f := range files {
			pl.owned[f] = true
		}
	}
	return nil
}

// findWanted checks the update's paths and finds what the workload wants
// written: its files, the claims on its Kubernetes objects (see
// ClaimPath), its index entries and its parts of aggregated files. An
// aggregated file's target is rebuilt from every part present now, so
// findWanted also notes every target the workload has a part of, or had.
func (pl *planning) findWanted() error {
	u := pl.u
	pl.want = make(map[string][]byte, len(u.Files)+len(u.Aggregates))
	for p, data := range u.Files {
		if err := layout.ValidPath(p); err != nil {
			return err
		}
		if layout.IsMeta(p) {
			return fmt.Errorf("path %q is inside render's own folder %s", p, layout.MetaDir)
		}
		pl.want[p] = data
	}
	pl.claimed = map[string]statestore.Object{}
	if u.Record != nil {
		for _, o := range u.Record.Objects {
			if _, ok := pl.claimed[bookkeeping.ClaimPath(o)]; !ok {
				pl.claimed[bookkeeping.ClaimPath(o)] = o
			}
		}
	}
	for p, data := range bookkeeping.Claims(u) {
		pl.want[p] = data
	}
	for p, data := range bookkeeping.IndexPaths(pl.newRec) {
		pl.want[p] = data
	}
	// This workload's part of an aggregated file lives in the meta folder.
	pl.targets = map[string]bool{}
	for _, a := range u.Aggregates {
		if err := layout.ValidPath(a.Target); err != nil {
			return err
		}
		pl.targets[a.Target] = true
		if len(a.Contribution) > 0 {
			pl.want[statestore.AggregatePath(a.Target, u.Workload)] = a.Contribution
		}
	}
	for f := range pl.owned {
		if t, ok := statestore.AggregateTarget(f, u.Workload); ok {
			pl.targets[t] = true
		}
	}
	return nil
}

// addWanted plans the writes of what the workload wants that snap does
// not hold yet. A path another workload owns, or a claim on an object
// another workload claimed, refuses the update; so does a new path with
// no room for a file.
func (pl *planning) addWanted() error {
	snap, u := pl.snap, pl.u
	// Claims first, so a duplicate object is reported as one rather than
	// as whichever of its paths sorts first.
	wantPaths := sortedKeys(pl.want)
	sort.SliceStable(wantPaths, func(i, j int) bool {
		_, ci := pl.claimed[wantPaths[i]]
		_, cj := pl.claimed[wantPaths[j]]
		return ci && !cj
	})
	for _, p := range wantPaths {
		exists, equal, err := snap.Compare(p, pl.want[p])
		if err != nil {
			return err
		}
		// A claim naming another workload refuses this one even where
		// this workload's record lists the path: an S3 record names what
		// its write is about to create before it uploads it, and a writer
		// that lost the claim's race keeps it named until its next write.
		if o, isClaim := pl.claimed[p]; isClaim && exists && !equal {
			if err := bookkeeping.CheckClaim(snap, p, u.Workload, o, pl.ownerIdx); err != nil {
				return pl.refuse(err)
			}
		}
		if exists && !pl.owned[p] && !layout.IsMeta(p) {
			idx, err := pl.ownerIdx()
			if err != nil {
				return err
			}
			if o, ok := idx[p]; ok && o != u.Workload {
				return pl.refuse(&statestore.OwnedError{Owner: o, Path: p})
			}
		}
		switch {
		case !exists:
			if err := pl.sh.check(p); err != nil {
				return pl.refuse(err)
			}
			pl.plan.add(p, pl.want[p], &pl.plan.Diff.Added)
		case !equal:
			pl.plan.add(p, pl.want[p], &pl.plan.Diff.Changed)
		}
	}
	return nil
}

// deleteUnwanted plans the deletes of what the workload owns and no
// longer wants, where snap still holds it.
func (pl *planning) deleteUnwanted() error {
	for _, p := range sortedKeys(pl.owned) {
		if _, keep := pl.want[p]; keep {
			continue
		}
		// An aggregated file is every contributor's: aggregate rebuilds
		// it from the parts, or deletes it when no part is left. A record
		// that lists it (an S3 removal's intent named it, before the
		// intent stopped doing so: the simulated campaign's s3 seed 3010)
		// does not make it this workload's to delete.
		if pl.targets[p] {
			continue
		}
		exists, _, err := pl.snap.Compare(p, nil)
		if err != nil {
			return err
		}
		if exists {
			pl.plan.Ops = append(pl.plan.Ops, Op{Path: p, Delete: true})
			if !layout.IsMeta(p) {
				pl.plan.Diff.Deleted = append(pl.plan.Diff.Deleted, p)
			}
		}
	}
	return nil
}

// addShared plans the writes of the update's shared files that snap does
// not hold: a shared file somebody already wrote is left as it is.
func (pl *planning) addShared() error {
	u := pl.u
	for _, p := range sortedKeys(u.Shared) {
		if _, mine := pl.want[p]; mine {
			continue
		}
		exists, _, err := pl.snap.Compare(p, nil)
		if err != nil {
			return err
		}
		if !exists {
			if err := pl.sh.check(p); err != nil {
				return pl.refuse(err)
			}
			pl.plan.add(p, u.Shared[p], &pl.plan.Diff.Added)
		}
	}
	return nil
}

// addMigration plans the writes of migrate: a store that predates the
// index gets every record's entries and claims, and the marker, with this
// write (see index.go). What the workload wants or owns is planned
// already.
func (pl *planning) addMigration(migrate map[string][]byte) error {
	for _, p := range sortedKeys(migrate) {
		if _, mine := pl.want[p]; mine || pl.owned[p] {
			continue
		}
		exists, _, err := pl.snap.Compare(p, nil)
		if err != nil {
			return err
		}
		if !exists {
			pl.plan.Ops = append(pl.plan.Ops, Op{Path: p, Data: migrate[p]})
		}
	}
	return nil
}

// addRecord plans the record, last: the update's record listing every
// file the workload wants (written only when it differs from the stored
// one), or the stored record's delete when the workload is removed.
func (pl *planning) addRecord() error {
	if pl.u.Record != nil {
		rec := *pl.newRec
		rec.Files = sortedKeys(pl.want)
		pl.plan.Record = &rec
		data := rec.Encode()
		_, equal, err := pl.snap.Compare(pl.recPath, data)
		if err != nil {
			return err
		}
		if !equal {
			pl.plan.Ops = append(pl.plan.Ops, Op{Path: pl.recPath, Data: data})
		}
	} else if pl.old != nil {
		pl.plan.Ops = append(pl.plan.Ops, Op{Path: pl.recPath, Delete: true})
	}
	return nil
}

// UpdateHint is what planning u first looks at: the paths it may write,
// and its record. A backend that plans many updates on one snapshot (a git
// group commit) prefetches their hints together.
func UpdateHint(u statestore.Update) statestore.Hint {
	h := statestore.Hint{Reads: []string{statestore.RecordPath(u.Workload)}, Paths: []string{bookkeeping.IndexMarker}}
	for p := range u.Files {
		h.Paths = append(h.Paths, p)
	}
	for p := range u.Shared {
		h.Paths = append(h.Paths, p)
	}
	for p := range bookkeeping.Claims(u) {
		h.Paths = append(h.Paths, p)
	}
	if u.Record != nil {
		r := *u.Record
		r.Workload = u.Workload
		for p := range bookkeeping.IndexPaths(&r) {
			h.Paths = append(h.Paths, p)
		}
	}
	for _, a := range u.Aggregates {
		h.Dirs = append(h.Dirs, path.Join(layout.MetaDir, "aggregate", a.Target))
	}
	return h
}

func (p *Plan) add(path string, data []byte, list *[]string) {
	p.Ops = append(p.Ops, Op{Path: path, Data: data})
	if !layout.IsMeta(path) {
		*list = append(*list, path)
	}
}

// aggregate rebuilds target from every workload's part, with this
// workload's part as want says. The target holds exactly what Kratix would
// write there: every part's bytes as they are, in the order of Kratix's
// WorkPlacement names (see KratixOrder), joined by "\n---\n", with the
// documents Kratix wrote for workloads render does not know (legacy
// segments, see legacySegments) where Kratix had them. owned says the
// workload's record holds a part of target.
func (p *Plan) aggregate(snap statestore.Snapshot, target, workload string, owned bool, want map[string][]byte, sh *shapes) error {
	dir := path.Join(layout.MetaDir, "aggregate", target)
	parts, err := snap.List(dir)
	if err != nil {
		return err
	}
	statestore.Prefetch(snap, statestore.Hint{Reads: parts})
	mine := statestore.AggregatePath(target, workload)
	content := map[string][]byte{} // every part the target is built from
	for _, part := range parts {
		if part == mine {
			continue
		}
		data, err := snap.ReadFile(part)
		if err != nil {
			return err
		}
		content[part] = data
	}
	// Documents Kratix wrote for workloads render does not know stay.
	// A target without parts holds Kratix's documents, unless this
	// workload had a part of it: then render wrote it, and the removal of
	// the last part stopped short of the target (a writer that failed
	// between the two).
	first := len(parts) == 0 && !owned
	if err := p.legacySegments(snap, target, workload, first, hasPart(parts, mine), want[mine], content); err != nil {
		return err
	}
	if data, ok := want[mine]; ok {
		content[mine] = data
	}
	order := make([]string, 0, len(content))
	for part, data := range content {
		if len(data) > 0 {
			order = append(order, part)
		}
	}
	sort.Slice(order, func(i, j int) bool { return partLess(dir, order[i], order[j]) })
	var buf bytes.Buffer
	for i, part := range order {
		if i > 0 {
			buf.WriteString("\n---\n")
		}
		buf.Write(content[part])
	}
	exists, equal, err := snap.Compare(target, buf.Bytes())
	if err != nil {
		return err
	}
	switch {
	case buf.Len() == 0 && exists:
		p.Ops = append(p.Ops, Op{Path: target, Delete: true})
		p.Diff.Deleted = append(p.Diff.Deleted, target)
	case buf.Len() == 0:
	case !exists:
		if err := sh.check(target); err != nil {
			return err
		}
		p.add(target, buf.Bytes(), &p.Diff.Added)
	case !equal:
		p.add(target, buf.Bytes(), &p.Diff.Changed)
	}
	return nil
}

func hasPart(parts []string, p string) bool {
	for _, x := range parts {
		if x == p {
			return true
		}
	}
	return false
}

func appendNewline(b []byte) []byte {
	if len(b) == 0 || b[len(b)-1] == '\n' {
		return b
	}
	return append(b, '\n')
}

func ownerIndex(snap statestore.Snapshot) (map[string]string, error) {
	recs, err := statestore.ReadRecords(snap)
	if err != nil {
		return nil, err
	}
	idx := map[string]string{}
	for _, r := range recs {
		for _, f := range r.Files {
			idx[f] = r.Workload
		}
	}
	return idx, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PlanBatch plans us on snap, each update on top of the ones before it,
// and returns each update's plan and the change they make together (every
// plan's operations and diff, in order, and the last plan's record).
// Planning never writes to the store: later updates see earlier ones
// through an overlay.
func PlanBatch(snap statestore.Snapshot, us []statestore.Update) (plans []Plan, all Plan, err error) {
	if len(us) == 1 {
		p, err := PlanUpdate(snap, us[0])
		if err != nil {
			return nil, Plan{}, err
		}
		return []Plan{p}, p, nil
	}
	// What every update first looks at, in one go: a lazy snapshot
	// fetches it a folder level per request for all of them at once,
	// where planning them one by one would cost each its own requests.
	var h statestore.Hint
	for _, u := range us {
		h = h.Merge(UpdateHint(u))
	}
	statestore.Prefetch(snap, h)
	ov := NewOverlay(snap)
	for _, u := range us {
		p, err := PlanUpdate(ov, u)
		if err != nil {
			return nil, Plan{}, fmt.Errorf("%s: %w", u.Workload, err)
		}
		plans = append(plans, p)
		all.Ops = append(all.Ops, p.Ops...)
		all.Diff.Added = append(all.Diff.Added, p.Diff.Added...)
		all.Diff.Changed = append(all.Diff.Changed, p.Diff.Changed...)
		all.Diff.Deleted = append(all.Diff.Deleted, p.Diff.Deleted...)
		ov.Apply(p.Ops)
	}
	if len(plans) > 0 {
		all.Record = plans[len(plans)-1].Record
	}
	return plans, all, nil
}
