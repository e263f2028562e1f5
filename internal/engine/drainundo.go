package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// CopyFate is what became of a group's copy in the store it moves into
// when removing the group from the drained destination failed (see Drain).
type CopyFate string

const (
	// CopyRemoved: the copy was taken out again; the group is where it
	// was, on Move.From only.
	CopyRemoved CopyFate = "removed"
	// CopyKept: taking the copy out again failed (Move.Why says why); the
	// group is on Move.To and on Move.From. A drain run again finishes
	// the move.
	CopyKept CopyFate = "kept"
	// CopyUnchecked: the drained destination's store could not be read
	// to check whether the removal landed (a write whose answer was lost
	// may have), so the copy stays rather than risk leaving the group
	// nowhere: it is on Move.To, and may still be on Move.From. A drain
	// run again finishes the move.
	CopyUnchecked CopyFate = "unchecked"
	// CopyMoved: the drained destination's store no longer places the
	// group there when read after the failure (the removal landed after
	// all, or another drain finished it): the group is on Move.To only.
	CopyMoved CopyFate = "moved"
)

// undoLog is what a drain wrote into the stores other than the drained
// destination's, by store and workload, across its attempts: enough to
// take it out again.
type undoLog map[renderer.StoreRef]map[string]*undoEntry

// undoEntry is one workload in one store: what the store held of it
// before the drain wrote there (put back by the undo), and the drain's
// last write of it (the undo's basis: it lands only on exactly that, so
// a writer that came after the drain is never overwritten).
type undoEntry struct {
	rec        *statestore.Record // nil: the store held no record
	files      map[string][]byte
	aggregates []statestore.Aggregate
	dests      []string
	wrote      statestore.Update
}

// note records the writes of one attempt that landed in stores other
// than the drained destination's: reps are that attempt's reports, all
// its updates. An attempt reads what the one before wrote; when it reads
// something else (another writer came in between), what to put back is
// what it read.
func (l undoLog) note(d *drain, all storeUpdates, reps []StoreReport) {
	if d.e.opts.DryRun {
		return
	}
	for _, r := range reps {
		if r.Store == d.from.Store || r.Err != nil || !r.Result.Updated {
			continue
		}
		for _, u := range all[r.Store] {
			pw := d.pending[r.Store][u.Workload]
			if pw == nil {
				continue
			}
			var old *statestore.Record
			if rec, ok := d.byWorkload[u.Workload][r.Store]; ok {
				c := cloneRecord(rec)
				old = &c
			}
			if l[r.Store] == nil {
				l[r.Store] = map[string]*undoEntry{}
			}
			en := l[r.Store][u.Workload]
			if en == nil || !wroteIs(en.wrote, old, pw.read) {
				en = &undoEntry{rec: old, files: maps.Clone(pw.read), aggregates: slices.Clone(pw.aggregates)}
				l[r.Store][u.Workload] = en
			}
			for _, dd := range u.Destinations {
				if !slices.Contains(en.dests, dd) {
					en.dests = append(en.dests, dd)
				}
			}
			en.wrote = u
		}
	}
}

// wroteIs reports whether update u left the store holding record rec and
// files: what an attempt read is what the one before wrote.
func wroteIs(u statestore.Update, rec *statestore.Record, files map[string][]byte) bool {
	if (u.Record == nil) != (rec == nil) || !maps.EqualFunc(u.Files, files, bytes.Equal) {
		return false
	}
	if rec == nil {
		return true
	}
	a, b := *u.Record, *rec
	a.Files, b.Files = nil, nil
	a.Workload = b.Workload
	return bytes.Equal(a.Encode(), b.Encode())
}

// undo settles a drain whose removal from the drained destination's
// store (home) failed after copies into other stores landed: it reads
// home again, and for each workload home still places on dest as the
// drain found it, takes what the drain wrote into the other stores out
// again, each store in one write with the drain's write there as its
// basis. It fills in each move's Copy, the undo's store reports and
// Unfinished.
//
// A workload is never left nowhere: when home cannot be read, the removal
// may have landed (a write whose answer was lost), so the copy stays;
// when home no longer places the group on dest, the group is where the
// copy is. Either way, and when the undo fails, the group is (or may be)
// in two places and the drain is unfinished: a drain run again finishes
// the move (finishMove).
func (e *Engine) undo(ctx context.Context, plat *inputs.Platform, stores map[renderer.StoreRef]statestore.Store, home renderer.StoreRef, rep *DrainReport, log undoLog) {
	if rep.DryRun || len(log) == 0 || !removalFailed(rep.Stores, home) {
		return
	}
	// The undo finishes what the drain started: a stop does not cut it
	// off, and it has a retry budget of its own, as long as the drain's
	// (which the failed removal may have spent).
	_, budget := wait.RetryDeadline(ctx)
	ctx = wait.WithRetryDeadline(context.WithoutCancel(ctx), budget)
	storeOf := map[string]renderer.StoreRef{}
	for _, d := range plat.Destinations {
		storeOf[d.Name] = d.Store
	}
	groups := map[string][]string{}
	for _, m := range rep.Moves {
		groups[m.Workload] = append(groups[m.Workload], m.Group)
	}
	homeName := home.String()
	snap, serr := stores[home].Snapshot(ctx)
	fate, why := map[string]CopyFate{}, map[string]string{}
	back := storeUpdates{}
	msg := statestore.Message{Subject: fmt.Sprintf("render: undo drain of destination %s here (removing its groups from %s failed)", rep.Destination, homeName),
		Trailers: []statestore.Trailer{{Key: "Render-Drain", Value: rep.Destination}, {Key: "Render-Version", Value: e.opts.Version}}}
	for _, key := range log.workloads() {
		if len(groups[key]) == 0 {
			continue // not on dest when the drain last read home
		}
		rec, err := homeRecord(snap, serr, key)
		if err != nil {
			fate[key], why[key] = CopyUnchecked, fmt.Sprintf("%s could not be read to check whether the removal landed: %v", homeName, err)
			continue
		}
		still := 0
		for _, g := range groups[key] {
			if rec != nil && placedOnIn(*rec, g, rep.Destination) {
				still++
			}
		}
		switch still {
		case 0:
			fate[key] = CopyMoved
		case len(groups[key]):
			fate[key] = CopyRemoved
			for _, ref := range sortedRefs(log) {
				if en := log[ref][key]; en != nil {
					back[ref] = append(back[ref], en.update(key, msg))
				}
			}
		default:
			fate[key], why[key] = CopyKept, fmt.Sprintf("%s changed meanwhile: it places some of the workload's groups on %s, not all", homeName, rep.Destination)
		}
	}
	if len(back) > 0 {
		e.log.Debug("removing a drained destination's groups failed: taking the copies out again", "stores", len(back))
	}
	// A store's undo is one write; one workload that another writer
	// changed meanwhile is refused as stale, and the others are undone
	// without it.
	changed := map[renderer.StoreRef]map[string]bool{}
	for len(back) > 0 {
		next := storeUpdates{}
		for _, r := range e.publishStores(ctx, ctx, plat, stores, back, nil, "") {
			var se *statestore.StaleError
			if errors.As(r.Err, &se) && len(back[r.Store]) > 1 {
				if changed[r.Store] == nil {
					changed[r.Store] = map[string]bool{}
				}
				changed[r.Store][se.Workload] = true
				next[r.Store] = slices.DeleteFunc(slices.Clone(back[r.Store]), func(u statestore.Update) bool { return u.Workload == se.Workload })
				continue
			}
			rep.Undo = append(rep.Undo, r)
		}
		back = next
	}
	slices.SortFunc(rep.Undo, func(a, b StoreReport) int { return strings.Compare(a.Store.String(), b.Store.String()) })
	undone := map[renderer.StoreRef]error{}
	for _, r := range rep.Undo {
		undone[r.Store] = r.Err
	}
	for key, f := range fate {
		if f != CopyRemoved {
			continue
		}
		// Every store the workload's records went into must be put back:
		// a record left behind would place the group where it is not.
		for _, ref := range sortedRefs(log) {
			if log[ref][key] == nil {
				continue
			}
			var se *statestore.StaleError
			if err := undone[ref]; changed[ref][key] || errors.As(err, &se) && se.Workload == key {
				fate[key], why[key] = CopyKept, fmt.Sprintf("another writer changed the workload in %s after the drain copied it there, so the drain left it as that writer made it", ref)
				break
			} else if err != nil {
				fate[key], why[key] = CopyKept, fmt.Sprintf("removing the copy from %s failed: %v", ref, err)
				break
			}
		}
	}
	for i := range rep.Moves {
		m := &rep.Moves[i]
		if log[storeOf[m.To]][m.Workload] == nil {
			continue // nothing of this group was copied
		}
		m.Copy, m.Why = fate[m.Workload], why[m.Workload]
		rep.Unfinished = rep.Unfinished || m.Copy == CopyKept || m.Copy == CopyUnchecked
	}
}

// update is the undo of entry en of workload key: what the store held
// before the drain, planned only on what the drain wrote there.
func (en *undoEntry) update(key string, msg statestore.Message) statestore.Update {
	u := statestore.Update{Workload: key, Files: maps.Clone(en.files), Aggregates: en.aggregates, Destinations: en.dests, Message: msg,
		Basis: &statestore.Basis{Record: en.wrote.Record, Files: en.wrote.Files}}
	if en.rec != nil {
		r := cloneRecord(*en.rec)
		u.Record = &r
	}
	if u.Files == nil {
		u.Files = map[string][]byte{}
	}
	return u
}

// workloads are the workloads of the log, sorted.
func (l undoLog) workloads() []string {
	var keys []string
	for _, byKey := range l {
		for k := range byKey {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// homeRecord is workload key's record in the drained destination's store
// as read after the failure (nil: none), or why it could not be read.
func homeRecord(snap statestore.Snapshot, serr error, key string) (*statestore.Record, error) {
	if serr != nil {
		return nil, serr
	}
	p := statestore.RecordPath(key)
	data, err := snap.ReadFile(p)
	if errors.Is(err, statestore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := statestore.DecodeRecord(p, data)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func placedOnIn(r statestore.Record, group, dest string) bool {
	for _, p := range r.Placements {
		if p.Group == group && slices.Contains(p.Destinations, dest) {
			return true
		}
	}
	return false
}

// removalFailed reports whether the drained destination's store (home)
// was to be written and was not.
func removalFailed(reps []StoreReport, home renderer.StoreRef) bool {
	for _, r := range reps {
		if r.Store == home {
			return r.Err != nil
		}
	}
	return false
}

// failHome is reps with the drained destination's store (home) failed
// with err, in store order: an attempt after a stale write that could not
// begin leaves the earlier attempt's report, and why it ended.
func failHome(reps []StoreReport, home renderer.StoreRef, name string, err error) []StoreReport {
	out := slices.Clone(reps)
	fail := StoreReport{Store: home, Name: name, Err: &statestore.StoreError{Store: name, Op: "drain", Err: fmt.Errorf("not written: a write was stale, and computing the drain again failed: %w", err)}}
	for i, r := range out {
		if r.Store == home {
			out[i] = fail
			return out
		}
	}
	out = append(out, fail)
	slices.SortFunc(out, func(a, b StoreReport) int { return strings.Compare(a.Store.String(), b.Store.String()) })
	return out
}
