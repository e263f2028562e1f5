package faulttest

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore/s3store"
)

// killDocs is how many files the killed render writes (-kill-docs): enough
// that each render takes long enough to be killed part of the way through
// (the kills fall at fractions of the last render's time; in TestKillS3 at
// counts of objects already replaced, and a reader must see a half-written
// destination), and that each version's 100 files changed, deleted and
// added are a small part of it. It was 3,000; 1,000 takes the same paths
// (one pack and one push; the same upload, markers and listing of up to
// 1,000 keys a page) in about a third of the time. `-args -kill-docs 3000`
// runs the old size.
var killDocs = 1000

func init() {
	flag.IntVar(&killDocs, "kill-docs", killDocs, "files the killed renders of TestKillGit and TestKillS3 write")
}

// version rewrites the output as version v (1, 2, 3...): every document
// changes, and each version drops 100 documents and adds 100 new ones, so
// an old state and a new one differ in changed, deleted and added files.
func (w *workflow) version(t testing.TB, v int) {
	t.Helper()
	from, to := (v-1)*100, (v-1)*100+killDocs
	if v > 1 {
		for i := from - 100; i < from; i++ {
			w.remove(t, fmt.Sprintf("output/doc-%05d.yaml", i))
		}
	}
	w.docs(t, from, to, fmt.Sprintf("v%d", v))
}

func (w *workflow) remove(t testing.TB, rel string) {
	t.Helper()
	if err := os.Remove(w.path(rel)); err != nil {
		t.Fatal(err)
	}
}

// killDelays are the moments, as fractions of the previous whole render,
// at which renders are killed, jittered by ±10% of a render: half way,
// near the end (while objects are sent and the branch is about to move),
// and about when it ends (the kill may then find it finished).
var killDelays = []float64{0.5, 0.95, 1.15}

func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (f + (rand.Float64()-0.5)*0.2))
}

// TestKillGit: a render into a Gitea repository, and one into a local
// bare repository, are killed with SIGKILL at several moments while
// writing killDocs files. Each time, the branch tip's tree is exactly the old
// state or exactly the new one, and a rerun completes with the new state.
func TestKillGit(t *testing.T) {
	t.Parallel()
	t.Run("gitea", func(t *testing.T) {
		t.Parallel()
		g := testenv.Gitea(t)
		repo := g.CreateRepoInfo(t, "kill")
		read := func() tree { return remoteTree(t, repo.CloneURL, g.AdminUser(), g.AdminToken()) }
		killGit(t, gitStore("store", repo.CloneURL, g.AdminUser(), g.AdminToken()), "GitStateStore", read, nil)
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "state.git")
		read := func() tree { return localTree(t, dir) }
		fsck := func() {
			t.Helper()
			if _, err := exec.LookPath("git"); err != nil {
				return
			}
			out, err := exec.Command("git", "--git-dir", dir, "fsck", "--no-progress", "--no-dangling").CombinedOutput()
			if err != nil {
				t.Errorf("git fsck after the kill: %v\n%s", err, out)
			}
		}
		killGit(t, localStore("store", dir), "GitStateStore", read, fsck)
	})
}

func killGit(t *testing.T, store, kind string, read func() tree, check func()) {
	w := newWorkflow(t, "kill")
	w.setPlatform(t, store, destination("dev-1", kind, "store"))
	w.version(t, 1)
	last := mustRender(t, w, 0).took
	old := read()
	if n := len(old.files); n < killDocs {
		t.Fatalf("the first render left %d files, want at least %d", n, killDocs)
	}
	outcomes := map[string]int{}
	for i, f := range killDelays {
		v := i + 2
		w.version(t, v)
		p := start(t, w)
		time.Sleep(jitter(last, f))
		killed := p.kill()
		seen := read()
		if check != nil {
			check()
		}
		rerun := mustRender(t, w, 0)
		new := read()
		if new.equal(old) {
			t.Fatalf("version %d: the rerun did not change the branch", v)
		}
		switch {
		case seen.equal(old):
			outcomes["old"]++
		case seen.equal(new):
			outcomes["new"]++
		default:
			t.Fatalf("version %d: after SIGKILL (exit %d, %v in) the branch tip %s is neither the old tree (%d files) nor the new one (%d files): %d files",
				v, killed.code, killed.took.Round(time.Millisecond), seen.commit, len(old.files), len(new.files), len(seen.files))
		}
		t.Logf("version %d: killed after %v (exit %d): branch held the %s state; rerun took %v",
			v, killed.took.Round(time.Millisecond), killed.code, map[bool]string{true: "old", false: "new"}[seen.equal(old)], rerun.took.Round(time.Millisecond))
		old, last = new, rerun.took
	}
	t.Logf("outcomes after SIGKILL: %v", outcomes)
}

// TestStaleLock: a writer killed while it held the branch's lock file
// (between creating refs/heads/main.lock and renaming it over the ref)
// leaves the lock behind. The next render must still land: render takes a
// lock older than 30s to be a dead writer's.
//
// The lock is left as a writer killed lockAge ago would have left it (its
// time set back), so that the render waits the last few seconds of the
// 30s, and takes it over, rather than the test waiting all 30.
func TestStaleLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds render and waits about 5s; skipped with -short")
	}
	const lockAge = 25 * time.Second
	dir := filepath.Join(t.TempDir(), "state.git")
	w := newWorkflow(t, "lock")
	w.setPlatform(t, localStore("store", dir), destination("dev-1", "GitStateStore", "store"))
	w.docs(t, 0, 5, "v1")
	mustRender(t, w, 0)
	before := localTree(t, dir)
	lock := filepath.Join(dir, "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, []byte(before.commit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	left := time.Now().Add(-lockAge)
	if err := os.Chtimes(lock, left, left); err != nil {
		t.Fatal(err)
	}
	w.docs(t, 0, 5, "v2")
	res := mustRender(t, w, 0)
	if localTree(t, dir).equal(before) {
		t.Fatalf("the render after a stale lock did not write: %s", res)
	}
	// A lock that may still be a live writer's is not taken: the render
	// ended after the lock was 30s old, not before.
	if aged := time.Since(left); aged < 30*time.Second {
		t.Fatalf("the render took the lock over when it was less than %v old, not 30s: %s", aged.Round(time.Millisecond), res)
	}
	t.Logf("a lock left by a dead writer delayed the next render to %v; it said: %q", res.took.Round(time.Millisecond), strings.TrimSpace(res.stderr))
}

// TestKillS3: a render into a bucket is killed with SIGKILL while it
// uploads killDocs files, at several points of the upload. A reader polls the
// destination all along, as Flux's Bucket source would: whenever the
// completeness marker's digest matches the listing, the listing is exactly
// the old state or exactly the new one. A rerun completes.
func TestKillS3(t *testing.T) {
	t.Parallel()
	m := testenv.MinIO(t)
	c := m.Client(t)
	bucket := m.CreateBucket(t, "kill")
	w := newWorkflow(t, "kill")
	w.setPlatform(t, bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()),
		destination("dev-1", "BucketStateStore", "minio"))
	// A bound on the whole test, not a speed check: three 3,000-file uploads
	// and their reruns took over 3 minutes on a loaded two-core machine
	// (killDocs is 1,000 now).
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const prefix = "clusters/dev-1/"

	w.version(t, 1)
	mustRender(t, w, 0)
	old, err := listBucket(ctx, c, bucket, prefix)
	if err != nil {
		t.Fatal(err)
	}
	checkFinal(t, ctx, c, bucket, prefix, old, 1)

	type observation struct {
		listing map[string]string
		markers []s3store.Marker
	}
	mixed := 0
	for i, threshold := range []int{50, killDocs / 3, killDocs * 5 / 6} {
		v := i + 2
		w.version(t, v)
		p := start(t, w)
		var obs []observation
		observe := func() map[string]string {
			l, err := listBucket(ctx, c, bucket, prefix)
			if err != nil {
				t.Fatal(err)
			}
			obs = append(obs, observation{listing: l, markers: readMarkers(ctx, c, bucket, prefix, l)})
			return l
		}
		// Kill once the upload has visibly started: threshold objects changed.
		var killed result
		for {
			l := observe()
			changed := 0
			for p, etag := range l {
				if old[p] != etag {
					changed++
				}
			}
			if changed >= threshold || p.exited() {
				killed = p.kill()
				break
			}
		}
		observe()
		mustRender(t, w, 0)
		new, err := listBucket(ctx, c, bucket, prefix)
		if err != nil {
			t.Fatal(err)
		}
		checkFinal(t, ctx, c, bucket, prefix, new, v)
		vouched := 0
		for _, o := range obs {
			state := "mixed"
			switch {
			case sameListing(o.listing, old):
				state = "old"
			case sameListing(o.listing, new):
				state = "new"
			default:
				mixed++
			}
			if len(o.markers) == 0 || !s3store.CheckListing(o.listing, o.markers).Complete() {
				continue
			}
			vouched++
			if state == "mixed" {
				t.Fatalf("version %d: the markers vouch for a listing that is neither the old state nor the new one (%d objects)", v, len(o.listing))
			}
		}
		t.Logf("version %d: killed after %v (exit %d, %s); %d observations, %d vouched for by the marker",
			v, killed.took.Round(time.Millisecond), killed.code, map[bool]string{true: "it had finished", false: "mid-upload"}[killed.code == 0], len(obs), vouched)
		old = new
	}
	if mixed == 0 {
		t.Errorf("no observation saw a half-written destination: the kills did not land mid-upload, so this test proved nothing")
	}
}

func getObject(ctx context.Context, c *minio.Client, bucket, key string) ([]byte, error) {
	o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}

// readMarkers reads the workload markers a listing of a destination
// (below prefix) shows; one that vanished since is left out, which can
// only make the listing look less complete.
func readMarkers(ctx context.Context, c *minio.Client, bucket, prefix string, l map[string]string) []s3store.Marker {
	var out []s3store.Marker
	for p := range l {
		if !s3store.IsMarkerKey(p) || p == s3store.MarkerName {
			continue
		}
		var m s3store.Marker
		if data, err := getObject(ctx, c, bucket, prefix+p); err == nil && json.Unmarshal(data, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// sameListing compares two listings, leaving the markers out.
func sameListing(a, b map[string]string) bool {
	count := func(m map[string]string) int {
		n := 0
		for p := range m {
			if !s3store.IsMarkerKey(p) {
				n++
			}
		}
		return n
	}
	if count(a) != count(b) {
		return false
	}
	for p, etag := range a {
		if !s3store.IsMarkerKey(p) && b[p] != etag {
			return false
		}
	}
	return true
}

// checkFinal checks that a destination holds exactly version v, and that
// its marker vouches for it.
func checkFinal(t *testing.T, ctx context.Context, c *minio.Client, bucket, prefix string, l map[string]string, v int) {
	t.Helper()
	from, to := (v-1)*100, (v-1)*100+killDocs
	docs := 0
	for p, etag := range l {
		var i int
		if _, err := fmt.Sscanf(p, "dependencies/kill/configure/5058f/doc-%05d.yaml", &i); err != nil {
			continue
		}
		docs++
		sum := md5.Sum([]byte(configMap("kill", i, fmt.Sprintf("v%d", v))))
		if i < from || i >= to || etag != hex.EncodeToString(sum[:]) {
			t.Fatalf("version %d: %s should not be there, or holds another version", v, p)
		}
	}
	if docs != killDocs {
		t.Fatalf("version %d: %d documents, want %d", v, docs, killDocs)
	}
	markers := readMarkers(ctx, c, bucket, prefix, l)
	if st := s3store.CheckListing(l, markers); len(markers) == 0 || !st.Complete() {
		t.Fatalf("version %d: the markers do not vouch for the finished destination: %d markers, mismatched %v, unnamed %v", v, len(markers), st.Mismatched, st.Unnamed)
	}
}
