package engine

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// storeUpdates are the updates of one render, per store: the workflow's
// own, and others it carries (a Promise's static dependencies, every
// pipeline of a resource being deleted).
type storeUpdates map[renderer.StoreRef][]statestore.Update

func (s storeUpdates) add(ref renderer.StoreRef, u statestore.Update) {
	s[ref] = append(s[ref], u)
}

func (s storeUpdates) has(ref renderer.StoreRef, key string) bool {
	for _, u := range s[ref] {
		if u.Workload == key {
			return true
		}
	}
	return false
}

// clone is s with slices of its own (the updates are copied).
func (s storeUpdates) clone() storeUpdates {
	out := storeUpdates{}
	for ref, us := range s {
		out[ref] = slices.Clone(us)
	}
	return out
}

// setBases gives every update the record of its workload that the render
// read in that store (none when the store had none), the basis the store
// refuses it on once another writer changed the record (see
// statestore.Basis).
func (s storeUpdates) setBases(recs map[renderer.StoreRef][]statestore.Record) {
	for ref, us := range s {
		for i := range us {
			b := &statestore.Basis{}
			for _, r := range recs[ref] {
				if r.Workload == us[i].Workload {
					b.Record = &r
					break
				}
			}
			us[i].Basis = b
		}
	}
}

// addPlan adds what plan writes for workload key, with its record (and the
// objects of each store), and removes the workload from the stores in
// holders that get nothing now.
func (s storeUpdates) addPlan(plan *renderer.Plan, record *statestore.Record, objects []fluxcheck.Object, key string, holders map[renderer.StoreRef]bool) {
	for _, w := range plan.Writes {
		r := *record
		for _, o := range objects {
			if o.Store == w.Store.String() {
				r.Objects = append(r.Objects, o)
			}
		}
		s.add(w.Store, statestore.Update{
			Workload: key, Files: w.Files, Shared: w.Shared, Aggregates: aggregates(w.Aggregates),
			Destinations: w.Destinations, Record: &r,
		})
	}
	for ref := range holders {
		if !s.has(ref, key) {
			s.add(ref, statestore.Update{Workload: key})
		}
	}
}

// applyAll writes a store's updates in workload order: as one change where
// the store can (git: one commit), one after the other otherwise (the
// store's ApplyAll knows which).
func applyAll(ctx context.Context, st statestore.Store, us []statestore.Update) (statestore.Result, error) {
	if len(us) == 1 {
		return st.Apply(ctx, us[0])
	}
	sort.SliceStable(us, func(i, j int) bool { return us[i].Workload < us[j].Workload })
	return st.ApplyAll(ctx, us)
}

// holdersOf returns the stores that hold a record of workload key.
func holdersOf(recs map[renderer.StoreRef][]statestore.Record, key string) map[renderer.StoreRef]bool {
	out := map[renderer.StoreRef]bool{}
	for ref, rs := range recs {
		for _, r := range rs {
			if r.Workload == key {
				out[ref] = true
			}
		}
	}
	return out
}

// sameObject reports whether record r is a workload of wf's promise (for a
// promise workflow: its pipelines and its static dependencies) or of wf's
// resource, whatever the pipeline.
func sameObject(r statestore.Record, wf renderer.Workflow) bool {
	if r.Type != string(wf.Type) || r.Promise != wf.Promise {
		return false
	}
	return wf.Type == renderer.PromiseWorkflow || (r.Namespace == wf.Namespace && r.Name == wf.Name)
}

// objectName names the promise or resource of a workflow.
func objectName(wf renderer.Workflow) string {
	if wf.Type == renderer.PromiseWorkflow {
		return "promise " + wf.Promise
	}
	return fmt.Sprintf("resource %s/%s of promise %s", wf.Namespace, wf.Name, wf.Promise)
}

func sortedRefs[V any](m map[renderer.StoreRef]V) []renderer.StoreRef {
	refs := make([]renderer.StoreRef, 0, len(m))
	for ref := range m {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// folderTaken refuses a plan that writes into a nestedByMetadata group
// folder another workload's record has files in. Kratix replaces such a
// folder whole, so two workloads sharing it overwrite each other: it
// happens when a Promise sets spec.workflows.config.pipelineNamespace and
// two resources of one name live in different namespaces.
func folderTaken(p *inputs.Platform, plan *renderer.Plan, views map[renderer.StoreRef]*storeView, key string) error {
	if plan.Workflow.FolderNamespace == "" {
		// The folder is named by the workload's own namespace and name:
		// no other workload can have files there.
		return nil
	}
	byName := map[string]renderer.Destination{}
	for _, d := range p.Destinations {
		byName[d.Name] = d
	}
	for _, g := range plan.Groups {
		for _, name := range g.Destinations {
			d := byName[name]
			v := views[d.Store]
			if d.Mode != renderer.NestedByMetadata || v == nil {
				continue
			}
			folder := path.Join(d.Path, renderer.NestedPrefix(plan.Workflow, g.ID))
			files, err := v.snap.List(folder)
			if err != nil {
				return &statestore.StoreError{Store: v.name, Op: "read", Err: err}
			}
			mine := map[string]bool{}
			if v.facts.Own != nil {
				for _, f := range v.facts.Own.Files {
					mine[f] = true
				}
			}
			taken := false
			for _, f := range files {
				if !mine[f] {
					taken = true
				}
			}
			if !taken {
				continue
			}
			// Whose files they are: every record, read only now.
			recs := v.facts.All
			if recs == nil {
				if recs, err = statestore.ReadRecords(v.snap); err != nil {
					return &statestore.StoreError{Store: v.name, Op: "read records", Err: err}
				}
			}
			for _, r := range recs {
				if r.Workload == key {
					continue
				}
				for _, f := range r.Files {
					if strings.HasPrefix(f, folder+"/") {
						why := ""
						if plan.Workflow.FolderNamespace != "" {
							why = fmt.Sprintf(" (the Promise's pipelineNamespace %s files every resource of one name in one folder, whatever its namespace)", plan.Workflow.FolderNamespace)
						}
						return &renderer.InputError{Where: d.Store.String(), Msg: fmt.Sprintf(
							"folder %s of destination %s already holds the files of workload %s%s: writing it would overwrite them; give the resources different names",
							folder, name, r.Workload, why)}
					}
				}
			}
		}
	}
	return nil
}

// placements is a plan's placements as a store records them.
func placements(p *renderer.Plan) []statestore.Placement {
	var out []statestore.Placement
	for _, pl := range p.Placements() {
		out = append(out, statestore.Placement{Group: pl.Group, Destinations: pl.Destinations, MatchLabels: pl.MatchLabels, MatchExpressions: pl.MatchExpressions})
	}
	return out
}

// aggregates is a store write's aggregated parts as a store takes them.
func aggregates(as []renderer.Aggregate) []statestore.Aggregate {
	var out []statestore.Aggregate
	for _, a := range as {
		out = append(out, statestore.Aggregate{Target: a.Target, Contribution: a.Contribution})
	}
	return out
}
