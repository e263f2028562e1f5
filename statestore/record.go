package statestore

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"

	"github.com/render-dev/render/internal/layout"
)

// RecordFormat is the version of the record layout.
const RecordFormat = 1

// Record is what a store remembers about one workload: which files it owns
// and where its groups were placed. It is stored as JSON at
// RecordPath(Workload), and it is the only state render keeps.
type Record struct {
	Format   int    `json:"format"`
	Workload string `json:"workload"`
	// Type is "promise" or "resource".
	Type      string `json:"type"`
	Promise   string `json:"promise"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Pipeline  string `json:"pipeline"`
	// Flavour is the resource's flavour label value, used for spreading.
	Flavour string `json:"flavour,omitempty"`
	// Placements are the workload's groups and the destinations each went to,
	// across every store.
	Placements []layout.Placement `json:"placements,omitempty"`
	// DefaultSelector is a promise workflow's root destination selector, which
	// later resource workflows of the same promise inherit.
	DefaultSelector map[string]string `json:"defaultSelector,omitempty"`
	// Objects are the Kubernetes objects the workload's files hold, per
	// destination section, so later renders of other workloads can refuse a
	// duplicate that would break Flux's build without reading these files.
	Objects []layout.Object `json:"objects,omitempty"`
	// Files are the paths the workload owns in this store (filled in by the planner).
	Files []string `json:"files"`
}

// WorkloadKey is the stable identity of a workflow's output: its type,
// promise, pipeline and, for resources, namespace and name. Every part must
// already be a valid Kubernetes name (no slashes).
func WorkloadKey(typ, promise, namespace, name, pipeline string) string {
	if typ == "promise" {
		return path.Join("promise", promise, pipeline)
	}
	return path.Join("resource", namespace, promise, name, pipeline)
}

// StaticWorkloadKey is the key of a Promise's static dependencies
// (spec.dependencies), a promise workload without a pipeline. Its last
// part starts with a dot, which no pipeline name does.
func StaticWorkloadKey(promise string) string {
	return path.Join("promise", promise, ".static-dependencies")
}

// RecordPath is where a workload's record lives, relative to the store path.
func RecordPath(workload string) string {
	return path.Join(layout.MetaDir, "workloads", workload+".json")
}

// RecordsDir holds every record.
var RecordsDir = path.Join(layout.MetaDir, "workloads")

// AggregatePath is where a workload's contribution to an aggregated file lives.
func AggregatePath(target, workload string) string {
	return path.Join(layout.MetaDir, "aggregate", target, workload+".part")
}

// Encode renders the record deterministically: the same record always gives
// the same bytes, so an unchanged render rewrites nothing.
func (r *Record) Encode() []byte {
	c := *r
	c.Format = RecordFormat
	c.Files = append([]string(nil), r.Files...)
	sort.Strings(c.Files)
	c.Placements = append([]layout.Placement(nil), r.Placements...)
	sort.Slice(c.Placements, func(i, j int) bool { return c.Placements[i].Group < c.Placements[j].Group })
	for i := range c.Placements {
		d := append([]string(nil), c.Placements[i].Destinations...)
		sort.Strings(d)
		c.Placements[i].Destinations = d
	}
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		panic(err) // only plain strings and slices: cannot fail
	}
	return append(b, '\n')
}

// DecodeRecord parses a record written by Encode.
func DecodeRecord(p string, b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("record %s: %w", p, err)
	}
	if r.Format > RecordFormat {
		return r, fmt.Errorf("record %s: format %d is newer than this render understands (%d)", p, r.Format, RecordFormat)
	}
	return r, nil
}
