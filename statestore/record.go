package statestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

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
	Placements []Placement `json:"placements,omitempty"`
	// DefaultSelector is a promise workflow's root destination selector, which
	// later resource workflows of the same promise inherit.
	DefaultSelector map[string]string `json:"defaultSelector,omitempty"`
	// Objects are the Kubernetes objects the workload's files hold, per
	// destination section, so later renders of other workloads can refuse a
	// duplicate that would break Flux's build without reading these files.
	Objects []Object `json:"objects,omitempty"`
	// Files are the paths the workload owns in this store (filled in by the planner).
	Files []string `json:"files"`
	// Sealed are the workload's files (or aggregate parts) in this store
	// that hold Secrets render encrypted with SOPS, by path (see
	// SealedFile).
	Sealed map[string]SealedFile `json:"sealed,omitempty"`
}

// SealedFile lets a render keep a file of encrypted Secrets as the store
// holds it while its plaintext does not change: SOPS's output is random,
// and encrypting again on every render would rewrite the file each time.
// Plain is a keyed digest of the plaintext and the recipients it was
// encrypted to, whose key render holds and the store does not (see
// internal/secrets.Digest); Stored is the SHA-256 of the bytes written.
// Neither helps guess a value.
type SealedFile struct {
	Plain  string `json:"plain"`
	Stored string `json:"stored"`
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

// KratixOrder is where a workload's documents sort in an aggregated file:
// Kratix orders them by the names of the WorkPlacements they came from,
// <work>-<five random characters>.<destination>-<group id>, and a Work is
// named after its identifier (<promise>-<pipeline>, <promise>-static-deps,
// <promise>-<resource>-<pipeline>) cut as KratixWorkName cuts it. The
// random part is not known, so two Works one of whose names begins with
// the other's and a dash may sort otherwise than in Kratix; a Promise
// with a pipelineNamespace names its resources' Works with the namespace
// too, which this key leaves out.
func KratixOrder(workload string) string {
	parts := strings.Split(workload, "/")
	id := workload
	switch {
	case len(parts) == 3 && parts[0] == "promise" && parts[2] == ".static-dependencies":
		id = parts[1] + "-static-deps"
	case len(parts) == 3 && parts[0] == "promise":
		id = parts[1] + "-" + parts[2]
	case len(parts) == 5 && parts[0] == "resource":
		id = parts[2] + "-" + parts[3] + "-" + parts[4]
	}
	return KratixWorkName(id) + "-"
}

// KratixWorkName is the name Kratix gives a Work of identifier id, before
// its random five characters: id cut to 55 characters when longer than 56,
// without trailing characters that are not letters or digits.
func KratixWorkName(id string) string {
	if len(id) > 56 {
		id = id[:55]
	}
	return strings.TrimRightFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
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
	c.Placements = append([]Placement(nil), r.Placements...)
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

// AggregateTarget returns the aggregated file that p, a part of workload
// (see AggregatePath), contributes to.
func AggregateTarget(p, workload string) (string, bool) {
	prefix := layout.MetaDir + "/aggregate/"
	suffix := "/" + workload + ".part"
	if !strings.HasPrefix(p, prefix) || !strings.HasSuffix(p, suffix) {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimPrefix(p, prefix), suffix), true
}

// ReadRecord reads the record at p in snap: nil, and no error, when there is
// none.
func ReadRecord(snap Snapshot, p string) (*Record, error) {
	data, err := snap.ReadFile(p)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := DecodeRecord(p, data)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ReadRecords reads every record in a snapshot; backends use it to
// implement Store.Records.
func ReadRecords(snap Snapshot) ([]Record, error) {
	paths, err := snap.List(RecordsDir)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(paths))
	for _, p := range paths {
		if !strings.HasSuffix(p, ".json") {
			continue
		}
		r, err := ReadRecord(snap, p)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}
