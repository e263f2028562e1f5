package cli_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

func bucketStore(name, endpoint, bucket, secret string, extra ...string) string {
	s := fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata:
  name: %s
spec:
  endpoint: %s
  bucketName: %s
  path: clusters
  insecure: true
  authMethod: accessKey
  secretRef:
    name: %s
`, name, endpoint, bucket, secret)
	for _, e := range extra {
		s += "  " + e + "\n"
	}
	return s
}

func s3Secret(name, key, secret string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\nstringData:\n  accessKeyID: %s\n  secretAccessKey: %s\n", name, key, secret)
}

func bucketKeys(t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	sort.Strings(keys)
	return keys
}

// A render into a real MinIO bucket through the whole command: Kratix's
// layout, the completion marker, an unchanged rerun that writes nothing,
// and failures that name the store and bucket without the secret.
func TestRenderToMinIO(t *testing.T) {
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "render-cli")
	w := newWorld(t)
	w.file("platform/bucket.yaml", docs(bucketStore("minio", m.Endpoint(), bucket, "minio-creds"), s3Secret("minio-creds", m.AccessKey(), m.SecretKey())))
	d := strings.Replace(dest("edge", map[string]string{"env": "dev"}), "kind: GitStateStore", "kind: BucketStateStore", 1)
	w.file("platform/destinations.yaml", strings.Replace(d, "name: default", "name: minio", 1))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db"), "backup/job.yaml": obj("Job")})
	r := wf.mustRun(0, resourceEnv("pg", "team", "orders", "configure"))
	if !strings.Contains(r.out, "BucketStateStore/minio: wrote") {
		t.Fatalf("report: %s", r.out)
	}
	keys := bucketKeys(t, m.Client(t), bucket)
	for _, want := range []string{
		"clusters/edge/resources/team/pg/orders/configure/5058f/db.yaml",
		"clusters/edge/resources/team/pg/orders/configure/5058f/backup/job.yaml",
		"clusters/edge/resources/kratix-canary-configmap.yaml",
		"clusters/edge/dependencies/kratix-canary-namespace.yaml",
		"clusters/edge/.render/complete/resource/team/pg/orders/configure.json",
		"clusters/.render/workloads/resource/team/pg/orders/configure.json",
	} {
		if !slicesContains(keys, want) {
			t.Errorf("missing %s in %v", want, keys)
		}
	}
	again := wf.mustRun(0, resourceEnv("pg", "team", "orders", "configure"))
	if !strings.Contains(again.out, "BucketStateStore/minio: up to date") {
		t.Errorf("unchanged rerun: %s", again.out)
	}

	// Wrong credentials: exit 1, the store and bucket named, no secret shown.
	const wrong = "wrong-secret-key-123"
	w.file("platform/bucket.yaml", docs(bucketStore("minio", m.Endpoint(), bucket, "minio-creds"), s3Secret("minio-creds", m.AccessKey(), wrong)))
	bad := wf.run(resourceEnv("pg", "team", "orders", "configure"), "--retry-deadline", "2s")
	if bad.code != 1 || !strings.Contains(bad.errout, "BucketStateStore/minio") || !strings.Contains(bad.errout, bucket) ||
		strings.Contains(bad.out+bad.errout, wrong) || strings.Contains(bad.out+bad.errout, m.SecretKey()) {
		t.Fatalf("wrong credentials: %s", bad)
	}
	// A missing bucket is an error unless createBucket is set.
	missing := testenv.UniqueName("render-missing")
	w.file("platform/bucket.yaml", docs(bucketStore("minio", m.Endpoint(), missing, "minio-creds"), s3Secret("minio-creds", m.AccessKey(), m.SecretKey())))
	if r := wf.run(resourceEnv("pg", "team", "orders", "configure"), "--retry-deadline", "2s"); r.code != 1 || !strings.Contains(r.errout, missing) {
		t.Fatalf("missing bucket: %s", r)
	}
	w.file("platform/bucket.yaml", docs(bucketStore("minio", m.Endpoint(), missing, "minio-creds", "createBucket: true"), s3Secret("minio-creds", m.AccessKey(), m.SecretKey())))
	wf.mustRun(0, resourceEnv("pg", "team", "orders", "configure"))
	if len(bucketKeys(t, m.Client(t), missing)) == 0 {
		t.Fatal("createBucket: nothing written")
	}
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
