package bookkeeping

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// The placement index lets a render learn what it needs from a store by
// looking up a few paths, whatever the number of workloads the store holds:
//
//   - its own record, at RecordPath;
//   - the records of its promise's workflows, in one folder
//     (.render/workloads/promise/<promise>/);
//   - how many resources each candidate destination holds, by flavour, from
//     the names of the entries below .render/placed/<destination>/ (no
//     content is read);
//   - which workload holds a Kubernetes object in a destination, from the
//     object's claim file (see ClaimPath).
//
// An index entry is an empty-looking file per workload, group and
// destination: .render/placed/<destination>/<type>/<flavour>/<hash>, whose
// content is the workload's key (so that drain can name the workloads on a
// destination by reading only theirs). The entries of a workload are a pure
// function of its record (IndexPaths), so planner.PlanUpdate keeps them in step
// with the record on every write and every re-plan, with no record of its
// own listing them.
//
// A store written before the index existed has records but no IndexMarker.
// Such a store is read the old way (every record) and is migrated by its
// next write: that write adds the index entries and claims of every record
// it finds, and the marker, in the same commit or upload.

// IndexDir holds the placement index.
var IndexDir = path.Join(layout.MetaDir, "placed")

// IndexMarker is written with the index; a store that has records and no
// marker predates the index.
var IndexMarker = path.Join(layout.MetaDir, "index.json")

// indexMarkerData is the marker's content.
var indexMarkerData = []byte("{\"format\": 1}\n")

// IndexMarkerData is the content of IndexMarker.
func IndexMarkerData() []byte { return append([]byte(nil), indexMarkerData...) }

// noFlavour is the flavour folder of a resource without a flavour. A label
// value cannot be "_", so it cannot be a flavour's name.
const noFlavour = "_"

// IndexPaths returns the index entries of a record, with their content.
// Every placement on every destination is one entry, so a resource with two
// groups on one destination counts twice there, as the spread strategy
// counts it.
func IndexPaths(r *statestore.Record) map[string][]byte {
	if r == nil || len(r.Placements) == 0 {
		return nil
	}
	out := map[string][]byte{}
	content := []byte(r.Workload + "\n")
	flavour := r.Flavour
	if flavour == "" {
		flavour = noFlavour
	}
	for _, p := range r.Placements {
		sum := sha256.Sum256([]byte(r.Workload + "\x00" + p.Group))
		name := hex.EncodeToString(sum[:10])
		for _, d := range p.Destinations {
			if d == "" || strings.Contains(d, "/") {
				continue
			}
			var dir string
			if r.Type == "resource" {
				dir = path.Join(IndexDir, d, r.Type, flavour)
			} else {
				dir = path.Join(IndexDir, d, r.Type)
			}
			out[path.Join(dir, name)] = content
		}
	}
	return out
}

// IndexEntry is what an index entry's path says:
// .render/placed/<Destination>/resource/<Flavour>/<Name> for a resource
// (Flavour is "_" for one without a flavour),
// .render/placed/<Destination>/<Type>/<Name> otherwise.
type IndexEntry struct {
	Destination, Type, Flavour, Name string
}

// Resource reports whether the entry is a placed resource group, which is
// what the spread strategy counts.
func (e IndexEntry) Resource() bool { return e.Type == "resource" }

// ParseIndexPath reads an index entry's path (relative to the store); ok
// is false for any other path. It is the one place that knows the index's
// layout besides IndexPaths, which writes it.
func ParseIndexPath(p string) (e IndexEntry, ok bool) {
	rel, ok := strings.CutPrefix(p, IndexDir+"/")
	if !ok {
		return e, false
	}
	parts := strings.Split(rel, "/")
	switch {
	case len(parts) == 4 && parts[1] == "resource":
		return IndexEntry{Destination: parts[0], Type: parts[1], Flavour: parts[2], Name: parts[3]}, true
	case len(parts) == 3 && parts[1] != "resource":
		return IndexEntry{Destination: parts[0], Type: parts[1], Name: parts[2]}, true
	}
	return IndexEntry{}, false
}

// Indexed reports whether snap has the placement index. A store with no
// records at all counts as indexed once anything is written to it; until
// then there is nothing to index. A snapshot that tells it by other means
// declares it (SnapshotCapabilities.Indexed: one that can tell a store
// that holds no record yet, indexed since nothing predates the index,
// from one whose records predate the index, without reading every
// record, as an S3 bucket's does: see s3store's ensureIndexed) and
// answers itself; for any other, the marker is looked up.
func Indexed(snap statestore.Snapshot) (bool, error) {
	if indexed := snap.Capabilities().Indexed; indexed != nil {
		return indexed()
	}
	exists, _, err := snap.Compare(IndexMarker, nil)
	return exists, err
}

// Facts is what a render needs to know from one store.
type Facts struct {
	// Own is the workload's own record, nil when the store has none.
	Own *statestore.Record
	// Promise holds the records of the workload's promise's workflows
	// (every pipeline), the workload's own excluded.
	Promise []statestore.Record
	// Siblings are the other records in the workload's record folder: a
	// resource's other pipelines (a promise's are in Promise).
	Siblings []statestore.Record
	// All is every record, read only from a store that predates the
	// index (nil otherwise): the load and the duplicate check use it.
	All []statestore.Record
}

// ReadFacts looks up what a render of workload (of promise) needs from snap.
// On an indexed store it reads a few paths; on a store that predates the
// index it reads every record, as render did before.
func ReadFacts(snap statestore.Snapshot, workload, promise string) (Facts, error) {
	var f Facts
	indexed, err := Indexed(snap)
	if err != nil {
		return f, err
	}
	if !indexed {
		all, err := statestore.ReadRecords(snap)
		if err != nil {
			return f, err
		}
		f.All = all
		for i := range all {
			switch {
			case all[i].Workload == workload:
				r := all[i]
				f.Own = &r
			case all[i].Type == "promise" && all[i].Promise == promise:
				f.Promise = append(f.Promise, all[i])
			case path.Dir(statestore.RecordPath(all[i].Workload)) == path.Dir(statestore.RecordPath(workload)):
				f.Siblings = append(f.Siblings, all[i])
			}
		}
		return f, nil
	}
	if workload == "" && promise == "" {
		return f, nil // no workload's records (a drain, a prune): nothing to read
	}
	promiseDir := ""
	if promise != "" {
		promiseDir = path.Join(statestore.RecordsDir, "promise", promise)
	}
	ownDir := path.Dir(statestore.RecordPath(workload))
	if ownDir == promiseDir {
		ownDir = ""
	}
	var dirs []string
	for _, d := range []string{promiseDir, ownDir} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	statestore.Prefetch(snap, statestore.Hint{Reads: []string{statestore.RecordPath(workload)}, Dirs: dirs})
	if f.Own, err = statestore.ReadRecord(snap, statestore.RecordPath(workload)); err != nil {
		return f, err
	}
	if f.Promise, err = recordsIn(snap, promiseDir, workload); err != nil {
		return f, err
	}
	if f.Siblings, err = recordsIn(snap, ownDir, workload); err != nil {
		return f, err
	}
	return f, nil
}

// recordsIn reads the records directly in dir (none for ""), except
// workload's own.
func recordsIn(snap statestore.Snapshot, dir, workload string) ([]statestore.Record, error) {
	if dir == "" {
		return nil, nil
	}
	paths, err := snap.List(dir)
	if err != nil {
		return nil, err
	}
	var mine []string
	for _, p := range paths {
		if strings.HasSuffix(p, ".json") && path.Dir(p) == dir && p != statestore.RecordPath(workload) {
			mine = append(mine, p)
		}
	}
	statestore.Prefetch(snap, statestore.Hint{Reads: mine})
	var out []statestore.Record
	for _, p := range mine {
		r, err := statestore.ReadRecord(snap, p)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// PlacedOn returns the keys of the workloads an indexed store places on
// dest, sorted; it reads one small file per workload there.
func PlacedOn(snap statestore.Snapshot, dest string) ([]string, error) {
	dir := path.Join(IndexDir, dest)
	paths, err := snap.List(dir)
	if err != nil {
		return nil, err
	}
	statestore.Prefetch(snap, statestore.Hint{Reads: paths})
	seen := map[string]bool{}
	for _, p := range paths {
		data, err := snap.ReadFile(p)
		if errors.Is(err, statestore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k := strings.TrimSpace(string(data)); k != "" {
			seen[k] = true
		}
	}
	return sortedKeys(seen), nil
}

// CheckClaims refuses, before anything is written, an update whose objects
// another workload already holds in snap (the same check planner.PlanUpdate makes
// while writing, made early so that no store is written when another would
// refuse). On a store that predates the index, all holds every record and
// the claims are looked up there.
func CheckClaims(snap statestore.Snapshot, u statestore.Update, all []statestore.Record) error {
	if u.Record == nil {
		return nil
	}
	if all != nil {
		byClaim := map[string]*statestore.Record{}
		for i := range all {
			if all[i].Workload == u.Workload {
				continue
			}
			for _, o := range all[i].Objects {
				byClaim[ClaimPath(o)] = &all[i]
			}
		}
		for _, o := range u.Record.Objects {
			if r, ok := byClaim[ClaimPath(o)]; ok {
				mine := o
				var theirs *statestore.Object
				for _, ro := range r.Objects {
					if ClaimPath(ro) == ClaimPath(o) {
						ro := ro
						theirs = &ro
						break
					}
				}
				return &statestore.OwnedError{Owner: r.Workload, Object: &mine, OwnerObject: theirs}
			}
		}
		return nil
	}
	var paths []string
	for _, o := range u.Record.Objects {
		paths = append(paths, ClaimPath(o))
	}
	// The index entries of the placement now chosen come along: planning
	// u looks them up next (on git their folder is one request away; on
	// S3 ReadLoad listed it already).
	h := statestore.Hint{Reads: paths}
	r := *u.Record
	r.Workload = u.Workload
	for p := range IndexPaths(&r) {
		h.Paths = append(h.Paths, p)
	}
	statestore.Prefetch(snap, h)
	seen := map[string]bool{}
	for _, o := range u.Record.Objects {
		p := ClaimPath(o)
		if seen[p] {
			continue
		}
		seen[p] = true
		exists, _, err := snap.Compare(p, nil)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		if err := CheckClaim(snap, p, u.Workload, o, func() (map[string]string, error) { return nil, nil }); err != nil {
			return err
		}
	}
	return nil
}

// Migration returns the files that bring a store that predates the index
// up to date: every record's index entries and claims, and the marker. The
// first record (by workload key) to claim an object keeps it. The planner
// adds them to the write that finds the store without the marker; a
// backend whose writers of different workloads do not take turns (S3)
// writes them itself before it plans, so that no plan of a workload
// depends on them.
func Migration(snap statestore.Snapshot) (map[string][]byte, error) { return migration(snap) }

func migration(snap statestore.Snapshot) (map[string][]byte, error) {
	all, err := statestore.ReadRecords(snap)
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Workload < all[j].Workload })
	out := map[string][]byte{IndexMarker: indexMarkerData}
	for i := range all {
		for p, data := range IndexPaths(&all[i]) {
			out[p] = data
		}
		for _, o := range all[i].Objects {
			p := ClaimPath(o)
			if _, taken := out[p]; !taken {
				out[p] = encodeClaim(all[i].Workload, o)
			}
		}
	}
	return out, nil
}

// OwnMigratedClaims adds to owned the claims on old's objects that name
// old's workload although its record does not list them: a store migrated
// to the index wrote them for it (see migration).
func OwnMigratedClaims(snap statestore.Snapshot, old *statestore.Record, owned map[string]bool) error {
	var paths []string
	for _, o := range old.Objects {
		if p := ClaimPath(o); !owned[p] {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	statestore.Prefetch(snap, statestore.Hint{Reads: paths})
	for _, p := range paths {
		data, err := snap.ReadFile(p)
		if errors.Is(err, statestore.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var c claim
		if json.Unmarshal(data, &c) == nil && c.Workload == old.Workload {
			owned[p] = true
		}
	}
	return nil
}

// AddPlacements adds to a FileIndex, for the mass-deletion breaker, the
// placements an indexed store's index lists on dests (by name; paths gives
// each one's folder) of workloads other than those of known: one file per
// placement, in the destination's folder. The other workloads' files are
// not read: each placement holds at least one.
func AddPlacements(idx FileIndex, snap statestore.Snapshot, dests []string, paths map[string]string, known []statestore.Record) error {
	mine := map[string]bool{}
	for i := range known {
		for p := range IndexPaths(&known[i]) {
			mine[p] = true
		}
	}
	var dirs []string
	for _, d := range dests {
		dirs = append(dirs, path.Join(IndexDir, d))
	}
	statestore.Prefetch(snap, statestore.Hint{Dirs: dirs})
	byPath := map[string]string{}
	for p, name := range paths {
		byPath[name] = p
	}
	for _, d := range dests {
		entries, err := snap.List(path.Join(IndexDir, d))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !mine[e] {
				idx["placement:"+e] = []string{path.Join(byPath[d], "placement", path.Base(e))}
			}
		}
	}
	return nil
}
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
