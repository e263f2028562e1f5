package engine

import (
	"errors"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// writeSet is what the guard judges: the updates of a render, a drain or a
// prune, with the platform, the stores' views and the records read there.
type writeSet struct {
	platform *inputs.Platform
	views    map[renderer.StoreRef]*storeView
	recs     map[renderer.StoreRef][]statestore.Record
	updates  storeUpdates
	// claims are the updates whose objects are checked against other
	// workloads' claims: a render's (what its workloads write). A drain
	// or a prune moves or removes objects its records already claim, and
	// leaves that to the planner.
	claims storeUpdates
	// deleteAction is a delete workflow's render, which may empty a
	// destination.
	deleteAction bool
}

// guard is the last check before anything is written, for renders,
// drains and prunes alike. An object another workload holds in a store is
// bad input: it is refused here (an InputError naming the store), not
// when that store's turn to be written comes. Then the mass-deletion
// breaker: a refusal is returned as the error of a real write, a dry run
// gets the verdict to report, and an allowed mass deletion is logged.
func (e *Engine) guard(w writeSet) (*bookkeeping.MassDeletionError, error) {
	for _, ref := range sortedRefs(w.claims) {
		v := w.views[ref]
		if v == nil || v.facts.All != nil {
			continue // a store that predates the index: its records were checked
		}
		for _, u := range w.claims[ref] {
			if err := bookkeeping.CheckClaims(v.snap, u, nil); err != nil {
				var oe *statestore.OwnedError
				if errors.As(err, &oe) {
					err = &renderer.InputError{Where: v.name, Msg: strings.TrimPrefix(oe.Error(), statestore.ErrConflict.Error()+": ")}
				}
				return nil, err
			}
		}
	}
	md, err := e.breaker(w.platform, w.views, w.recs, w.updates, w.deleteAction)
	if err != nil {
		return nil, err
	}
	return e.checkBreaker(md)
}

// breaker runs the mass-deletion check on one render's or drain's writes,
// per store, from the records read before planning: nil when no write
// passes a limit. A write allowed by --allow-mass-deletion or by its
// store's field is listed with what allowed it, and not refused.
func (e *Engine) breaker(p *inputs.Platform, views map[renderer.StoreRef]*storeView, recs map[renderer.StoreRef][]statestore.Record, updates map[renderer.StoreRef][]statestore.Update, deleteAction bool) (*bookkeeping.MassDeletionError, error) {
	refs := make([]renderer.StoreRef, 0, len(updates))
	for ref := range updates {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	var out bookkeeping.MassDeletionError
	for _, ref := range refs {
		md, field := massDeletion(p, ref)
		var dests []string
		names := map[string]string{}
		for _, d := range p.Destinations {
			if d.Store == ref {
				dests = append(dests, d.Path)
				names[d.Path] = d.Name
			}
		}
		before := bookkeeping.IndexRecords(recs[ref])
		if v := views[ref]; v != nil && v.facts.All == nil {
			// A store with the placement index: the other workloads'
			// files are not read; each of their placements on the
			// destinations this write touches counts as one file.
			var touched []string
			for _, d := range p.Destinations {
				if d.Store == ref && (md.MaxStorePercent > 0 || holdsFiles(before, d.Path)) {
					touched = append(touched, d.Name)
				}
			}
			if err := bookkeeping.AddPlacements(before, v.snap, touched, names, recs[ref]); err != nil {
				return nil, &statestore.StoreError{Store: v.name, Op: "read placements", Err: err}
			}
		}
		perDest, total := bookkeeping.CountDeletions(before, updates[ref], dests)
		policy := bookkeeping.BreakerPolicy{MaxDestinationPercent: md.MaxDestinationPercent, MaxStorePercent: md.MaxStorePercent, DeleteAction: deleteAction}
		if trips := bookkeeping.Check(policy, perDest, total, names); len(trips) > 0 {
			st := bookkeeping.StoreTrips{Store: ref.String(), Field: field, Trips: trips}
			switch {
			case e.opts.AllowMassDeletion:
				st.AllowedBy = "--allow-mass-deletion"
			case md.Allow:
				st.AllowedBy = "spec.massDeletion.allow"
			}
			out.Stores = append(out.Stores, st)
		}
	}
	if len(out.Stores) == 0 {
		return nil, nil
	}
	out.DryRun = e.opts.DryRun
	return &out, nil
}

// holdsFiles reports whether some workload of idx has a file below dir.
func holdsFiles(idx bookkeeping.FileIndex, dir string) bool {
	for _, files := range idx {
		for _, f := range files {
			if strings.HasPrefix(f, dir+"/") {
				return true
			}
		}
	}
	return false
}

// massDeletion is a store's breaker settings and the field that allows
// mass deletion, for messages.
func massDeletion(p *inputs.Platform, ref renderer.StoreRef) (inputs.MassDeletion, string) {
	field := "spec.massDeletion.allow: true in " + ref.Kind + " " + ref.Name
	if s := p.Store(ref); s != nil {
		m := s.Meta()
		return m.MassDeletion, field + " (" + m.File + ")"
	}
	return inputs.MassDeletion{}, field
}

// checkBreaker applies the breaker's verdict: a refusal is returned as the
// error of a real render (nothing is written); a dry run carries it in its
// report; an allowed mass deletion is logged.
func (e *Engine) checkBreaker(md *bookkeeping.MassDeletionError) (*bookkeeping.MassDeletionError, error) {
	if md == nil {
		return nil, nil
	}
	if md.Refused() && !e.opts.DryRun {
		return nil, md
	}
	if !e.opts.DryRun {
		for _, s := range md.Stores {
			for _, t := range s.Trips {
				e.log.Warn("mass deletion allowed", "store", s.Store, "allowed_by", s.AllowedBy, "deletion", t.String())
			}
		}
	}
	return md, nil
}
