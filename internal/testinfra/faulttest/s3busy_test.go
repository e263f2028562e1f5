package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/s3store"
)

// TestS3WritersOnBusyNode (issue 34): 16 render processes at once, each a
// new resource request of one file, into one bucket that already holds a
// workload of 3,000 files, spread over four destinations (so every one of
// them weighs the load, and announces and settles its change in a load
// summary), while a busy loop runs on every core: more writers than cores,
// with the CPU starved, as on a busy node. Every render exits 0 and lands
// (its record, no intent in it, and its file where its record places it),
// and once the last one exited nothing is left that a later write must
// clean up: no record names an unfinished write (s3Pending), every change
// announced in a load summary was settled, and each summary counts exactly
// the placement index's entries of its destination. (64 at once is measured
// by the benchmark, scenario 5 and docs/benchmarks.md.)
func TestS3WritersOnBusyNode(t *testing.T) {
	const writers = 16
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "busy")
	c := m.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The 3,000-file workload, as render would have left it.
	st, err := s3store.New(s3store.Config{Name: "BucketStateStore/minio", Endpoint: m.Endpoint(), Bucket: bucket, Path: "clusters",
		Region: testenv.Region, Insecure: true, AccessKeyID: m.AccessKey(), SecretAccessKey: m.SecretKey(), Concurrency: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big := statestore.Update{Workload: statestore.WorkloadKey("promise", "big", "", "", "configure"), Files: map[string][]byte{},
		Destinations: []string{"worker-0"}, Record: &statestore.Record{Type: "promise", Promise: "big", Pipeline: "configure"}}
	for i := range 3000 {
		big.Files[fmt.Sprintf("worker-0/dependencies/big/configure/5058f/doc-%05d.yaml", i)] = []byte(configMap("big", i, "v1"))
	}
	if err := st.Seed(ctx, []statestore.Update{big}); err != nil {
		t.Fatal(err)
	}

	platform := []string{bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey())}
	for i := range 4 {
		platform = append(platform, destination(fmt.Sprintf("worker-%d", i), "BucketStateStore", "minio"))
	}
	var ws []*workflow
	doc := map[*workflow]string{}
	for i := range writers {
		w := newWorkflow(t, "db")
		w.typ, w.name, w.ns = "resource", fmt.Sprintf("r-%02d", i), "team"
		w.writeFile(t, "input/object.yaml", fmt.Sprintf("apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: %s\n  namespace: team\n", w.name))
		doc[w] = configMap(w.name, i, "v1")
		w.writeFile(t, "output/db.yaml", doc[w])
		w.setPlatform(t, platform...)
		ws = append(ws, w)
	}

	var stop atomic.Bool
	var spin sync.WaitGroup
	for range runtime.NumCPU() {
		spin.Add(1)
		go func() {
			defer spin.Done()
			for n := 0; !stop.Load(); n++ {
			}
		}()
	}
	ps := make([]*process, writers)
	for i, w := range ws {
		ps[i] = start(t, w, "-o", "json")
	}
	for i, p := range ps {
		if res := p.wait(t, 3*time.Minute); res.code != 0 {
			t.Errorf("writer %d: %s", i, res)
		}
	}
	stop.Store(true)
	spin.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	objs, err := listBucket(ctx, c, bucket, "clusters/")
	if err != nil {
		t.Fatal(err)
	}
	read := func(key string) []byte {
		data, err := getObject(ctx, c, bucket, "clusters/"+key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return data
	}
	for _, w := range ws {
		key := statestore.WorkloadKey("resource", "db", "team", w.name, "configure")
		p := statestore.RecordPath(key)
		if _, ok := objs[p]; !ok {
			t.Errorf("the record of %s is missing", w.name)
			continue
		}
		data := read(p)
		var rec struct {
			statestore.Record
			Pending []string `json:"s3Pending"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(rec.Pending) > 0 {
			t.Errorf("the record of %s names an unfinished write: %v", w.name, rec.Pending)
		}
		if len(rec.Placements) != 1 || len(rec.Placements[0].Destinations) != 1 {
			t.Errorf("%s is placed on %+v", w.name, rec.Placements)
			continue
		}
		f := path.Join(rec.Placements[0].Destinations[0], "resources/team/db", w.name, "configure/5058f/db.yaml")
		if !bytes.Equal(read(f), []byte(doc[w])) {
			t.Errorf("%s does not hold %s's document", f, w.name)
		}
	}
	// The load summaries: nothing pending, and exactly the index.
	entries := map[string]int{}
	for k := range objs {
		if e, ok := bookkeeping.ParseIndexPath(k); ok && e.Resource() {
			entries[e.Destination]++
		}
	}
	// Every change announced in a summary's folder of changes was settled
	// (a nonce's pending object has its settled one beside it), and the
	// load read from the summaries is the index's.
	kinds := map[string]string{}
	for k := range objs {
		rest, ok := strings.CutPrefix(k, bookkeeping.LoadDir+"/")
		if !ok || !strings.Contains(rest, "/") {
			continue
		}
		d, name := path.Split(rest)
		if len(name) > 34 && name[32] == '.' {
			kinds[d+name[:32]] += name[33:34]
		}
	}
	for nonce, k := range kinds {
		if !strings.Contains(k, "s") {
			t.Errorf("the change %s of a load summary was never settled (%q)", nonce, k)
		}
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for i := range 4 {
		dests = append(dests, fmt.Sprintf("worker-%d", i))
	}
	sl := snap.Capabilities().SummaryLoad
	if sl == nil {
		t.Fatal("the S3 snapshot declares no SummaryLoad")
	}
	counts, rest, err := sl(dests)
	if err != nil || len(rest) > 0 {
		t.Fatalf("SummaryLoad: %v, rest %v", err, rest)
	}
	placed := 0
	for _, d := range dests {
		n := 0
		for _, c := range counts[d] {
			n += c
		}
		if n != entries[d] {
			t.Errorf("the load summary of %s counts %d resources, the index %d", d, n, entries[d])
		}
		placed += n
	}
	if placed != writers {
		t.Errorf("the load summaries count %d resources, want %d", placed, writers)
	}
	var took []string
	for _, p := range ps {
		took = append(took, p.res.took.Round(100*time.Millisecond).String())
	}
	t.Logf("%d renders on %d busy cores: %s", writers, runtime.NumCPU(), strings.Join(took, " "))
}
