package planner

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// LegacyPart is the name, in an aggregated file's parts folder, of the
// part holding the documents Kratix wrote there for workloads render
// does not know. It sorts before every workload's part.
const LegacyPart = "kratix.part"

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
	return statestore.KratixOrder(strings.TrimSuffix(strings.TrimPrefix(part, dir+"/"), ".part")), 1
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
func (p *Plan) legacySegments(snap statestore.Snapshot, target, workload string, first, had bool, contribution []byte, content map[string][]byte) error {
	dir := path.Join(layout.MetaDir, "aggregate", target)
	changed := map[string]bool{}
	if first {
		have, err := snap.ReadFile(target)
		if errors.Is(err, statestore.ErrNotFound) {
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
				key := statestore.KratixOrder(workload)
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
	return statestore.Object{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Metadata.Name, Namespace: o.Metadata.Namespace}.Identity(), true
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
