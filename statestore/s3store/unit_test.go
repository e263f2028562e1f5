package s3store

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
)

const (
	testAccessKey = "AKIDrenderUnitTest"
	testSecretKey = "s3cr3t-render-unit-test-value"
)

func unitStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "127.0.0.1:9"
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "state"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSealedRecordRoundTrip(t *testing.T) {
	rec := statestore.Record{Workload: "promise/p/x", Type: "promise", Promise: "p", Pipeline: "x", Files: []string{"d/a.yaml"}}
	canonical := rec.Encode()
	a, b := sealRecord(canonical, nil), sealRecord(canonical, []string{"d", "e/f"})
	if string(a) == string(b) {
		t.Fatal("two seals of one record are identical: commits would not change the ETag")
	}
	if md5hex(a) == md5hex(b) {
		t.Fatal("same ETag")
	}
	for _, sealed := range [][]byte{a, b} {
		if got := unsealRecord(sealed); string(got) != string(canonical) {
			t.Fatalf("unseal:\n%s\nwant\n%s", got, canonical)
		}
	}
	if m, ok := storedMarkers(b); !ok || !slices.Equal(m, []string{"d", "e/f"}) {
		t.Fatalf("markers of a sealed record: %v, %v", m, ok)
	}
	if m, ok := storedMarkers(a); ok || m != nil {
		t.Fatalf("a record sealed without markers names some: %v, %v", m, ok)
	}
	if _, ok := storedMarkers(canonical); ok {
		t.Fatal("an unsealed record names markers")
	}
	dec, err := statestore.DecodeRecord("r.json", a)
	if err != nil {
		t.Fatal(err)
	}
	if string(dec.Encode()) != string(canonical) {
		t.Fatalf("sealed record decodes differently:\n%s", dec.Encode())
	}
	if got := unsealRecord(canonical); string(got) != string(canonical) {
		t.Fatal("unseal changed an unsealed record")
	}
	// The revision is a JSON field, wherever it is and however the JSON is
	// spaced: unsealing decodes, it does not edit text.
	compact := []byte(`{"s3Revision":"0123456789abcdef0123456789abcdef","format":1,"workload":"promise/p/x","type":"promise","promise":"p","pipeline":"x","files":["d/a.yaml"]}`)
	if got := unsealRecord(compact); string(got) != string(canonical) {
		t.Fatalf("unseal of a compact record:\n%s\nwant\n%s", got, canonical)
	}
}

func TestTombstoneSmallerThanAnyRecord(t *testing.T) {
	smallest := int64(len(sealRecord((&statestore.Record{}).Encode(), nil)))
	if tombstoneSize >= smallest {
		t.Fatalf("tombstone (%d bytes) is not smaller than the smallest record (%d bytes)", tombstoneSize, smallest)
	}
	if int64(len(tombstone())) != tombstoneSize {
		t.Fatal("tombstones vary in size")
	}
	if !isTombstone(statestore.RecordPath("w/a"), tombstoneSize) || isTombstone("d/x.json", tombstoneSize) {
		t.Fatal("isTombstone")
	}
	// An old reader sees a record with no files.
	r, err := statestore.DecodeRecord("t", tombstone())
	if err != nil || len(r.Files) != 0 {
		t.Fatalf("tombstone as a record: %+v, %v", r, err)
	}
}

func TestDestinationDigest(t *testing.T) {
	a := DestinationDigest(map[string]string{"x.yaml": "AB", "sub/y.yaml": `"cd"`, MarkerName: "ff"})
	b := DestinationDigest(map[string]string{"sub/y.yaml": "cd", "x.yaml": "ab"})
	if a != b || !strings.HasPrefix(a, "sha256:") {
		t.Fatalf("digest is not canonical: %s vs %s", a, b)
	}
	if a == DestinationDigest(map[string]string{"x.yaml": "ab"}) {
		t.Fatal("digest ignores an object")
	}
	// The documented formula, spelled out.
	if got := DestinationDigest(map[string]string{}); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("empty digest %s", got)
	}
	m := newMarker("d", map[string]string{"x.yaml": "ab"}, []string{"all.yaml"}, nil, statestore.Update{
		Workload: "w/a",
		Message:  statestore.Message{Subject: "s", Trailers: []statestore.Trailer{{Key: "K", Value: "v"}}},
	})
	stored := encodeMarker(m)
	var back Marker
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	if back.Objects != 1 || back.Format != MarkerFormat || back.Trailers[0].Key != "K" || back.Digest != m.Digest ||
		back.Files["x.yaml"] != "ab" || !slices.Equal(back.Aggregates, []string{"all.yaml"}) {
		t.Fatalf("marker: %+v", back)
	}
	// Provenance aside, a marker is current when it names the same files
	// with the same ETags and the same aggregated files.
	other := newMarker("d", map[string]string{"x.yaml": "ab"}, []string{"all.yaml"}, nil, statestore.Update{Workload: "w/a", Message: statestore.Message{Subject: "t"}})
	if !other.sameContent(stored) {
		t.Fatal("a marker differing only in provenance is not current")
	}
	for _, changed := range []Marker{
		newMarker("d", map[string]string{"x.yaml": "ac"}, []string{"all.yaml"}, nil, statestore.Update{Workload: "w/a"}),
		newMarker("d", map[string]string{"x.yaml": "ab", "y.yaml": "ab"}, []string{"all.yaml"}, nil, statestore.Update{Workload: "w/a"}),
		newMarker("d", map[string]string{"x.yaml": "ab"}, nil, nil, statestore.Update{Workload: "w/a"}),
		newMarker("d", map[string]string{"x.yaml": "ab"}, []string{"all.yaml"}, nil, statestore.Update{Workload: "w/b"}),
	} {
		if changed.sameContent(stored) {
			t.Fatalf("%+v reads as current against %s", changed, stored)
		}
	}
	if MarkerPath("clusters/dev", "resource/ns/p/n/configure") != "clusters/dev/.render/complete/resource/ns/p/n/configure.json" {
		t.Fatal(MarkerPath("clusters/dev", "resource/ns/p/n/configure"))
	}
	for p, want := range map[string]bool{
		"dev/.render/complete/w/a.json": true, "dev/" + MarkerName: true, MarkerName: true,
		".render/complete/w/a.json": false, "dev/complete/w.json": false, "dev/.render/x.json": false,
	} {
		if isMarker(p) != want {
			t.Errorf("isMarker(%q) = %v", p, !want)
		}
	}
}

// TestUpdateRefused: what a store cannot hold is refused before any
// request, by planner.ValidateUpdate and this backend's own check (the
// destinations' marker folders).
func TestUpdateRefused(t *testing.T) {
	refused := func(u statestore.Update) error {
		if err := planner.ValidateUpdate(u); err != nil {
			return err
		}
		_, err := destinations(u)
		return err
	}
	var requests int
	s := unitStore(t, Config{Region: "us-east-1", Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		requests++
		return nil, errors.New("test: no request expected")
	})})
	for _, u := range []statestore.Update{
		{},
		{Workload: "w", Files: map[string][]byte{"d/" + MarkerName: nil}},
		{Workload: "w", Shared: map[string][]byte{MarkerName: nil}},
		{Workload: "w", Files: map[string][]byte{"d/.render/complete/w/x.json": nil}},
		{Workload: "w", Destinations: []string{"../x"}},
		{Workload: "w", Destinations: []string{".render/x"}},
	} {
		if err := refused(u); err == nil {
			t.Errorf("%+v accepted", u)
		}
		_, err := s.Apply(context.Background(), u)
		var se *statestore.StoreError
		if !errors.As(err, &se) || se.Op != "plan" {
			t.Errorf("Apply(%+v) = %v, want a plan error naming the store", u, err)
		}
	}
	if requests != 0 {
		t.Errorf("refused updates made %d requests", requests)
	}
	// Paths are relative to the store: a destination whose path is
	// "resources" may hold a file named like the canary in mode none; the
	// names reserved inside a destination were checked by the renderer.
	if err := refused(statestore.Update{Workload: "w", Files: map[string][]byte{"resources/kratix-canary-configmap.yaml": nil}}); err != nil {
		t.Errorf("a store path that merely ends like a canary: %v", err)
	}
	d, err := destinations(statestore.Update{Workload: "w", Destinations: []string{"b/", "a", "b"}})
	if err != nil || strings.Join(d, ",") != "a,b" {
		t.Fatalf("destinations %v, %v", d, err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{Endpoint: "", Bucket: "bkt"},
		{Endpoint: "http://127.0.0.1:9000", Bucket: "bkt"},
		{Endpoint: "127.0.0.1:9000", Bucket: "B_ad"},
		{Endpoint: "127.0.0.1:9000", Bucket: "bkt", Path: "../x"},
		{Endpoint: "127.0.0.1:9000", Bucket: "bkt", AccessKeyID: "a"},
		{Endpoint: "127.0.0.1:9000", Bucket: "bkt", UseIAM: true, AccessKeyID: "a", SecretAccessKey: testSecretKey},
		{Endpoint: "127.0.0.1:9000", Bucket: "bkt", CABundle: []byte("not pem")},
	} {
		_, err := New(cfg)
		if err == nil {
			t.Errorf("New(%q, %q, %q) accepted", cfg.Endpoint, cfg.Bucket, cfg.Path)
			continue
		}
		if strings.Contains(err.Error(), testSecretKey) {
			t.Errorf("error shows the secret: %v", err)
		}
	}
	s := unitStore(t, Config{Name: "BucketStateStore/default", Endpoint: "127.0.0.1:9000", Bucket: "bkt", Path: "/clusters/", UseIAM: true})
	if s.prefix != "clusters" || s.key("d/x.yaml") != "clusters/d/x.yaml" {
		t.Fatalf("prefix %q", s.prefix)
	}
	if got := s.String(); got != "BucketStateStore/default (bucket bkt/clusters at 127.0.0.1:9000)" {
		t.Fatalf("String() = %q", got)
	}
}

func TestTranslate(t *testing.T) {
	s := unitStore(t, Config{Endpoint: "127.0.0.1:9000", Bucket: "state", AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey})
	cases := []struct {
		err  error
		want error
	}{
		{minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403, Message: "bad key " + testAccessKey}, statestore.ErrAuth},
		{minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, statestore.ErrAuth},
		{minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}, statestore.ErrNotFound},
		{minio.ErrorResponse{Code: "PreconditionFailed", StatusCode: 412}, errChanged},
		{minio.ErrorResponse{Code: "ConditionalRequestConflict", StatusCode: 409}, errChanged},
		{minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, statestore.ErrUnreachable},
		{minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, statestore.ErrUnreachable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, statestore.ErrUnreachable},
	}
	for _, c := range cases {
		got := s.translate(c.err)
		if !errors.Is(got, c.want) {
			t.Errorf("translate(%v) = %v, want %v", c.err, got, c.want)
		}
		if strings.Contains(got.Error(), testSecretKey) || strings.Contains(got.Error(), testAccessKey) {
			t.Errorf("translate(%v) shows a credential: %v", c.err, got)
		}
	}
	if err := s.translate(minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}); !strings.Contains(err.Error(), `"state"`) {
		t.Errorf("missing bucket error does not name it: %v", err)
	}
}

// TestUnreachable points a store at a closed loopback port: it retries
// until its deadline, then fails with ErrUnreachable naming the store.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var tries int
	counting := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		tries++
		return http.DefaultTransport.RoundTrip(r)
	})
	s := unitStore(t, Config{
		Name: "BucketStateStore/unreachable", Endpoint: addr, Bucket: "state", Insecure: true, Region: "us-east-1",
		AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey,
		RetryDeadline: 1500 * time.Millisecond, Transport: counting,
	})
	start := time.Now()
	_, err = s.Records(context.Background())
	elapsed := time.Since(start)
	if !errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("Records: got %v, want ErrUnreachable", err)
	}
	var se *statestore.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), s.String()) {
		t.Fatalf("error does not name the store: %v", err)
	}
	if strings.Contains(err.Error(), testSecretKey) {
		t.Fatalf("error shows the secret: %v", err)
	}
	if tries < 2 || elapsed > 5*time.Second {
		t.Fatalf("%d tries in %s: want retries, bounded by the deadline", tries, elapsed)
	}
	t.Logf("%d tries in %s: %v", tries, elapsed.Round(time.Millisecond), err)

	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/x.yaml": []byte("x\n")}, Record: &statestore.Record{}}
	if _, err := s.Apply(context.Background(), u); !errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("Apply: got %v, want ErrUnreachable", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestParallelBounds(t *testing.T) {
	var inFlight, peak int
	mu := make(chan struct{}, 1)
	jobs := make([]func(context.Context) error, 40)
	for i := range jobs {
		jobs[i] = func(context.Context) error {
			mu <- struct{}{}
			inFlight++
			peak = max(peak, inFlight)
			<-mu
			time.Sleep(2 * time.Millisecond)
			mu <- struct{}{}
			inFlight--
			<-mu
			return nil
		}
	}
	if err := parallel(context.Background(), 4, jobs); err != nil {
		t.Fatal(err)
	}
	if peak > 4 || peak < 2 {
		t.Fatalf("peak %d in flight, want 2..4", peak)
	}
	boom := errors.New("boom")
	jobs[3] = func(context.Context) error { return boom }
	if err := parallel(context.Background(), 4, jobs); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

// TestTLS: TLS is verified by default, and CABundle adds trusted roots.
func TestTLS(t *testing.T) {
	var requests int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		if r.URL.Query().Get("list-type") != "2" {
			http.Error(w, "unexpected", http.StatusNotImplemented)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>state</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	cfg := Config{
		Endpoint: strings.TrimPrefix(srv.URL, "https://"), Bucket: "state", Region: "us-east-1",
		AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey, RetryDeadline: 30 * time.Second,
	}
	start := time.Now()
	_, err := unitStore(t, cfg).Records(context.Background())
	if err == nil || errors.Is(err, statestore.ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted certificate: got %v, want a TLS error that is not retried", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("a TLS error was retried for %s", time.Since(start))
	}
	t.Logf("untrusted: %v", err)

	cfg.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	recs, err := unitStore(t, cfg).Records(context.Background())
	if err != nil || len(recs) != 0 {
		t.Fatalf("trusted by CABundle: %v, %v", recs, err)
	}
	if requests != 1 {
		t.Fatalf("%d requests reached the server, want 1 (the trusted listing)", requests)
	}
}

// Any 5xx is a server that may recover: retried (ErrUnreachable), whatever
// its code says, and however unusual the status.
func TestEvery5xxIsRetryable(t *testing.T) {
	s := unitStore(t, Config{Endpoint: "127.0.0.1:9000", Bucket: "state", AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey})
	for status := 500; status <= 599; status++ {
		for _, code := range []string{"", "InternalError", "NotImplemented", "XMinioStorageFull", "SomethingNew"} {
			err := s.translate(minio.ErrorResponse{Code: code, StatusCode: status})
			if !errors.Is(err, statestore.ErrUnreachable) {
				t.Errorf("HTTP %d %q: translate = %v, want ErrUnreachable (retried)", status, code, err)
			}
		}
	}
}

// TestBefore: a listing that starts after before(prefix, key) starts at
// key, and nothing it skips can be key or come after it.
func TestBefore(t *testing.T) {
	for _, c := range []struct{ prefix, key, want string }{
		{"s/d/", "a.yaml", "s/d/a.yamk"},
		{"s/d/", "x.json", "s/d/x.jsom"},
		{"s/d/", "a1", "s/d/a0"},
		{"", "x", "w"},
		{"s/d/", "ü", "s/d/"},    // not ASCII: from the folder's start
		{"s/d/", "a ", "s/d/"},   // a space: its predecessor is a control character
		{"s/d/", "a!", "s/d/a "}, // '!' - 1 is a space, printable
	} {
		got := before(c.prefix, c.key)
		if got != c.want {
			t.Errorf("before(%q, %q) = %q, want %q", c.prefix, c.key, got, c.want)
		}
		if got >= c.prefix+c.key || !strings.HasPrefix(got, c.prefix) {
			t.Errorf("before(%q, %q) = %q does not sort before the key inside the folder", c.prefix, c.key, got)
		}
	}
}

// TestSpans: what a listing of a range covers, and what it does not.
func TestSpans(t *testing.T) {
	sn := unitStore(t, Config{}).newSnapshot(context.Background())
	sn.spans["d"] = []span{{after: "b", last: "f"}}
	sn.spans[""] = []span{{after: "", toEnd: true}}
	sn.deep = []string{"x/y"}
	for p, want := range map[string]bool{
		"d/b": false, "d/ba": true, "d/f": true, "d/fa": false, "d/c/e": false,
		"top.yaml": true, "x/y/z/w": true, "x/yy": false, "x/a": false,
	} {
		if got := sn.covered(p); got != want {
			t.Errorf("covered(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestSnapshotAnswersOnce checks that a snapshot keeps its first answer
// about a path: once a listing showed a record absent, a later, wider
// listing that finds it (written meanwhile by another render of the same
// workload) must not make it appear, or the commit would be conditioned on
// a record the plan never read (three renders of one workload then left a
// mix of two of them).
func TestSnapshotAnswersOnce(t *testing.T) {
	sn := (&Store{}).newSnapshot(context.Background())
	const rec = ".render/workloads/w/same.json"
	sn.mu.Lock()
	sn.spans[".render/workloads/w"] = append(sn.spans[".render/workloads/w"], span{after: "same.jsom", toEnd: true})
	// The planner's later look at every record shows it, and another.
	sn.add(rec, object{etag: "ce38", size: 232})
	sn.add(".render/workloads/w/other.json", object{etag: "ab12", size: 200})
	sn.deep = append(sn.deep, ".render/workloads")
	sn.mu.Unlock()
	if o, ok, err := sn.lookup(rec); err != nil || ok {
		t.Fatalf("lookup(%s) = %+v, %v, %v; want absent, as the first listing said", rec, o, ok, err)
	}
	if got := sn.etag(rec); got != "" {
		t.Fatalf("etag(%s) = %q, want none: a commit must be conditioned on what the plan read", rec, got)
	}
	if _, ok, _ := sn.lookup(".render/workloads/w/other.json"); !ok {
		t.Fatal("a path no earlier listing covered must come from the later listing")
	}
}

// TestForkLeavesParts: a write's first attempt inherits what the render's
// snapshot looked up (fork), except the parts of aggregated files: a part
// listed by the render's snapshot may be older than the file looked up by
// the write, and a file must always be seen before its parts (lookAll).
// Contents read are inherited with their objects; an empty snapshot (no
// bucket yet) is not inherited at all.
func TestForkLeavesParts(t *testing.T) {
	sn := unitStore(t, Config{}).newSnapshot(context.Background())
	const (
		file   = "dev/resources/kratix-canary-configmap.yaml"
		record = ".render/workloads/w.json"
		target = "dev/all.yaml"
		part   = ".render/aggregate/dev/all.yaml/w.part"
	)
	sn.mu.Lock()
	for _, p := range []string{file, record, target, part} {
		sn.add(p, object{etag: "e" + p, size: 1})
	}
	sn.spans["dev/resources"] = []span{{after: "kratix-canary-configmap.yam", toEnd: true}}
	sn.spans["dev"] = []span{{after: "all.yam", toEnd: true}}
	sn.spans[".render/aggregate/dev/all.yaml"] = []span{{after: "", toEnd: true}}
	sn.deep = []string{".render/workloads", ".render/aggregate/dev", ".render"}
	sn.cache[record] = []byte("{}")
	sn.mu.Unlock()

	f := sn.fork(context.Background())
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, want := range map[string]bool{file: true, record: true, target: true, part: false, ".render/aggregate/dev/b.yaml/w.part": false, ".render/index.json": false} {
		if got := f.covered(p); got != want {
			t.Errorf("fork: covered(%q) = %v, want %v", p, got, want)
		}
		if _, got, _ := f.obj(p); got != (want && p != ".render/index.json") {
			t.Errorf("fork: object %q inherited = %v, want %v", p, got, want)
		}
	}
	if data, _ := f.cached(record); string(data) != "{}" {
		t.Errorf("fork: the record read by the snapshot is not inherited: %q", data)
	}
	if e := unitStore(t, Config{}).emptySnapshot(context.Background()); e.fork(context.Background()) != nil {
		t.Error("an empty snapshot (no bucket yet) was forked: the write would not create the bucket")
	}
}

// A write that fails does not cut off the writes under way (writeAll):
// their contexts stay live until they end by themselves. Under parallel, a
// rejected conditional write (every writer but one loses the race to
// create .render/index.json) cancelled the file uploads beside it, and a
// render could report a file that was missing afterwards, no delete sent:
// its retry trusted a listing of the cut-off upload (the conformance
// suite's ConcurrentWriters, about 1 run in 45).
func TestWriteFailureCancelsNoWrite(t *testing.T) {
	var ctxs [4]context.Context
	jobs := make([]func(context.Context) error, 0, len(ctxs))
	for i := range ctxs {
		jobs = append(jobs, func(ctx context.Context) error {
			ctxs[i] = ctx
			if i == 0 {
				return errChanged
			}
			return nil
		})
	}
	if err := writeAll(context.Background(), len(jobs), jobs); !errors.Is(err, errChanged) {
		t.Fatalf("writeAll = %v, want the failed write's error", err)
	}
	for i, ctx := range ctxs {
		if ctx != nil && ctx.Err() != nil {
			t.Errorf("write %d's context was cancelled: %v", i, ctx.Err())
		}
	}
}

// TestCoverageAgreesWithCovered: a frozen layer (see fork), whose spans
// are sorted once and searched, answers as the layer did, walking its
// spans, path by path, for random spans, points and deep listings; and
// a fork, reading the layer through its filter, answers the same but for
// the parts folder and the recursive listings of the whole store or of a
// folder above the parts, which it does not inherit.
func TestCoverageAgreesWithCovered(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 1))
	letter := func() string { return string(rune('a' + rng.IntN(8))) }
	name := func() string { return letter() + letter() }
	dirs := []string{"d", "d/e", ".render/x", ".render/aggregate/t", "f"}
	for trial := range 200 {
		sn := unitStore(t, Config{}).newSnapshot(context.Background())
		for _, dir := range dirs[:4] {
			for range rng.IntN(6) {
				a, b := name(), name()
				if b < a {
					a, b = b, a
				}
				sn.spans[dir] = append(sn.spans[dir], span{after: a, last: b, toEnd: rng.IntN(5) == 0})
			}
		}
		for _, d := range []string{"d/e", "", ".render", ".render/aggregate"} {
			if rng.IntN(4) == 0 {
				sn.deep = append(sn.deep, d)
			}
		}
		sn.points["d/"+name()] = true
		sn.points[".render/aggregate/t/"+name()] = true
		// What a fork inherits, as the copy fork made before (copyFork).
		ref := copyFork(sn)
		type answer struct{ live, fork bool }
		want := map[string]answer{}
		for range 100 {
			p := dirs[rng.IntN(len(dirs))] + "/" + name()
			want[p] = answer{sn.covered(p), ref.covered(p)}
		}
		f := sn.fork(context.Background())
		for p, w := range want {
			if got := sn.covered(p); got != w.live {
				t.Fatalf("trial %d: %s: frozen, covered says %v, the live layer %v (spans %v, deep %v)", trial, p, got, w.live, sn.base[0].f.spans, sn.base[0].f.deep)
			}
			if got := f.covered(p); got != w.fork {
				t.Fatalf("trial %d: %s: the fork's covered says %v, want %v (spans %v, deep %v)", trial, p, got, w.fork, sn.base[0].f.spans, sn.base[0].f.deep)
			}
		}
	}
}

// An S3 snapshot declares, in its Capabilities, what bookkeeping would
// otherwise find out the generic way: whether the bucket has the index
// (a bucket that holds no record counts as indexed, which the marker alone
// does not tell) and the load from its ledgers. A snapshot that forgot to
// declare them would have every render of a fresh bucket read it the old
// way, and every load read from the index entries.
func TestSnapshotDeclaresBookkeeping(t *testing.T) {
	s := unitStore(t, Config{})
	for _, v := range []struct {
		verdict int
		indexed bool
	}{{verdictMarker, true}, {verdictEmpty, true}, {verdictLegacy, false}} {
		sn := &snapshot{s: s, ctx: context.Background(), verdict: v.verdict}
		c := sn.Capabilities()
		if c.Indexed == nil || c.SummaryLoad == nil || c.Prefetch == nil || c.Debug == nil {
			t.Fatalf("an S3 snapshot declares %+v: Indexed, SummaryLoad, Prefetch and Debug are all its", c)
		}
		if got, err := c.Indexed(); err != nil || got != v.indexed {
			t.Errorf("verdict %d: Indexed %v, %v; want %v", v.verdict, got, err, v.indexed)
		}
	}
	// A bucket that does not exist yet holds no load: nothing is listed.
	sn := &snapshot{s: s, ctx: context.Background(), empty: true}
	counts, rest, err := sn.Capabilities().SummaryLoad([]string{"east"})
	if err != nil || len(counts) > 0 || len(rest) > 0 {
		t.Fatalf("SummaryLoad of a missing bucket: %v, rest %v, %v", counts, rest, err)
	}
}
