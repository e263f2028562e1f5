package s3store

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// bucketState is every key below the store's path with its ETag, as a
// recursive listing shows them.
func bucketState(t *testing.T, c *minio.Client, bucket string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for o := range c.ListObjects(testCtx(t), bucket, minio.ListObjectsOptions{Prefix: testPath + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out[strings.TrimPrefix(o.Key, testPath+"/")] = o.ETag
	}
	return out
}

// keyExists asks for one key directly: MinIO serves a key that a listing
// hides (one below another key).
func keyExists(t *testing.T, c *minio.Client, bucket, p string) bool {
	t.Helper()
	_, err := c.StatObject(testCtx(t), bucket, testPath+"/"+p, minio.StatObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatal(err)
	}
	return err == nil
}

// TestBlockedPathRefusedAtOnce: S3 keys are flat, so a bucket holds a key
// and keys below it side by side (and MinIO, which keeps objects as files,
// then lists only the upper key: what is below it is hidden from every
// reader that lists the bucket, Flux's Bucket source among them). A write
// whose file would stand below another key (a file where it needs a
// folder), or whose file would stand where keys lie below it (a folder
// where it needs a file), is refused at once, before it writes anything,
// with a *statestore.BlockedError that names the path, what is in the
// way and whose it is: the workflow can fix it (exit 2) when another
// workload's file is in the way, and the store is damaged (exit 1) when
// nobody's is. Found by the fault campaign (sim s3 seeds 14 and 18: a file
// placed where a workload's folder goes; the workload's renders exited 0
// and readers never saw its files).
func TestBlockedPathRefusedAtOnce(t *testing.T) {
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "blocked")
	cfg := minioConfig(m, bucket)
	c := m.Client(t)
	put := func(p, data string) {
		t.Helper()
		if _, err := c.PutObject(testCtx(t), bucket, testPath+"/"+p, strings.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const (
		b, pg  = "resource/ns/pg/b/instance", "promise/postgres/p"
		bFile  = "flat/cm.yaml"
		pgFile = "dev/dependencies/postgres/p/5058f/cm.yaml"
	)
	applyOK(t, open(t, cfg), upd(b, bFile))
	applyOK(t, open(t, cfg), upd(pg, pgFile))
	// Placed by a foreign writer (another tool, a person): a file where a
	// workload's folder goes, and files where a workload's file goes.
	put("dev/dependencies/late", "by hand\n")
	put("dev/dependencies/rogue/p/x.yaml", "by hand\n")
	// A key with more names after it than a short listing shows before
	// the name of its folder ("many.00" < "many/").
	put("dev/many", "by hand\n")
	for i := range 60 {
		put(fmt.Sprintf("dev/many.%02d", i), "by hand\n")
	}

	for _, tc := range []struct {
		name, workload, path string
		blocker, file        string
		folder               bool
		owner                string
	}{
		{"a foreign file where a folder is needed", "promise/late/p", "dev/dependencies/late/p/5058f/cm.yaml",
			"dev/dependencies/late", "dev/dependencies/late", false, ""},
		{"a foreign file where a folder is needed, many names after it", "promise/many/p", "dev/many/p/5058f/cm.yaml",
			"dev/many", "dev/many", false, ""},
		{"foreign files where a file is needed", "promise/rogue/p", "dev/dependencies/rogue",
			"dev/dependencies/rogue", "dev/dependencies/rogue/p/x.yaml", true, ""},
		{"below another workload's file", "resource/ns/pg/d/instance", bFile + "/x.yaml",
			bFile, bFile, false, b},
		{"at another workload's folder", "resource/ns/pg/e/instance", "dev/dependencies/postgres",
			"dev/dependencies/postgres", pgFile, true, pg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := bucketState(t, c, bucket)
			cnt := newCounter()
			cfg := cfg
			cfg.Transport = cnt
			res, err := open(t, cfg).Apply(testCtx(t), upd(tc.workload, tc.path))
			n, _ := cnt.take()
			var be *statestore.BlockedError
			switch {
			case err == nil:
				t.Fatalf("the write of %s landed (%+v); want it refused: %s stands in its way", tc.path, res.Diff, tc.blocker)
			case !errors.As(err, &be) || errors.Is(err, statestore.ErrConflict):
				t.Fatalf("err = %v, want a *statestore.BlockedError, not a conflict", err)
			case be.Path != tc.path || be.Blocker != tc.blocker || be.File != tc.file || be.Folder != tc.folder || be.Owner != tc.owner:
				t.Fatalf("BlockedError %+v, want the path %s blocked by %s (folder %v, file %s) of %q", be, tc.path, tc.blocker, tc.folder, tc.file, tc.owner)
			case be.BadInput() != (tc.owner != ""):
				t.Fatalf("BlockedError %+v: bad input %v, want %v", be, be.BadInput(), tc.owner != "")
			case res.Attempts != 1:
				t.Fatalf("the write was tried %d times: a path in the way is not a lost race", res.Attempts)
			case !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.blocker) || !strings.Contains(err.Error(), tc.owner):
				t.Fatalf("the error does not name the path, what is in the way and whose it is: %v", err)
			case n["PUT"]+n["DELETE"]+n["POST"] > 0:
				t.Fatalf("the refused write sent requests that write: %v", n)
			}
			t.Logf("%v (requests %v)", err, n)
			if after := bucketState(t, c, bucket); !maps.Equal(after, before) {
				t.Fatalf("the bucket changed: %v, before %v", after, before)
			}
			if keyExists(t, c, bucket, tc.path) || keyExists(t, c, bucket, statestore.RecordPath(tc.workload)) {
				t.Fatalf("the refused write left %s or its record", tc.path)
			}
		})
	}
	// Nobody's file changed, and the hidden key is still there.
	if got := contents(t, open(t, cfg)); got[bFile] != "x\n" || got[pgFile] != "x\n" || got["dev/dependencies/late"] != "by hand\n" {
		t.Fatalf("files after the refused writes: %v", got)
	}
	if !keyExists(t, c, bucket, "dev/dependencies/rogue/p/x.yaml") {
		t.Fatal("the foreign file below dev/dependencies/rogue is gone")
	}

	// A workload's own file becomes a folder, and back: what is in the
	// way is the workload's own, and the write removes it.
	applyOK(t, open(t, cfg), upd("promise/own/p", "d1/own/x"))
	applyOK(t, open(t, cfg), upd("promise/own/p", "d1/own/x/y.yaml"))
	applyOK(t, open(t, cfg), upd("promise/own/p", "d1/own/x"))
	if st := bucketState(t, c, bucket); st["d1/own/x/y.yaml"] != "" || st["d1/own/x"] == "" {
		t.Fatalf("d1/own after a file became a folder and back: %v", st)
	}
}

// upd is a render of workload with one file, "x\n", at p.
func upd(workload, p string) statestore.Update {
	return statestore.Update{
		Workload: workload,
		Files:    map[string][]byte{p: []byte("x\n")},
		Record:   &statestore.Record{Type: "promise", Promise: "p", Pipeline: "x"},
		Message:  statestore.Message{Subject: "test: " + workload},
	}
}
