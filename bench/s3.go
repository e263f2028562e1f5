package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// counter counts requests to a store server by kind: S3's methods, LIST
// and DELETE (a multi-object delete), and git's push (POST
// git-receive-pack), fetch (POST git-upload-pack) and refs (GET info/refs).
type counter struct {
	mu sync.Mutex
	n  map[string]int
	// settle, when set, is called before take: it waits until the server
	// has counted every request a client already had its answer to.
	settle func()
}

func (c *counter) reset() {
	c.mu.Lock()
	c.n = map[string]int{}
	c.mu.Unlock()
}

// add counts r and returns its kind.
func (c *counter) add(r *http.Request) string {
	kind := r.Method
	q := r.URL.Query()
	switch {
	case strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		kind = "push"
	case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		kind = "fetch"
	case strings.HasSuffix(r.URL.Path, "/info/refs"):
		kind = "refs"
	case r.Method == "GET" && (q.Has("list-type") || q.Has("prefix") || q.Has("delimiter")):
		kind = "LIST"
	case r.Method == "GET" && q.Has("location"):
		kind = "LOCATION"
	case r.Method == "POST" && q.Has("delete"):
		kind = "DELETE"
	}
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
	return kind
}

// logRequest writes r (of kind) and its response's status (0: none) to
// reqLog, when there is one.
func logRequest(kind string, r *http.Request, status int) {
	if reqLog == nil {
		return
	}
	reqLogMu.Lock()
	defer reqLogMu.Unlock()
	fmt.Fprintf(reqLog, "%s %s %s %d\n", kind, r.URL.Path, r.URL.RawQuery, status)
}

var reqLogMu sync.Mutex

// reqLog, when $RENDER_BENCH_REQUEST_LOG names a file, gets one line per
// request counted (kind, path, query, response status): to see which
// objects a figure's requests went to, and which were refused (412: a
// condition that failed).
var reqLog = func() io.Writer {
	p := os.Getenv("RENDER_BENCH_REQUEST_LOG")
	if p == "" {
		return nil
	}
	f, err := os.Create(p)
	if err != nil {
		return nil
	}
	return f
}()

// count counts one request of kind.
func (c *counter) count(kind string) {
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// take returns the counts so far and starts again from zero.
func (c *counter) take() map[string]int {
	if c.settle != nil {
		c.settle()
	}
	out := c.snapshot()
	c.reset()
	return out
}

func writes(m map[string]int) int { return m["PUT"] + m["DELETE"] + m["POST"] }

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func describeCounts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// countingTransport is an http.RoundTripper that counts what goes through it.
type countingTransport struct {
	base http.RoundTripper
	c    *counter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := t.c.add(r)
	resp, err := t.base.RoundTrip(r)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	logRequest(kind, r, status)
	return resp, err
}

// countingProxy forwards to a store server (MinIO or Gitea, at target
// host:port) through a countingTransport, so that the render binary's
// requests can be counted without changing it. The Host header is passed
// through unchanged, so request signatures stay valid.
func countingProxy(target string) (addr string, c *counter, stop func(), err error) {
	c = &counter{n: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Director: func(r *http.Request) {
			r.URL.Scheme, r.URL.Host = "http", target
		},
		Transport:     &countingTransport{base: base, c: c},
		FlushInterval: -1, // git's sideband progress streams
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	return ln.Addr().String(), c, func() { srv.Close() }, nil
}

// Scenario 4: S3. A promise workflow of 1,000 documents to one destination
// in a MinIO bucket: the first write, an unchanged re-render and a
// one-object change, each by the render binary, whose requests are counted
// by a counting proxy in front of MinIO. The same three steps are then
// made with s3store.Apply directly, counted with a counting
// http.RoundTripper in s3store.Config.Transport. Last, watch latency on S3
// (see s3WatchLatency).
func s3Scenario(ctx context.Context, b *bench) ([]*Row, error) {
	docs := 1000
	if b.quick {
		docs = 200
	}
	addr, c, stop, err := countingProxy(b.minioEndpoint)
	if err != nil {
		return nil, err
	}
	defer stop()
	proxied := *b.env
	proxied.minioEndpoint = addr

	var tFirst, tSame, tOne []float64
	var wFirst, wSame, wOne, rSame, rOne []float64
	var countsFirst, countsSame, countsOne map[string]int
	for run := range b.runs {
		bucket, err := b.createBucket(ctx, "s3bench")
		if err != nil {
			return nil, err
		}
		plat := proxied.bucketStore("minio", bucket) + destinations(1, bucketRef("minio"))
		w, err := newWorkflow(filepath.Join(b.work, "s3", fmt.Sprint(run)), "s3bench", docs, plat)
		if err != nil {
			return nil, err
		}
		step := func(times, writesN, reqs *[]float64, counts *map[string]int) error {
			b.quiesce()
			c.reset()
			p, err := b.render(ctx, w)
			if err != nil {
				return err
			}
			m := c.snapshot()
			*times = append(*times, ms(p.Wall))
			*writesN = append(*writesN, float64(writes(m)))
			if reqs != nil {
				*reqs = append(*reqs, float64(total(m)))
			}
			*counts = m
			return nil
		}
		if err := step(&tFirst, &wFirst, nil, &countsFirst); err != nil {
			return nil, err
		}
		if err := step(&tSame, &wSame, &rSame, &countsSame); err != nil {
			return nil, err
		}
		if err := w.writeDoc(run%docs, "v2"); err != nil {
			return nil, err
		}
		if err := step(&tOne, &wOne, &rOne, &countsOne); err != nil {
			return nil, err
		}
		b.log("s3 run %d: first %.0fms (%s); unchanged %.0fms (%s); one change %.0fms (%s)", run+1,
			tFirst[run], describeCounts(countsFirst), tSame[run], describeCounts(countsSame), tOne[run], describeCounts(countsOne))
	}
	rows := []*Row{
		newRow("", fmt.Sprintf("first write, %d objects (binary)", docs), "ms", tFirst),
		newRow("", "unchanged re-render (binary)", "ms", tSame),
		newRow("", "one-object change (binary)", "ms", tOne),
	}
	rows[0].Note = "requests of the last run: " + describeCounts(countsFirst)
	rows[1].Note = "requests of the last run: " + describeCounts(countsSame)
	rows[2].Note = "requests of the last run: " + describeCounts(countsOne)
	ws := newRow("", "unchanged re-render: write requests", "req", wSame)
	rows = append(rows, ws.target("0", ws.Max == 0),
		newRow("", "unchanged re-render: all requests", "req", rSame),
		newRow("", "one-object change: write requests", "req", wOne),
		newRow("", "one-object change: all requests", "req", rOne))

	more, err := s3Direct(ctx, b, docs)
	rows = append(rows, more...)
	if err != nil {
		return rows, err
	}
	watch, err := s3WatchLatency(ctx, b)
	return append(rows, watch...), err
}

// s3Direct is the same sequence with s3store.Apply, requests counted by a
// counting http.RoundTripper in s3store.Config.Transport.
func s3Direct(ctx context.Context, b *bench, docs int) ([]*Row, error) {
	c := &counter{n: map[string]int{}}
	bucket, err := b.createBucket(ctx, "s3direct")
	if err != nil {
		return nil, err
	}
	st, err := s3store.New(s3store.Config{
		Name: "BucketStateStore/direct", Endpoint: b.minioEndpoint, Bucket: bucket, Path: "clusters",
		Region: "us-east-1", Insecure: true, AccessKeyID: b.minioAK, SecretAccessKey: b.minioSK,
		Transport: &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), c: c},
	})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	files := map[string][]byte{}
	for i := range docs {
		files[fmt.Sprintf("worker-00/dependencies/s3direct/configure/5058f/doc-%05d.yaml", i)] = doc("s3direct", i, "v1")
	}
	update := func() statestore.Update {
		return statestore.Update{
			Workload: "promise/s3direct/configure", Files: files, Destinations: []string{"worker-00"},
			Record:  &statestore.Record{Type: "promise", Promise: "s3direct", Pipeline: "configure"},
			Message: statestore.Message{Subject: "bench"},
		}
	}
	var wFirst, wSame, wOne, rSame []float64
	var tSame []float64
	var last map[string]int
	for run := range b.runs {
		if run == 0 {
			c.reset()
			if _, err := st.Apply(ctx, update()); err != nil {
				return nil, err
			}
			wFirst = append(wFirst, float64(writes(c.snapshot())))
		}
		c.reset()
		t0 := time.Now()
		res, err := st.Apply(ctx, update())
		if err != nil {
			return nil, err
		}
		if res.Updated {
			return nil, fmt.Errorf("s3store.Apply of an unchanged update reports Updated")
		}
		tSame = append(tSame, ms(time.Since(t0)))
		m := c.snapshot()
		wSame, rSame, last = append(wSame, float64(writes(m))), append(rSame, float64(total(m))), m
		files[fmt.Sprintf("worker-00/dependencies/s3direct/configure/5058f/doc-%05d.yaml", run)] = doc("s3direct", run, fmt.Sprint("v", run+2))
		c.reset()
		if _, err := st.Apply(ctx, update()); err != nil {
			return nil, err
		}
		wOne = append(wOne, float64(writes(c.snapshot())))
	}
	ws := newRow("", "s3store.Apply unchanged: write requests", "req", wSame)
	ws.Note = "counted in s3store.Config.Transport; requests of the last run: " + describeCounts(last)
	return []*Row{
		newRow("", "s3store.Apply first write: write requests", "req", wFirst),
		ws.target("0", ws.Max == 0),
		newRow("", "s3store.Apply unchanged: all requests", "req", rSame),
		newRow("", "s3store.Apply unchanged", "ms", tSame),
		newRow("", "s3store.Apply one-object change: write requests", "req", wOne),
	}, nil
}
