package chaos

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/internal/testinfra/testenv"
)

// engineOptions are the options the render binary would build for r (its
// inputs written as for the binary), for a render run in this process.
func (w *world) engineOptions(t *testing.T, r *run, platform string) engine.Options {
	t.Helper()
	cmd, err := w.command(r, platform)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range cmd.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	slug := strings.ReplaceAll(r.label, " ", "-")
	return engine.Options{
		OutputDir:         filepath.Join(w.dir, slug, "output"),
		MetadataDir:       filepath.Join(w.dir, slug, "metadata"),
		InputDir:          filepath.Join(w.dir, slug, "input"),
		Platform:          []string{filepath.Join(w.dir, platform)},
		Getenv:            func(k string) string { return env[k] },
		AllowMassDeletion: true,
		RetryDeadline:     time.Minute,
	}
}

// TestDrainRace is a render and a drain of the same resource, each
// publishing after the other has read the store and before it wrote: the
// render of a change made while a drain moves the resource, and the drain
// of a resource whose render lands meanwhile. Whatever the order, the
// resource ends up moved and holding the render's files. The first of them
// is run in this process and stopped where it starts publishing (its
// OnPhase), until the second, the render binary, has finished; the store is
// then checked as a campaign trial is.
//
// Found by the campaign: git-http seed 13 and OCI seed 110 (the render put
// the resource back on the drained destination, which the drain had
// reported moved), git-ssh seed 158 (the drain wrote the files it had
// copied over the render's, which had exited 0).
func TestDrainRace(t *testing.T) {
	for _, kind := range Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := sharedServer(t, kind)
			for _, first := range []OpKind{Configure, Drain} {
				t.Run("held "+string(first), func(t *testing.T) { drainRace(t, srv, first) })
			}
		})
	}
}

func drainRace(t *testing.T, srv server, held OpKind) {
	// w7 is placed on d1, and drained to d2 (d3 and d4, flat, take no
	// drained folders): the spread strategy's tie-break.
	sched := Schedule{Seed: 1, Store: "", Workloads: []Workload{{Name: "w7", Resource: true, Setup: true}, {Name: "w0", Setup: true}}}
	w := &world{dir: t.TempDir(), bin: testenv.RenderBinary(t), sched: sched, store: srv.newStore(t)}
	if err := w.platform("platform", false); err != nil {
		t.Fatal(err)
	}
	if err := w.platform("platform-cordoned", true); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	var runs []*run
	for i, wl := range sched.Workloads {
		r := &run{label: "setup " + wl.Name, key: "setup-" + wl.Name, kind: Configure, workload: i, files: setupFiles, pad: setupPad, deadline: time.Minute}
		if err := w.exec(clock, r, "platform"); err != nil || r.code != 0 {
			t.Fatalf("%s: %v\n%s%s", r.label, err, r.stdout, r.stderr)
		}
		r.start, r.end = -2*time.Hour, -time.Hour
		runs = append(runs, r)
	}
	// w7, the resource, is on d1.
	st, err := w.store.read(context.Background(), dests)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Files[filePath(sched.Workloads[0], drained, "a")]; !ok {
		t.Fatalf("w7 was not placed on %s", drained)
	}
	render := &run{label: "render", key: "render", kind: Configure, workload: 0, files: []string{"c"}, pad: 10, deadline: time.Minute}
	drain := &run{label: "drain", kind: Drain, workload: -1, deadline: time.Minute}
	inner, outer := drain, render
	if held == Drain {
		inner, outer = render, drain
	}
	opts := w.engineOptions(t, outer, "platform-cordoned")
	innerRan := false
	opts.OnPhase = func(phase string) {
		if phase != engine.PhasePublishing || innerRan {
			return // a publish that went stale publishes again
		}
		innerRan = true
		if err := w.exec(clock, inner, "platform-cordoned"); err != nil {
			t.Error(err)
		}
		t.Logf("%s ran while %s was about to publish: exit %d\n%s%s", inner.label, outer.label, inner.code, inner.stdout, inner.stderr)
	}
	e := engine.New(opts)
	defer e.Close()
	outer.start = time.Since(clock)
	var failed []engine.StoreReport
	if held == Drain {
		rep, err := e.Drain(context.Background(), drained)
		if err != nil {
			t.Fatal(err)
		}
		failed = rep.Failed()
		for _, st := range rep.Stuck {
			if strings.HasPrefix(st.Workload, "resource/") {
				t.Fatalf("drain: %s did not move: %s", st.Workload, st.Reason)
			}
		}
	} else {
		rep, err := e.Render(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		failed = rep.Failed()
	}
	outer.end = time.Since(clock)
	if len(failed) > 0 {
		t.Fatalf("%s failed: %v", outer.label, failed[0].Err)
	}
	if inner.code != 0 {
		t.Fatalf("%s exited %d", inner.label, inner.code)
	}
	outer.outcome, outer.code = Landed, 0
	runs = append(runs, render, drain)
	if st, err = w.store.read(context.Background(), dests); err != nil {
		t.Fatal(err)
	}
	st.Read = time.Now()
	for _, v := range check(sched, runs, st) {
		t.Error(v)
	}
}

// sharedServer is kind's server shared by every test (no restarts), with
// a proxy that no fault is ever added to.
func sharedServer(t *testing.T, kind Kind) server {
	t.Helper()
	switch kind {
	case GitHTTP:
		g := testenv.Gitea(t)
		return &giteaServer{g: g, p: mustProxy(t, "gitea", strings.TrimPrefix(g.URL(), "http://"))}
	case S3:
		m := testenv.MinIO(t)
		return &minioServer{m: m, p: mustProxy(t, "minio", m.Endpoint())}
	case OCI:
		r := testenv.Registry(t)
		return &registryServer{r: r, p: mustProxy(t, "registry", r.Addr())}
	}
	return newServer(t, kind) // the SSH server is the test's own anyway
}
