package chaos

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// workloadKey is the record key render gives workload w.
func workloadKey(w Workload) string {
	if w.Resource {
		return statestore.WorkloadKey("resource", "db", "team", w.Name, "configure")
	}
	return statestore.WorkloadKey("promise", w.Name, "", "", "configure")
}

// filePath is where file f of workload w goes in destination d.
func filePath(w Workload, d, f string) string {
	name := w.Name + "-" + f + ".yaml"
	switch {
	case flatDests[d]:
		return path.Join(d, name)
	case w.Resource:
		return path.Join(d, "resources/team/db", w.Name, "configure/5058f", name)
	}
	return path.Join(d, "dependencies", w.Name, "configure/5058f", name)
}

// canary reports whether p is one of Kratix's canary files.
func canary(p string) bool {
	d, rest, _ := strings.Cut(p, "/")
	if !slices.Contains(dests, d) {
		return false
	}
	if flatDests[d] {
		return rest == "kratix-canary-namespace.yaml" || rest == "kratix-canary-configmap.yaml"
	}
	return rest == "dependencies/kratix-canary-namespace.yaml" || rest == "resources/kratix-canary-configmap.yaml"
}

var opLine = regexp.MustCompile(`(?m)^  op: "([^"]*)"$`)

// s3Tombstone starts the object that replaces a removed workload's record
// in S3 (which has no conditional delete): no record.
var s3Tombstone = []byte(`{"s3Tombstone":"`)

// check checks a trial's final state against what its renders did and
// said, and returns every violation of the campaign's rules:
//
//  1. every render that exited 0 is in the final state, unless a later
//     render of the same workload replaced it (a render that started after
//     it ended);
//  2. no workload is a mix of two renders: its files, in every destination
//     its record places it on, are exactly one render's output;
//  3. no file belongs to no workload (canaries and render's own files
//     aside), and the records match the files (every file a record lists
//     exists, no file has two owners, index entries follow the records);
//  4. nothing a writer holds only while it works (a group-commit request,
//     pending or overtaken, a lock) is left, unless a render that did not
//     land left it and no render wrote after that one ended;
//  5. a render that exited non-zero left its whole update or nothing, and
//     one that said nothing was written wrote nothing;
//  6. every destination builds as Flux builds it, from what Flux reads.
func check(s Schedule, runs []*run, st *State) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	// Records and ownership (rule 3). An S3 record may name a write that
	// did not commit (s3Pending, see s3store's withPending): its paths are
	// the workload's until its next write.
	records := map[string]*statestore.Record{}
	owner := map[string]string{}
	unfinished := map[string]bool{}
	for _, p := range sortedKeys(st.Files) {
		b := st.Files[p]
		if !strings.HasPrefix(p, statestore.RecordsDir+"/") {
			continue
		}
		if bytes.HasPrefix(b, s3Tombstone) {
			continue
		}
		r, err := statestore.DecodeRecord(p, b)
		if err != nil {
			bad("rule 3: %v", err)
			continue
		}
		if statestore.RecordPath(r.Workload) != p {
			bad("rule 3: record %s names workload %s", p, r.Workload)
			continue
		}
		records[r.Workload] = &r
		var probe struct {
			Pending []string `json:"s3Pending"`
		}
		if json.Unmarshal(b, &probe) == nil && len(probe.Pending) > 0 {
			unfinished[r.Workload] = true
			for _, f := range probe.Pending {
				if !slices.Contains(r.Files, f) {
					owner[f] = r.Workload
				}
			}
		}
		for _, f := range r.Files {
			// An unfinished S3 write may have deleted files its record
			// still lists (rule 5 checks that one is allowed).
			if _, ok := st.Files[f]; !ok && !unfinished[r.Workload] {
				bad("rule 3: the record of %s lists %s, which the store does not hold", r.Workload, f)
			}
			if o, ok := owner[f]; ok {
				bad("rule 3: %s is owned by %s and by %s", f, o, r.Workload)
			}
			owner[f] = r.Workload
		}
		for p, want := range bookkeeping.IndexPaths(&r) {
			if got, ok := st.Files[p]; (!ok || !bytes.Equal(got, want) || owner[p] != r.Workload) && !(unfinished[r.Workload] && !ok) {
				bad("rule 3: the placement index entry %s of %s is missing or not the record's", p, r.Workload)
			}
		}
	}
	for _, p := range sortedKeys(st.Files) {
		d, rest, _ := strings.Cut(p, "/")
		switch {
		case strings.HasPrefix(p, "../"):
			bad("rule 3: %s is outside the store's path", strings.TrimPrefix(p, "../"))
		case p == bookkeeping.IndexMarker, strings.HasPrefix(p, ".render/load/"), strings.HasPrefix(p, statestore.RecordsDir+"/"):
		case aggDests[d] != "" && rest == aggDests[d]: // built from the parts, checked below
		case canary(p):
		case slices.Contains(dests, d) && strings.HasPrefix(rest, ".render/"): // S3's completeness markers
		case owner[p] != "":
		default:
			bad("rule 3: %s belongs to no workload", p)
		}
	}

	// Each workload (rules 1, 2, 5).
	for i, w := range s.Workloads {
		key := workloadKey(w)
		rec := records[key]
		delete(records, key)
		var mine []*run
		for _, r := range runs {
			if r.workload == i && r.kind != Drain {
				mine = append(mine, r)
			}
		}
		if unfinished[key] {
			// A write that did not commit: S3 shows what it uploaded (and
			// what it deleted) until the workload's next write, which
			// finishes it. That is only right while no render of the
			// workload landed since.
			var gone *run
			for _, r := range mine {
				if r.outcome != Landed && (gone == nil || r.end > gone.end) {
					gone = r
				}
			}
			if gone == nil {
				bad("rule 5: %s holds an unfinished write, though every render of it landed", w.Name)
			}
			for _, r := range mine {
				if gone != nil && r.outcome == Landed && r.start > gone.end {
					bad("rule 5: %s holds an unfinished write, though %s landed after %s ended", w.Name, r.label, gone.label)
					break
				}
			}
			continue
		}
		// The value: which render's output the store holds, if any.
		var value *run
		if rec != nil {
			keys := map[string]bool{}
			byDest := map[string][]string{}
			for _, f := range rec.Files {
				d, _, _ := strings.Cut(f, "/")
				if strings.HasPrefix(f, ".render/") {
					if d = partDest(f); d == "" {
						continue
					}
				}
				byDest[d] = append(byDest[d], f)
				ms := opLine.FindAllSubmatch(st.Files[f], -1)
				if len(ms) == 0 {
					bad("rule 2: %s of %s holds no render's mark", f, w.Name)
					continue
				}
				for _, m := range ms {
					keys[string(m[1])] = true
				}
			}
			switch len(keys) {
			case 0:
				bad("rule 2: %s has a record and no files", w.Name)
				continue
			case 1:
			default:
				bad("rule 2: %s is a mix of renders %s", w.Name, strings.Join(sortedKeys(keys), ", "))
				continue
			}
			k := sortedKeys(keys)[0]
			var same []*run
			for _, r := range mine {
				if r.key == k && r.kind == Configure {
					same = append(same, r)
				}
			}
			if len(same) == 0 {
				bad("rule 2: %s holds %s, which no render of it wrote", w.Name, k)
				continue
			}
			value = same[0]
			// Exactly that render's files, in every destination it is placed on.
			placed := map[string]bool{}
			for _, p := range rec.Placements {
				for _, d := range p.Destinations {
					placed[d] = true
				}
			}
			if got := sortedKeys(placed); !slices.Equal(got, sortedKeys(byDest)) {
				bad("rule 3: %s is placed on %v but has files in %v", w.Name, got, sortedKeys(byDest))
			}
			if w.Resource && len(placed) != 1 {
				bad("rule 2: resource %s is placed on %d destinations: %v", w.Name, len(placed), sortedKeys(placed))
			}
			for _, d := range sortedKeys(byDest) {
				want := map[string]string{}
				if name := aggDests[d]; name != "" {
					var docs []string
					for _, f := range value.files {
						docs = append(docs, document(w.Name, f, value.key, value.pad))
					}
					want[statestore.AggregatePath(d+"/"+name, key)] = strings.Join(docs, "\n---\n")
				}
				for _, f := range value.files {
					if aggDests[d] == "" {
						want[filePath(w, d, f)] = document(w.Name, f, value.key, value.pad)
					}
				}
				got := map[string]string{}
				for _, f := range byDest[d] {
					got[f] = string(st.Files[f])
				}
				if !maps.Equal(got, want) {
					bad("rule 2: %s in %s holds %v, not exactly the files of %s %v", w.Name, d, sortedKeys(got), value.label, sortedKeys(want))
				}
			}
		}
		// Rules 1 and 5: the value must be one a render may have left last.
		// candidates are the renders whose result the value is.
		var candidates []*run
		said := "nothing (no record)"
		initial := false
		if value != nil {
			said = "the output of " + value.label
			for _, r := range mine {
				if r.key == value.key && r.kind == Configure && r.outcome != Nothing {
					candidates = append(candidates, r)
				}
			}
			if len(candidates) == 0 {
				bad("rule 5: %s holds the files of %s, which said nothing was written", w.Name, value.label)
				continue
			}
		} else {
			initial = !w.Setup
			for _, r := range mine {
				if r.kind == Delete && r.outcome != Nothing {
					candidates = append(candidates, r)
				}
			}
		}
		// A candidate can be last unless a render that landed started
		// after it ended.
		var superseded []string
		possible := false
		if initial {
			possible = true
			for _, r := range mine {
				if r.outcome == Landed && !(value == nil && r.kind == Delete) {
					possible = false
					superseded = append(superseded, r.label+" landed")
				}
			}
		}
		for _, c := range candidates {
			ok := true
			for _, r := range mine {
				if r != c && r.outcome == Landed && r.start > c.end && !sameValue(r, c) {
					ok = false
					superseded = append(superseded, fmt.Sprintf("%s landed after %s ended", r.label, c.label))
				}
			}
			possible = possible || ok
		}
		if !possible {
			bad("rule 1: %s holds %s, but %s", w.Name, said, strings.Join(superseded, "; "))
		}
	}
	for _, k := range sortedKeys(records) {
		bad("rule 3: a record of %s, which no render of the trial writes", k)
	}

	// An aggregated file holds exactly its parts' documents.
	for d, name := range aggDests {
		target := d + "/" + name
		// The documents of a workload with an unfinished write are its
		// next write's to put right.
		skip := func(doc string) bool {
			for _, w := range s.Workloads {
				if unfinished[workloadKey(w)] && strings.Contains(doc, "\n  name: "+w.Name+"-") {
					return true
				}
			}
			return false
		}
		var parts, docs []string
		for _, p := range sortedKeys(st.Files) {
			if strings.HasPrefix(p, partsDir(target)) {
				parts = append(parts, slices.DeleteFunc(splitDocs(st.Files[p]), skip)...)
			}
		}
		docs = slices.DeleteFunc(splitDocs(st.Files[target]), skip)
		slices.Sort(parts)
		slices.Sort(docs)
		if !slices.Equal(parts, docs) {
			bad("rule 2: %s does not hold exactly the documents of its parts (%d documents, %d in parts)", target, len(docs), len(parts))
		}
	}

	// A drain that exited 0 left no resource on the drained destination.
	for _, r := range runs {
		if r.kind == Drain && r.outcome == Landed && r.code == 0 {
			for p, o := range owner {
				if strings.HasPrefix(o, "resource/") && strings.HasPrefix(p, drained+"/") {
					bad("drain: %s exited 0, but %s of %s is still on %s", r.label, p, o, drained)
					break
				}
			}
		}
	}

	// Rule 4: a writer that landed lets go of what it held; one that did
	// not may leave it, until its lease ends (a lock) or until the next
	// write of the branch carries it or deletes it (a request, pending or
	// overtaken: see gitstore's turn and overtaken).
	var gone []*run // renders that did not land
	for _, r := range runs {
		if r.outcome != Landed {
			gone = append(gone, r)
		}
	}
	for _, l := range st.Leftovers {
		if len(gone) == 0 {
			bad("rule 4: left behind, though every render landed: %s", l.Name)
			continue
		}
		lastGone := slices.MaxFunc(gone, func(a, b *run) int { return cmp.Compare(a.end, b.end) })
		for _, r := range runs {
			if r.outcome == Landed && r.start > lastGone.end && l.Expires.IsZero() && strings.Contains(r.stdout, ": wrote ") {
				bad("rule 4: left behind: %s, though %s wrote after %s, the last render that did not land, had ended", l.Name, r.label, lastGone.label)
				break
			}
		}
		if !l.Expires.IsZero() && st.Read.After(l.Expires.Add(2*time.Second)) && lastStart(runs).After(l.Expires.Add(time.Second)) {
			bad("rule 4: left behind after its lease ended (%s): %s", l.Expires.Format(time.TimeOnly), l.Name)
		}
	}

	// Rule 6: what Flux reads builds, and (OCI) it is what the state holds.
	for _, d := range dests {
		files := map[string][]byte{}
		for p, b := range st.Files {
			if rest, ok := strings.CutPrefix(p, d+"/"); ok && !strings.HasPrefix(rest, ".render/") {
				files[rest] = b
			}
		}
		if st.Published != nil {
			pub := st.Published[d]
			if !maps.EqualFunc(pub, files, bytes.Equal) {
				// A writer that died between its commit and moving the
				// destination's tag leaves the artifact behind the state
				// until the next writer holds the lock; Flux then reads
				// the older state, whole.
				if why := lagging(runs); why != "" {
					bad("rule 6: the artifact of %s holds %v, the state %v, %s", d, sortedKeys(pub), sortedKeys(files), why)
				}
				for _, w := range s.Workloads {
					keys := map[string]bool{}
					for p, b := range pub {
						for _, doc := range splitDocs(b) {
							if ownedBy(w, d, p) || aggDests[d] != "" && strings.Contains(doc, "\n  name: "+w.Name+"-") {
								if m := opLine.FindStringSubmatch(doc); m != nil {
									keys[m[1]] = true
								}
							}
						}
					}
					if len(keys) > 1 {
						bad("rule 2: the artifact of %s holds a mix of renders of %s: %s", d, w.Name, strings.Join(sortedKeys(keys), ", "))
					}
				}
			}
			files = pub
		}
		if _, err := fluxcheck.CheckDestination(files); err != nil {
			bad("rule 6: %s does not build as Flux builds it: %v", d, err)
		}
	}
	return out
}

// lagging says why an artifact may not lag behind the state: "" when a
// render died or gave up after which no render wrote.
func lagging(runs []*run) string {
	var gone *run
	for _, r := range runs {
		if r.outcome != Landed && (gone == nil || r.end > gone.end) {
			gone = r
		}
	}
	if gone == nil {
		return "though every render landed"
	}
	for _, r := range runs {
		if r.outcome == Landed && r.start > gone.end && strings.Contains(r.stdout, ": wrote ") {
			return fmt.Sprintf("though %s wrote after %s, the last render that did not land, had ended", r.label, gone.label)
		}
	}
	return ""
}

// ownedBy reports whether p, relative to destination d, is a file of
// workload w's layout.
func ownedBy(w Workload, d, p string) bool {
	for _, f := range []string{"a", "b", "c"} {
		if path.Join(d, p) == filePath(w, d, f) {
			return true
		}
	}
	return false
}

// partsDir is the folder of an aggregated file's parts, with its slash.
func partsDir(target string) string { return path.Join(".render/aggregate", target) + "/" }

// partDest is the destination of an aggregated file's part, or "".
func partDest(p string) string {
	for d, name := range aggDests {
		if strings.HasPrefix(p, partsDir(d+"/"+name)) {
			return d
		}
	}
	return ""
}

// splitDocs splits an aggregated file (or a part) into its documents.
func splitDocs(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\n---\n")
}

// lastStart is when the last render of a trial started.
func lastStart(runs []*run) time.Time {
	var t time.Time
	for _, r := range runs {
		if r.began.After(t) {
			t = r.began
		}
	}
	return t
}

// sameValue reports whether two runs leave the same value: two deletes, or
// two renders of the same output.
func sameValue(a, b *run) bool { return a.kind == b.kind && (a.kind == Delete || a.key == b.key) }
