package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// The many-sidecars scenarios of issue 34, as tests: many render processes
// at once on a machine whose cores are all busy (a busy loop per core
// beside them, and more renders than cores), into a store that already
// holds a large workload. Every render must exit 0 and land, nothing a
// writer holds while it works may stay, and a writer whose update has
// landed must not wait for anything more.

// starve keeps every core busy until the test ends: one busy-loop process
// per core, as other work on a busy node or a CI runner would.
func starve(t testing.TB) { busyLoops(t) }

// flagMany is how many one-file renders TestManySidecars runs at once on
// each store: 16 in `make test`; `make chaos` runs 64 (issue 34's second
// size), which on a loaded 2-core machine takes tens of minutes.
var flagMany = flag.Int("many", 16, "how many renders TestManySidecars runs at once per store")

// manyStore is a store the scenarios write: its kind and platform document,
// and how to read it straight from the server: a git branch's history and
// refs (open), or a bucket's objects (read).
type manyStore struct {
	kind string
	docs string
	open func(ctx context.Context) (*git.Repository, error)
	read func(ctx context.Context, prefixes ...string) (map[string][]byte, error)
}

func manyGitea(t *testing.T) manyStore {
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "many")
	auth := &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}
	return manyStore{
		kind: "GitStateStore",
		docs: GitStoreDocs("many", repo.CloneURL, storePath, "basicAuth", "username", g.AdminUser(), "password", g.AdminToken()),
		open: func(ctx context.Context) (*git.Repository, error) {
			r, err := git.CloneContext(ctx, memory.NewStorage(), nil, &git.CloneOptions{
				URL: repo.CloneURL, Auth: auth, ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true,
			})
			if err != nil {
				return nil, err
			}
			err = r.FetchContext(ctx, &git.FetchOptions{Auth: auth, RefSpecs: []config.RefSpec{"+refs/render/*:refs/render/*"}})
			if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !strings.Contains(err.Error(), "couldn't find remote ref") {
				return nil, err
			}
			return r, nil
		},
	}
}

func manySSH(t *testing.T) manyStore {
	s := testenv.SSHGit(t)
	url := s.CreateRepo(t, "many")
	dir := strings.TrimPrefix(url, "ssh://git@"+s.Addr)
	return manyStore{
		kind: "GitStateStore",
		docs: GitStoreDocs("many", url, storePath, "ssh", "sshPrivateKey", string(s.ClientKeyPEM), "knownHosts", string(s.KnownHosts)),
		open: func(context.Context) (*git.Repository, error) { return git.PlainOpen(filepath.FromSlash(dir)) },
	}
}

func manyS3(t *testing.T) manyStore {
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "many")
	c := m.Client(t)
	return manyStore{
		kind: "BucketStateStore",
		docs: BucketStoreDocs("many", m.Endpoint(), bucket, storePath, m.AccessKey(), m.SecretKey()),
		read: func(ctx context.Context, prefixes ...string) (map[string][]byte, error) {
			return readSome(ctx, c, bucket, storePath, prefixes)
		},
	}
}

// readSome reads the objects of bucket under prefix whose names (relative
// to prefix) start with one of prefixes: a bucket of a 3,000-file
// workload read whole took more than two minutes on a loaded machine.
func readSome(ctx context.Context, c *minio.Client, bucket, prefix string, prefixes []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range prefixes {
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix + "/" + p, Recursive: true}) {
			if o.Err != nil {
				return nil, o.Err
			}
			b, err := readObject(ctx, c, bucket, o.Key)
			if err != nil {
				return nil, err
			}
			out[strings.TrimPrefix(o.Key, prefix+"/")] = b
		}
	}
	return out, nil
}

// manyWorld is a folder of render inputs: a platform with one store and
// the destinations dests (labelled env: many), and one folder per render.
type manyWorld struct {
	t    *testing.T
	dir  string
	bin  string
	plat string
}

func newManyWorld(t *testing.T, st manyStore, dests ...string) *manyWorld {
	w := &manyWorld{t: t, dir: t.TempDir(), bin: testenv.RenderBinary(t)}
	docs := []string{st.docs}
	for _, d := range dests {
		docs = append(docs, fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: %s
  labels: {env: many}
spec:
  stateStoreRef: {kind: %s, name: many}
`, d, st.kind))
	}
	w.plat = filepath.Join(w.dir, "platform")
	w.write("platform/platform.yaml", strings.Join(docs, "---\n"))
	return w
}

func (w *manyWorld) write(rel, data string) {
	w.t.Helper()
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// manyRender is one render process of a scenario.
type manyRender struct {
	name     string // its folder
	env      []string
	code     int
	stdout   string
	stderr   string
	workload string // its record's key
	took     time.Duration
	exited   time.Time
}

// promise prepares a promise workflow render of promise name whose output
// is docs documents (ConfigMaps carrying key).
func (w *manyWorld) promise(name, key string, docs int) *manyRender {
	for i := range docs {
		w.write(fmt.Sprintf("%s/output/doc-%05d.yaml", name, i), document(name, fmt.Sprintf("%05d", i), key, 40))
	}
	w.write(name+"/metadata/.keep", "")
	w.write(name+"/input/object.yaml", fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", name))
	return &manyRender{name: name, workload: statestore.WorkloadKey("promise", name, "", "", "configure"), env: []string{
		"KRATIX_WORKFLOW_TYPE=promise", "KRATIX_WORKFLOW_ACTION=configure", "KRATIX_PROMISE_NAME=" + name, "KRATIX_PIPELINE_NAME=configure"}}
}

// manyDeadline is the renders' retry deadline. The tests assert that
// every render lands and what the protocol does, not how long it takes
// (the benchmark does): on a shared 2-core machine under other work, one
// trivial push to Gitea took 7-8 s, and 16 renders' pushes at once take
// minutes whatever the protocol. A render that gives up still fails the
// test.
const manyDeadline = 10 * time.Minute

// runAll runs rs at once, each with a debug log in JSON, and waits for
// every one; a render still running after limit is killed (its exit code
// then says so).
func (w *manyWorld) runAll(rs []*manyRender, limit time.Duration) {
	w.t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, r := range rs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			cmd := exec.CommandContext(ctx, w.bin, "--platform", w.plat,
				"--output", filepath.Join(w.dir, r.name, "output"), "--metadata", filepath.Join(w.dir, r.name, "metadata"),
				"--input", filepath.Join(w.dir, r.name, "input"), "--log-format", "json", "--log-level", "debug",
				"--retry-deadline", manyDeadline.String())
			cmd.Dir = w.dir
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "KRATIX_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, r.env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			<-start
			t0 := time.Now()
			_ = cmd.Run()
			r.took, r.exited = time.Since(t0), time.Now()
			r.code = cmd.ProcessState.ExitCode()
			r.stdout, r.stderr = out.String(), errb.String()
		})
	}
	close(start)
	wg.Wait()
	w.t.Cleanup(func() {
		if !w.t.Failed() && os.Getenv("RENDER_MANY_LOGS") == "" {
			return
		}
		// Every render's whole log, for the post-mortem (or, with
		// RENDER_MANY_LOGS set, to read where the time went).
		dir, err := os.MkdirTemp("", "many-sidecars-logs-")
		if err != nil {
			return
		}
		for _, r := range rs {
			_ = os.WriteFile(filepath.Join(dir, r.name+".log"), []byte(r.stderr+"\n--- stdout\n"+r.stdout), 0o644)
		}
		w.t.Logf("the renders' logs are in %s", dir)
	})
}

// mustExit0 fails the test for every render that did not exit 0, with the
// end of what it said.
func mustExit0(t *testing.T, rs []*manyRender) {
	t.Helper()
	failed := 0
	for _, r := range rs {
		if r.code == 0 {
			continue
		}
		failed++
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		t.Errorf("%s exited %d; the end of its log:\n  %s", r.name, r.code, strings.Join(lines[max(0, len(lines)-8):], "\n  "))
	}
	if failed > 0 {
		t.Fatalf("%d of %d renders failed", failed, len(rs))
	}
}

// summarize logs how long the renders took and what their pushes did,
// from their debug logs: the figures to compare runs by (the test asserts
// none of them).
func summarize(t *testing.T, rs []*manyRender) {
	t.Helper()
	var slowest time.Duration
	outcomes := map[string]int{}
	for _, r := range rs {
		slowest = max(slowest, r.took)
		for _, l := range logLines(r.stderr) {
			if l.str("msg") == "push" {
				o, _, _ := strings.Cut(l.str("outcome"), ":")
				outcomes[o]++
			}
		}
	}
	t.Logf("%d renders at once: the last exited after %v; pushes by outcome: %v", len(rs), slowest.Round(time.Millisecond), outcomes)
}

// logLine is one line of a render's JSON debug log.
type logLine map[string]any

func logLines(stderr string) []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// history is the branch's first-parent chain, oldest first.
func history(t *testing.T, r *git.Repository) []*object.Commit {
	t.Helper()
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatalf("branch main: %v", err)
	}
	var chain []*object.Commit
	for h := ref.Hash(); !h.IsZero(); {
		c, err := r.CommitObject(h)
		if err != nil {
			t.Fatalf("commit %s: %v", h, err)
		}
		chain = append(chain, c)
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	slices.Reverse(chain)
	return chain
}

// requestRefs are the group-commit requests left on the server.
func requestRefs(t *testing.T, r *git.Repository) []string {
	t.Helper()
	refs, err := r.References()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	_ = refs.ForEach(func(ref *plumbing.Reference) error {
		if strings.HasPrefix(ref.Name().String(), "refs/render/") {
			out = append(out, ref.Name().String())
		}
		return nil
	})
	return out
}

// checkNoWaitAfterLanding checks, from the writers' debug logs, that no
// writer waited once its update was on the branch: a waiting writer whose
// poll showed a tip holding its update (landed[w] is the index in chain of
// the first commit holding w's update) polls no more. Its request is gone
// by then, or, when the poll met the leader's push half-way (the branch
// moved, the request not yet deleted), the commits the branch gained say
// that it landed. A writer carried by another's push never waits for a
// ref someone may or may not delete later.
func checkNoWaitAfterLanding(t *testing.T, rs []*manyRender, chain []*object.Commit, landed map[string]int) {
	t.Helper()
	at := map[string]int{}
	for i, c := range chain {
		at[c.Hash.String()] = i
	}
	for _, r := range rs {
		seen := "" // the first poll that showed the update on the branch
		for _, l := range logLines(r.stderr) {
			if l.str("msg") != "poll" {
				continue
			}
			if seen != "" {
				t.Errorf("%s polled again (poll %v, request there: %v) after poll %s showed its update on the branch (its update landed in commit %d of %d)",
					r.name, l["poll"], l["request_present"], seen, landed[r.workload], len(chain))
				break
			}
			if i, ok := at[l.str("tip")]; ok && i >= landed[r.workload] {
				seen = fmt.Sprintf("%v (tip %s, commit %d)", l["poll"], l.str("tip")[:7], i)
			}
		}
	}
}

// The big workload every one-file scenario writes beside: a promise of
// 3,000 documents, rendered once before the scenario's renders.
const bigDocs = 3000

// manyPromises is the scenario of N one-file promise renders at once into
// st, on a starved machine, beside a 3,000-file workload.
func manyPromises(t *testing.T, st manyStore, n int) {
	w := newManyWorld(t, st, "worker")
	big := w.promise("big", "big", bigDocs)
	w.runAll([]*manyRender{big}, manyDeadline+5*time.Minute)
	mustExit0(t, []*manyRender{big})

	var rs []*manyRender
	for i := range n {
		rs = append(rs, w.promise(fmt.Sprintf("p%02d", i), manyKey(i), 1))
	}
	starve(t)
	w.runAll(rs, manyDeadline+5*time.Minute)
	summarize(t, rs)
	mustExit0(t, rs)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if st.open == nil {
		manyBucketChecks(ctx, t, w, st, rs)
		return
	}
	repo, err := st.open(ctx)
	if err != nil {
		t.Fatalf("read the store: %v", err)
	}
	chain := history(t, repo)
	landed := map[string]int{}
	for i, r := range rs {
		p := path.Join(storePath, manyFile(r))
		landed[r.workload] = -1
		for j, c := range chain {
			if _, err := c.File(p); err == nil {
				landed[r.workload] = j
				break
			}
		}
		if landed[r.workload] < 0 {
			t.Errorf("%s exited 0 but its file %s is not on the branch", r.name, p)
			continue
		}
		f, err := chain[len(chain)-1].File(p)
		if err != nil {
			t.Errorf("%s: %s is gone from the tip", r.name, p)
			continue
		}
		if s, _ := f.Contents(); !strings.Contains(s, fmt.Sprintf("op: %q", manyKey(i))) {
			t.Errorf("%s: %s holds %q", r.name, p, s)
		}
	}
	checkNoWaitAfterLanding(t, rs, chain, landed)
	landingToExit(t, rs, chain, landed)
	if left := requestRefs(t, repo); len(left) > 0 {
		t.Errorf("requests left on the server after every render exited: %v", left)
	}

	// Then one render alone, the many gone: it pushes its branch and
	// nothing else (no request, no other writer's leftover to delete),
	// and after it, as after the many, no request is left on the server.
	lone := w.promise("p00", "key-lone", 1)
	w.runAll([]*manyRender{lone}, manyDeadline+5*time.Minute)
	mustExit0(t, []*manyRender{lone})
	var pushes []string
	for _, l := range logLines(lone.stderr) {
		if l.str("msg") == "push" {
			pushes = append(pushes, l.str("refs")+": "+l.str("outcome"))
		}
	}
	if len(pushes) != 1 || !strings.HasPrefix(pushes[0], "main ") || strings.Contains(pushes[0], ",") || !strings.HasSuffix(pushes[0], ": landed") {
		t.Errorf("a render with no competitor pushed %q; want one push of the branch alone", pushes)
	}
	repo, err = st.open(ctx)
	if err != nil {
		t.Fatalf("read the store: %v", err)
	}
	if left := requestRefs(t, repo); len(left) > 0 {
		t.Errorf("requests left on the server after every render exited: %v", left)
	}
}

// manyFile is where render r's one file lands, relative to the store's
// path; manyKey(i) is what the i-th render's file carries.
func manyFile(r *manyRender) string {
	return path.Join("worker/dependencies", r.name, "configure/5058f/doc-00000.yaml")
}

func manyKey(i int) string { return fmt.Sprintf("key-%02d", i) }

// manyBucketChecks checks a bucket after the many renders: every render's
// file is there with its content, and no record holds an intent (an
// unfinished write's s3Pending); then one render alone lands, and again
// no intent is left.
func manyBucketChecks(ctx context.Context, t *testing.T, w *manyWorld, st manyStore, rs []*manyRender) {
	t.Helper()
	check := func(rs []*manyRender, keys []string) {
		t.Helper()
		want := []string{statestore.RecordsDir + "/"}
		for _, r := range rs {
			want = append(want, manyFile(r))
		}
		files, err := st.read(ctx, want...)
		if err != nil {
			t.Fatalf("read the bucket: %v", err)
		}
		for i, r := range rs {
			b, ok := files[manyFile(r)]
			if !ok {
				t.Errorf("%s exited 0 but its file %s is not in the bucket", r.name, manyFile(r))
				continue
			}
			if !strings.Contains(string(b), fmt.Sprintf("op: %q", keys[i])) {
				t.Errorf("%s: %s holds %q", r.name, manyFile(r), b)
			}
		}
		for _, p := range sortedKeys(files) {
			if !strings.HasPrefix(p, statestore.RecordsDir+"/") {
				continue
			}
			var probe struct {
				Pending []string `json:"s3Pending"`
			}
			if json.Unmarshal(files[p], &probe) == nil && len(probe.Pending) > 0 {
				t.Errorf("an intent is left after every render exited: %s names %v", p, probe.Pending)
			}
		}
	}
	var keys []string
	for i := range rs {
		keys = append(keys, manyKey(i))
	}
	check(rs, keys)
	lone := w.promise("p00", "key-lone", 1)
	w.runAll([]*manyRender{lone}, manyDeadline+5*time.Minute)
	mustExit0(t, []*manyRender{lone})
	check([]*manyRender{lone}, []string{"key-lone"})
}

// landingToExit logs, from the renders' debug logs, how long each render
// ran on after its update was on the branch: from the end of the push that
// landed the first commit holding it (its own, or a leader's whose new tip
// is that commit or a later one of the chain) to the process's exit. It is
// a figure to compare runs by; the test asserts none of it (the benchmark
// measures it at the server).
func landingToExit(t *testing.T, rs []*manyRender, chain []*object.Commit, landed map[string]int) {
	t.Helper()
	pushed := map[string]time.Time{} // short hash of a pushed tip -> when its push was answered
	for _, r := range rs {
		for _, l := range logLines(r.stderr) {
			if l.str("msg") != "push" || l.str("outcome") != "landed" {
				continue
			}
			ref, _, _ := strings.Cut(l.str("refs"), ",")
			_, span, ok := strings.Cut(ref, "main ")
			if !ok {
				continue
			}
			_, tip, _ := strings.Cut(span, "..")
			at, err := time.Parse(time.RFC3339Nano, l.str("time"))
			if err != nil || tip == "" {
				continue
			}
			if old, ok := pushed[tip]; !ok || at.Before(old) {
				pushed[tip] = at
			}
		}
	}
	var worst time.Duration
	var who string
	var all []time.Duration
	for _, r := range rs {
		i := landed[r.workload]
		if i < 0 {
			continue
		}
		for k := i; k < len(chain); k++ {
			if at, ok := pushed[chain[k].Hash.String()[:7]]; ok {
				d := r.exited.Sub(at)
				all = append(all, d)
				if d > worst {
					worst, who = d, r.name
				}
				break
			}
		}
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	t.Logf("landing to exit (%d of %d renders): p50 %v, max %v (%s)", len(all), len(rs),
		all[len(all)/2].Round(time.Millisecond), worst.Round(time.Millisecond), who)
}

// TestManySidecars runs issue 34's scenario on a machine with every core
// busy: -many (16; `make chaos`: 64) one-file promise renders at once into
// a store that holds a 3,000-file workload, on Gitea (HTTP), on the SSH git
// server and on MinIO, then one render alone. Every render must exit 0 and
// land, no writer may poll on once its update is on the branch, the lone
// render must push its branch alone, and no request (git) or intent (S3)
// may be left on the server. Before the fix, 15 of 16 git writes on Gitea
// gave up at the retry deadline (twice, at load averages of about 20 and
// 47), and every render that won the branch left its own request behind (a
// lone render always did). (The same scenario for one resource is
// internal/engine's TestSameResourceAtOnceAllLand.)
func TestManySidecars(t *testing.T) {
	n := *flagMany
	t.Run("git-http", func(t *testing.T) { manyPromises(t, manyGitea(t), n) })
	t.Run("git-ssh", func(t *testing.T) { manyPromises(t, manySSH(t), n) })
	t.Run("s3", func(t *testing.T) { manyPromises(t, manyS3(t), n) })
}
