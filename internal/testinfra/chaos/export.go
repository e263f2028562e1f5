package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// What the in-process campaign (internal/testinfra/chaos/sim) shares with this one:
// the trial's world (destinations, platform, documents), the readers of
// each store's final state and the checker. It runs render's engine in
// its own process instead of the binary, and so describes its renders with
// Render instead of this package's processes.

// Dests are the destinations of every trial; Drained is the one a drain
// cordons and empties.
var Dests = dests

// Drained is the destination drains cordon and empty.
const Drained = drained

// SetupFiles and SetupPad are what a workload's setup render writes.
var SetupFiles, SetupPad = setupFiles, setupPad

// PlatformYAML is a trial's platform: the store's documents (storeDocs,
// one store named "chaos" of kind storeKind, and its Secret) and the four
// destinations, d1 cordoned or not.
func PlatformYAML(storeKind, storeDocs string, cordon bool) string {
	docs := []string{storeDocs}
	for _, d := range dests {
		spec := ""
		switch {
		case aggDests[d] != "":
			spec += "  filepath: {mode: aggregatedYAML, filename: " + aggDests[d] + "}\n"
		case flatDests[d]:
			spec += "  filepath: {mode: none}\n"
		}
		if cordon && d == drained {
			spec += "  unschedulable: true\n"
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: %s
  labels: {env: chaos}
spec:
%s  stateStoreRef: {kind: %s, name: chaos}
`, d, spec, storeKind))
	}
	return strings.Join(docs, "---\n")
}

// Document is file f of a workload as the render with content key key
// writes it, pad bytes of payload.
func Document(workload, f, key string, pad int) string { return document(workload, f, key, pad) }

// WorkloadKey is the record key render gives workload w.
func WorkloadKey(w Workload) string { return workloadKey(w) }

// FilePath is where file f of workload w goes in destination d, relative
// to the store's path.
func FilePath(w Workload, d, f string) string { return filePath(w, d, f) }

// StorePath is the path of git and S3 stores inside their repository or
// bucket.
const StorePath = storePath

// Render is one render of a trial, as the checker reads it.
type Render struct {
	Label string // "setup w0", "writer 3", "final w1"
	// Key is the content key its files carry (data.op).
	Key      string
	Kind     OpKind
	Workload int // -1 for a drain
	Files    []string
	Pad      int
	// Start and End are since the trial's clock started (setup renders:
	// negative); Began is its start as a time, on the clock leases are
	// read by.
	Start, End time.Duration
	Began      time.Time
	// Code is the exit code render would have given.
	Code    int
	Outcome Outcome
	// Wrote says it reported a write ("<store>: wrote ...").
	Wrote bool
}

// Check checks a trial's final state st against its workloads and what
// its renders did and said: the rules of check.
func Check(workloads []Workload, renders []Render, st *State) []string {
	var runs []*run
	for _, r := range renders {
		rr := &run{label: r.Label, key: r.Key, kind: r.Kind, workload: r.Workload, files: r.Files, pad: r.Pad,
			start: r.Start, end: r.End, began: r.Began, code: r.Code, outcome: r.Outcome}
		if r.Wrote {
			rr.stdout = "store: wrote "
		}
		runs = append(runs, rr)
	}
	return check(Schedule{Workloads: workloads}, runs, st)
}

// ReadLocalGit reads branch main of the bare repository dir, under the
// store path prefix, and its request refs.
func ReadLocalGit(dir, prefix string) (*State, error) { return readLocalGit(dir, prefix) }

// ReadBucket reads every object of a bucket, relative to prefix.
func ReadBucket(ctx context.Context, c *minio.Client, bucket, prefix string) (*State, error) {
	return readBucket(ctx, c, bucket, prefix)
}

// ReadOCI reads an OCI store: its state and each destination's artifact.
func ReadOCI(ctx context.Context, addr, user, password, repo string) (*State, error) {
	return ociReader{addr: addr, user: user, password: password, repo: repo}.read(ctx, dests)
}
