package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// changeOnFirstGet is a transport that, on the first GET of a key ending
// in suffix, has another writer rewrite that object just before the
// request goes out: the render's snapshot listed one version, and the
// read of it finds another.
type changeOnFirstGet struct {
	suffix string
	change func()
	once   sync.Once
	hit    bool
}

func (c *changeOnFirstGet) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, c.suffix) {
		c.once.Do(func() { c.hit = true; c.change() })
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestKratixPlacementReadThatLostARaceIsRetried: a first render of a
// resource looks for where Kratix placed it, reading an aggregatedYAML
// destination's file. When another writer rewrites that file between the
// render's listing and its read, the read meets a changed object: a lost
// race, which is retried from a fresh read of the store, like every
// other. Before the fix the render failed with "the bucket changed
// underneath" (the simulated campaign's s3 seed 66, now and then).
func TestKratixPlacementReadThatLostARaceIsRetried(t *testing.T) {
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "render-adoptrace")
	mc := m.Client(t)
	const key = "clusters/agg/aggregated.yaml"
	put := func(body string) {
		t.Helper()
		if _, err := mc.PutObject(context.Background(), bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Kratix's aggregated file, holding another workload's object.
	put("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  namespace: team\n")

	dir := t.TempDir()
	platform := filepath.Join(dir, "platform.yaml")
	writeT(t, platform, fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata:
  name: default
spec:
  endpoint: %s
  bucketName: %s
  path: clusters
  insecure: true
  authMethod: accessKey
  secretRef:
    name: creds
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  accessKeyID: %s
  secretAccessKey: %s
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: agg
spec:
  stateStoreRef: {kind: BucketStateStore, name: default}
  filepath: {mode: aggregatedYAML}
`, m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()))
	writeT(t, filepath.Join(dir, "output", "db.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db-1\n  namespace: team\n")
	writeT(t, filepath.Join(dir, "input", "object.yaml"), "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db-1\n  namespace: team\n")
	if err := os.MkdirAll(filepath.Join(dir, "metadata"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := &changeOnFirstGet{suffix: "/" + key, change: func() {
		put("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  namespace: team\ndata:\n  changed: \"yes\"\n")
	}}
	var logb bytes.Buffer
	e := New(Options{Log: slog.New(slog.NewTextHandler(&syncWriter{w: &logb}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OutputDir: filepath.Join(dir, "output"), MetadataDir: filepath.Join(dir, "metadata"), InputDir: filepath.Join(dir, "input"),
		Platform: []string{platform}, Getenv: func(string) string { return "" }, Transport: tr,
		Identity: map[string]string{"workflow-type": "resource", "promise": "db", "pipeline": "configure"}})
	defer e.Close()
	rep, err := e.Render(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !tr.hit {
		t.Fatalf("the render never read %s: the test did not meet the race it is about\n%s", key, logb.String())
	}
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("render failed on a lost race: %v\n%s", f[0].Err, logb.String())
	}
	obj, err := mc.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := got.ReadFrom(obj); err != nil {
		t.Fatal(err)
	}
	if s := got.String(); !strings.Contains(s, "name: db-1") || !strings.Contains(s, "changed: \"yes\"") {
		t.Fatalf("%s after the render: want the render's object beside the other writer's change:\n%s", key, s)
	}
}
