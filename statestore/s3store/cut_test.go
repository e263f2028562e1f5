package s3store

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// cutDeletes sends S3's DeleteObjects requests through connections whose
// response is cut off after a few bytes, in the middle of its headers, as
// the fault campaign's limit_data toxic does: the server has received the
// request and deleted the objects, and the client reads "malformed MIME
// header" (s3 seed 70015). times says how many deletes are cut (-1: all).
type cutDeletes struct {
	base  http.RoundTripper
	cut   *http.Transport
	mu    sync.Mutex
	times int
	n     int // deletes cut so far
}

func newCutDeletes(times int) *cutDeletes {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &cutDeletes{base: http.DefaultTransport, times: times, cut: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &cutConn{Conn: c, left: 40}, nil
		},
	}}
}

func (c *cutDeletes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Query().Has("delete") {
		c.mu.Lock()
		cut := c.times < 0 || c.n < c.times
		if cut {
			c.n++
		}
		c.mu.Unlock()
		if cut {
			return c.cut.RoundTrip(r)
		}
	}
	return c.base.RoundTrip(r)
}

func (c *cutDeletes) cuts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// cutConn lets only the first left bytes of the response through, then
// ends the connection.
type cutConn struct {
	net.Conn
	left int
}

func (c *cutConn) Read(b []byte) (int, error) {
	if c.left <= 0 {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	if len(b) > c.left {
		b = b[:c.left]
	}
	n, err := c.Conn.Read(b)
	c.left -= n
	return n, err
}

// The campaign's s3 seed 70015: a render of workload w0 that changes one
// of its files and deletes another (no new path) had its DeleteObjects
// response cut in the middle of its headers. The render exited 1 ("malformed
// MIME header", taken for a permanent error), leaving a record that looked
// committed and listed the deleted file, beside the other file already
// changed: a mix of two renders. A response cut off is a connection that
// broke, retried like any other (the delete is idempotent), and the write
// lands.
func TestDeleteResponseCut(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "cutdelete"))
	first := render(2, nil) // f00, f01
	applyOK(t, open(t, cfg), first)
	second := render(2, map[string]string{"dev/p/f00.yaml": "kind: ConfigMap\nmetadata:\n  name: changed\n", "dev/p/f01.yaml": ""})

	rt := newCutDeletes(1)
	wcfg := cfg
	wcfg.Transport = rt
	res, err := open(t, wcfg).Apply(testCtx(t), second)
	if rt.cuts() != 1 {
		t.Fatalf("%d deletes were cut, want 1 (nothing tested)", rt.cuts())
	}
	if err != nil {
		t.Fatalf("the write whose delete response was cut: %v", err)
	}
	if !slices.Equal(res.Deleted, []string{"dev/p/f01.yaml"}) || !slices.Equal(res.Changed, []string{"dev/p/f00.yaml"}) {
		t.Fatalf("result %+v", res)
	}
	s := open(t, cfg)
	if got, want := contents(t, s), map[string]string{"dev/p/f00.yaml": string(second.Files["dev/p/f00.yaml"])}; !maps.Equal(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	recs, err := s.Records(testCtx(t))
	if err != nil || len(recs) != 1 || !slices.Equal(recs[0].Files, []string{"dev/p/f00.yaml"}) {
		t.Fatalf("records %+v, %v", recs, err)
	}
	checkMarker(t, m, cfg.Bucket, "dev")
}

// A write that changes and deletes files its record owns, and adds none,
// names them in its record before it changes anything (its intent), as a
// write that adds files does: when it then fails (here every delete's
// response is cut until its retry deadline passes), the record says its
// write did not finish, rather than looking committed while it lists a
// file that is gone beside a file of the new render. The workload's next
// write finishes it.
func TestChangeWithoutNewFilesNamesItsIntent(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "intentchange"))
	first := render(2, nil)
	applyOK(t, open(t, cfg), first)
	second := render(2, map[string]string{"dev/p/f00.yaml": "kind: ConfigMap\nmetadata:\n  name: changed\n", "dev/p/f01.yaml": ""})

	wcfg := cfg
	wcfg.Transport = newCutDeletes(-1)
	ctx := wait.WithRetryDeadline(testCtx(t), 2*time.Second)
	if _, err := open(t, wcfg).Apply(ctx, second); err == nil {
		t.Fatal("the write whose every delete was cut landed")
	}
	c := m.Client(t)
	recKey := testPath + "/" + statestore.RecordPath(second.Workload)
	data, err := getKey(t, c, cfg.Bucket, recKey)
	if err != nil {
		t.Fatal(err)
	}
	pending := storedPending(data)
	if len(pending) == 0 {
		t.Fatalf("the record of the write that failed half-way names no intent:\n%s", data)
	}
	got := storeFiles(t, c, cfg.Bucket)
	for _, p := range got {
		if strings.HasPrefix(p, "dev/p/") && !slices.Contains(pending, p) && p != "dev/p/f00.yaml" {
			t.Errorf("%s is in the store, and neither the record nor its intent names it", p)
		}
	}
	// The next write finishes it.
	s := open(t, cfg)
	applyOK(t, s, second)
	if got, want := contents(t, s), map[string]string{"dev/p/f00.yaml": string(second.Files["dev/p/f00.yaml"])}; !maps.Equal(got, want) {
		t.Fatalf("after the next write the store holds %v, want %v", got, want)
	}
	if data, err := getKey(t, c, cfg.Bucket, recKey); err != nil || len(storedPending(data)) > 0 {
		t.Fatalf("after the next write the record still names an intent (%v):\n%s", err, data)
	}
	checkMarker(t, m, cfg.Bucket, "dev")
}
