package statestore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/layout"
)

// Taking over a store Kratix wrote. Kratix keeps no records: what a
// workload owns follows from its layout. An Update carries an Adoption
// when its store has no record of the workload yet; PlanUpdate then counts
// what Kratix wrote for the workload as the workload's own, so the update
// replaces it (stale files vanish) and its record takes over from there:
//
//   - nestedByMetadata: every file below the workload's folders
//     (<dest>/dependencies/<promise>/<pipeline>/, or
//     <dest>/resources/<namespace>/<promise>/<name>/<pipeline>/), every
//     <id> folder of them;
//   - none: every file Kratix's ledger for the workload lists
//     (<dest>/.kratix/<namespace>-<work>.<destination>-<id>.yaml), and the
//     ledger itself, which the record replaces;
//   - aggregatedYAML: the first render that contributes to an aggregated
//     file render has no parts of keeps the documents already in it as a
//     part of their own (LegacyPart), less the documents of the workloads
//     render writes there (by object identity): the documents of workloads
//     render does not know stay.
//
// Only the folders an Adoption names are read, never the whole store.
//
// What Kratix left is evidence about the workload it names, and nothing
// more (see "Trust boundary" in docs/design.md). An Adoption may name only
// the workload's own Kratix folders and ledgers (Adoption.Check, which the
// planner and a folded git request both apply), and a ledger counts only
// when render did not write it (no record owns it), and only for the files
// it lists in its own destination that no other workload's record owns.
// So neither a ledger a workflow's output smuggled in, nor one another
// tool left listing another workload's files, nor a request asking for
// another workload's folders, can make render delete what it does not own.

// Adoption names where Kratix kept a workload's files in one store.
type Adoption struct {
	// Folders are store-relative folders whose files are the workload's:
	// each <destination path>/<the workload's Kratix folder> (see Check).
	Folders []string `json:"folders,omitempty"`
	// Ledgers find Kratix's .kratix ledgers of the workload.
	Ledgers []LedgerMatch `json:"ledgers,omitempty"`
}

// LedgerMatch finds a workload's ledgers in one .kratix folder: their
// names carry a random part (Kratix's Work name), so they are matched
// (see LedgerPattern).
type LedgerMatch struct {
	// Dir is the store-relative .kratix folder of a destination.
	Dir string `json:"dir"`
	// Namespace is the namespace of the workload's Work.
	Namespace string `json:"namespace"`
	// Work is Kratix's Work name of the workload, before its random
	// suffix (KratixWorkName of one of the workload's identifiers).
	Work string `json:"work"`
	// Destination is the destination's name, as the ledger's name holds it.
	Destination string `json:"destination"`
}

// LedgerPattern is the regular expression the names of the ledgers of a
// Work's placements on destination dest match:
// <namespace>-<work>-<5>.<dest>-<group id>.yaml, the group id as its
// first submatch.
func LedgerPattern(namespace, work, dest string) string {
	return "^" + regexp.QuoteMeta(namespace+"-"+work+"-") + `[a-z0-9]{5}\.` + regexp.QuoteMeta(dest) + `-([0-9a-f]{5})\.yaml$`
}

// Pattern is m's LedgerPattern.
func (m LedgerMatch) Pattern() string { return LedgerPattern(m.Namespace, m.Work, m.Destination) }

// defaultGroupID is Kratix's id of the default group: the first five hex
// digits of the md5 of ".".
const defaultGroupID = "5058f"

// Check reports why a may not be workload's: every folder must be the
// workload's own Kratix folder in some destination
// (<dest>/dependencies/<promise>/<pipeline>, a promise's static
// dependencies' <dest>/dependencies/<promise>/5058f, a resource's
// <dest>/resources/<namespace>/<promise>/<name>/<pipeline>, the namespace
// being the resource's or its Promise's pipeline namespace), and every
// ledger match must look in a destination's .kratix folder for ledgers of
// one of the workload's Kratix Works. An Adoption the engine made always
// passes; one read from the store (a git request) may not.
func (a *Adoption) Check(workload string) error {
	if a == nil {
		return nil
	}
	parts := strings.Split(workload, "/")
	var folder func(rel []string) bool // rel: the folder's last parts
	var works []string
	n := 0
	switch {
	case len(parts) == 3 && parts[0] == "promise" && parts[2] == ".static-dependencies":
		n = 3
		folder = func(rel []string) bool {
			return rel[0] == "dependencies" && rel[1] == parts[1] && rel[2] == defaultGroupID
		}
		works = []string{parts[1] + "-static-deps"}
	case len(parts) == 3 && parts[0] == "promise":
		n = 3
		folder = func(rel []string) bool { return rel[0] == "dependencies" && rel[1] == parts[1] && rel[2] == parts[2] }
		works = []string{parts[1] + "-" + parts[2]}
	case len(parts) == 5 && parts[0] == "resource":
		n = 5
		ns, promise, name, pipeline := parts[1], parts[2], parts[3], parts[4]
		folder = func(rel []string) bool {
			return rel[0] == "resources" && rel[1] != "" && rel[2] == promise && rel[3] == name && rel[4] == pipeline
		}
		works = []string{promise + "-" + name + "-" + pipeline, promise + "-" + name + "-" + ns + "-" + pipeline}
	default:
		return fmt.Errorf("workload %q is not a workload key render makes", workload)
	}
	for _, f := range a.Folders {
		rel := strings.Split(f, "/")
		if layout.ValidPath(f) != nil || layout.IsMeta(f) || len(rel) <= n || !folder(rel[len(rel)-n:]) {
			return fmt.Errorf("the folder %q is not a Kratix folder of workload %s", f, workload)
		}
	}
	for _, m := range a.Ledgers {
		if layout.ValidPath(m.Dir) != nil || layout.IsMeta(m.Dir) || path.Base(m.Dir) != layout.KratixDir || path.Dir(m.Dir) == "." {
			return fmt.Errorf("%q is not the %s folder of a destination", m.Dir, layout.KratixDir)
		}
		ok := false
		for _, id := range works {
			ok = ok || m.Work == KratixWorkName(id)
		}
		if !ok || m.Namespace == "" || m.Destination == "" {
			return fmt.Errorf("the ledgers %s/%s-%s-*.%s-*.yaml are not Kratix's ledgers of workload %s", m.Dir, m.Namespace, m.Work, m.Destination, workload)
		}
	}
	return nil
}

// LegacyPart is the name, in an aggregated file's parts folder, of the
// part holding the documents Kratix wrote there for workloads render
// does not know. It sorts before every workload's part.
const LegacyPart = "kratix.part"

// ledger is a .kratix ledger file.
type ledger struct {
	Files []string `yaml:"files"`
}

// adopted returns the files Kratix wrote for workload, which a names (a
// passed Check): every file below its folders, and every ledger render
// did not write with the files it lists in its own destination that no
// other workload's record owns (store-relative, as Kratix writes them).
// owners is the store's index of records (path -> workload), built only
// when a ledger is found.
func adopted(snap Snapshot, workload string, a *Adoption, owners func() (map[string]string, error)) ([]string, error) {
	if a == nil {
		return nil, nil
	}
	var out []string
	for _, dir := range a.Folders {
		files, err := snap.List(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	for _, m := range a.Ledgers {
		re, err := regexp.Compile(m.Pattern())
		if err != nil {
			return nil, fmt.Errorf("ledger pattern %q: %w", m.Pattern(), err)
		}
		names, err := snap.List(m.Dir)
		if err != nil {
			return nil, err
		}
		dest := path.Dir(m.Dir) + "/"
		for _, p := range names {
			if path.Dir(p) != m.Dir || !re.MatchString(path.Base(p)) {
				continue
			}
			idx, err := owners()
			if err != nil {
				return nil, err
			}
			if _, ours := idx[p]; ours {
				continue // render wrote it: a workflow's file, not Kratix's word
			}
			data, err := snap.ReadFile(p)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			var l ledger
			if err := yaml.Unmarshal(data, &l); err != nil {
				return nil, fmt.Errorf("Kratix ledger %s: %w", p, err)
			}
			out = append(out, p)
			for _, f := range l.Files {
				f = path.Clean(strings.TrimPrefix(f, "/"))
				if layout.ValidPath(f) != nil || layout.IsMeta(f) || !strings.HasPrefix(f, dest) || strings.HasPrefix(f, m.Dir+"/") {
					continue // not a file of the ledger's destination
				}
				if o, ok := idx[f]; ok && o != workload {
					continue // another workload's, by render's own record
				}
				out = append(out, f)
			}
		}
	}
	return out, nil
}

// Legacy segments. Kratix writes an aggregated file as the raw content of
// every file of every WorkPlacement on the destination, the WorkPlacements
// sorted by name, joined by "\n---\n". The first render that contributes
// to a file render has no parts of keeps what is there as the part
// LegacyPart; a workload that takes over documents Kratix wrote (the
// first contribution of a workload whose objects are in a legacy part)
// splits the part there: its documents, and whatever lies between them
// (the rest of its own WorkPlacements' documents, files it no longer
// writes), leave; what was before and after stays, as two segments that
// sort just before and just after the workload's own part. So the file
// keeps Kratix's order and bytes, and a workload's stale documents go with
// it. (Documents at the very edge of the workload's old run cannot be told
// from a neighbour's: they stay until the platform team removes them.)

// legacyDir holds the segments a legacy part was split into, named
// <rank>-<hex of the order key>.part: rank 0 sorts just before the
// workload whose key it is, 2 just after.
const legacyDir = "kratix"

func isLegacy(dir, part string) bool {
	return part == path.Join(dir, LegacyPart) || strings.HasPrefix(part, path.Join(dir, legacyDir)+"/")
}

// partOrder is where part (of the aggregated file whose parts are in
// dir) sorts: Kratix's order key of its workload and a rank.
func partOrder(dir, part string) (string, int) {
	switch {
	case part == path.Join(dir, LegacyPart):
		return "", 0
	case strings.HasPrefix(part, path.Join(dir, legacyDir)+"/"):
		name := strings.TrimSuffix(path.Base(part), ".part")
		rank, key, _ := strings.Cut(name, "-")
		k, _ := hex.DecodeString(key)
		r := 0
		if rank == "2" {
			r = 2
		}
		return string(k), r
	}
	return KratixOrder(strings.TrimSuffix(strings.TrimPrefix(part, dir+"/"), ".part")), 1
}

func partLess(dir, a, b string) bool {
	ka, ra := partOrder(dir, a)
	kb, rb := partOrder(dir, b)
	if ka != kb {
		return ka < kb
	}
	if ra != rb {
		return ra < rb
	}
	return a < b
}

func segmentPath(dir, key string, rank int) string {
	return path.Join(dir, legacyDir, fmt.Sprintf("%d-%s.part", rank, hex.EncodeToString([]byte(key))))
}

// chunkSep joins Kratix's documents in an aggregated file.
const chunkSep = "\n---\n"

// legacySegments brings the legacy segments among content (the parts the
// target is built from, by path) up to date for workload's contribution,
// and plans their writes. first is set when render has no part of the
// target yet: what the target holds is Kratix's, one legacy part. adopting
// is set when the workload contributes for the first time.
func (p *Plan) legacySegments(snap Snapshot, target, workload string, first, had bool, contribution []byte, content map[string][]byte) error {
	dir := path.Join(layout.MetaDir, "aggregate", target)
	changed := map[string]bool{}
	if first {
		have, err := snap.ReadFile(target)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		lp := path.Join(dir, LegacyPart)
		content[lp] = have
		changed[lp] = true
	}
	mine := map[string]bool{}
	for _, c := range strings.Split(string(contribution), chunkSep) {
		for _, id := range Identities([]byte(c)) {
			mine[id] = true
		}
	}
	if len(mine) > 0 {
		var segs []string
		for part := range content {
			if isLegacy(dir, part) {
				segs = append(segs, part)
			}
		}
		sort.Slice(segs, func(i, j int) bool { return partLess(dir, segs[i], segs[j]) })
		split := had // a workload that had a part already splits nothing
		for _, seg := range segs {
			chunks := strings.Split(string(content[seg]), chunkSep)
			var hits []int
			for i, c := range chunks {
				for _, id := range Identities([]byte(c)) {
					if mine[id] {
						hits = append(hits, i)
						break
					}
				}
			}
			if len(hits) == 0 {
				continue
			}
			changed[seg] = true
			if !split {
				// The workload's run of documents: from its first to its
				// last object, and what lies between.
				split = true
				key := KratixOrder(workload)
				before, after := chunks[:hits[0]], chunks[hits[len(hits)-1]+1:]
				content[seg] = nil
				if len(before) > 0 {
					b := segmentPath(dir, key, 0)
					content[b], changed[b] = []byte(strings.Join(before, chunkSep)), true
				}
				if len(after) > 0 {
					a := segmentPath(dir, key, 2)
					content[a], changed[a] = []byte(strings.Join(after, chunkSep)), true
				}
				continue
			}
			// Elsewhere, only the documents of objects the workload now
			// writes leave (no object is applied twice).
			var kept []string
			for i, c := range chunks {
				if !slices.Contains(hits, i) {
					kept = append(kept, c)
				}
			}
			content[seg] = []byte(strings.Join(kept, chunkSep))
		}
	}
	for _, seg := range sortedKeys(changed) {
		data := content[seg]
		if len(bytes.TrimSpace(data)) == 0 {
			delete(content, seg)
			if exists, _, err := snap.Compare(seg, nil); err != nil {
				return err
			} else if exists {
				p.Ops = append(p.Ops, Op{Path: seg, Delete: true})
			}
			continue
		}
		if exists, equal, err := snap.Compare(seg, data); err != nil {
			return err
		} else if !exists || !equal {
			p.Ops = append(p.Ops, Op{Path: seg, Data: data})
		}
	}
	return nil
}

// objectHead is what identifies a Kubernetes object in a document.
type objectHead struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
}

func (o objectHead) identity() (string, bool) {
	if o.Kind == "" || o.Metadata.Name == "" {
		return "", false
	}
	return Object{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Metadata.Name, Namespace: o.Metadata.Namespace}.Identity(), true
}

// Identities lists, sorted, the object identities of a multi-document
// YAML file (an aggregated file), as Object.Identity gives them.
func Identities(data []byte) []string {
	var out []string
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o objectHead
		if err := dec.Decode(&o); err != nil {
			break
		}
		if id, ok := o.identity(); ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
