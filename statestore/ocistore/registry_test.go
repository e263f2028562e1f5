package ocistore_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
	"github.com/render-dev/render/statestore/storetest"
)

func config(r *testenv.RegistryServer, repo string) ocistore.Config {
	return ocistore.Config{
		Registry: r.Addr(), Repository: repo, Insecure: true,
		Username: r.User(), Password: r.Password(), Create: true,
	}
}

func open(t *testing.T, cfg ocistore.Config) *ocistore.Store {
	t.Helper()
	s, err := ocistore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func repoName(prefix string) string { return "render-test/" + testenv.UniqueName(prefix) }

func TestConformance(t *testing.T) {
	r := testenv.Registry(t)
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			cfg := config(r, repoName(t.Name()))
			return func() statestore.Store { return open(t, cfg) }
		},
		Missing: func(t *testing.T) statestore.Store {
			cfg := config(r, repoName("missing"))
			cfg.Create = false
			return open(t, cfg)
		},
	})
}

// TestConformanceSpilled runs the suite with every layer a Store reads
// from the registry spilled to a temporary file, and every commit that
// changes one packed from the changes laid over it (see layerFiles), the
// way a store of 100,000 workloads is read and written.
// Eight concurrent writers, not 64: the suite's writers already ran
// against the registry in TestConformance, and this run is about layers.
func TestConformanceSpilled(t *testing.T) {
	defer func(v int64) { *ocistore.SpillAbove = v }(*ocistore.SpillAbove)
	*ocistore.SpillAbove = 0
	r := testenv.Registry(t)
	storetest.Run(t, storetest.Harness{
		Writers: 8,
		Fresh: func(t *testing.T) func() statestore.Store {
			cfg := config(r, repoName(t.Name()))
			return func() statestore.Store { return open(t, cfg) }
		},
		Missing: func(t *testing.T) statestore.Store {
			cfg := config(r, repoName("missing"))
			cfg.Create = false
			return open(t, cfg)
		},
	})
}

// TestPullWithORAS pulls every destination artifact render wrote with the
// oras CLI, a client render shares no code with, and checks the files.
func TestPullWithORAS(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("pull"))
	s := open(t, cfg)
	ctx := context.Background()
	want := map[string]map[string]string{
		"clusters/dev": {"team-a/app.yaml": "kind: ConfigMap\n", "team-a/sub/b.yaml": "b: 1\n"},
		"prod":         {"app.yaml": "kind: Secret\n"},
	}
	u := statestore.Update{
		Workload: "w/pull", Files: map[string][]byte{}, Record: &statestore.Record{},
		Destinations: []string{"clusters/dev", "prod"},
	}
	for d, files := range want {
		for p, c := range files {
			u.Files[d+"/"+p] = []byte(c)
		}
	}
	if _, err := s.Apply(ctx, u); err != nil {
		t.Fatal(err)
	}
	for d, files := range want {
		for _, tag := range []string{"latest", "render-1"} {
			got := orasPull(t, r, cfg.Registry+"/"+cfg.Repository+"/"+d+":"+tag)
			if !reflect.DeepEqual(got, files) {
				t.Fatalf("%s:%s pulled %v, want %v", d, tag, got, files)
			}
		}
	}
	// An unchanged render pushes nothing; a one-file change moves only its
	// destination's tag.
	before := resolve(t, r, cfg, "prod", "latest")
	if res, err := s.Apply(ctx, u); err != nil || res.Updated {
		t.Fatalf("unchanged render: %+v, %v", res, err)
	}
	u.Files["clusters/dev/team-a/app.yaml"] = []byte("kind: ConfigMap\ndata: {}\n")
	if _, err := s.Apply(ctx, u); err != nil {
		t.Fatal(err)
	}
	if after := resolve(t, r, cfg, "prod", "latest"); after != before {
		t.Fatalf("prod's artifact moved from %s to %s on a change in clusters/dev", before, after)
	}
	got := orasPull(t, r, cfg.Registry+"/"+cfg.Repository+"/clusters/dev:latest")
	if got["team-a/app.yaml"] != "kind: ConfigMap\ndata: {}\n" {
		t.Fatalf("pulled %v after the change", got)
	}
}

func resolve(t *testing.T, r *testenv.RegistryServer, cfg ocistore.Config, d, tag string) string {
	t.Helper()
	return strings.TrimSpace(string(r.RunORAS(t, "resolve", cfg.Registry+"/"+cfg.Repository+"/"+d+":"+tag)))
}

// orasPull pulls ref with the oras CLI, checks that it is what Flux and
// Argo CD take (Flux's config, one tar+gzip layer), and returns its files.
func orasPull(t *testing.T, r *testenv.RegistryServer, ref string) map[string]string {
	t.Helper()
	a := r.Pull(t, ref)
	if a.ConfigMediaType != ocistore.FluxConfigMediaType || !reflect.DeepEqual(a.LayerMediaTypes, []string{ocistore.LayerMediaType}) {
		t.Fatalf("%s is not a Flux artifact with one tar+gzip layer: config %s, layers %v", ref, a.ConfigMediaType, a.LayerMediaTypes)
	}
	return a.Files
}

// TestBadCredentials: refused credentials wrap ErrAuth, name the store and
// show no secret.
func TestBadCredentials(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("auth"))
	cfg.Password = "wrong-password-for-render-tests"
	s := open(t, cfg)
	_, err := s.Records(context.Background())
	if !errors.Is(err, statestore.ErrAuth) || !strings.Contains(err.Error(), s.String()) {
		t.Fatalf("wrong password: got %v, want ErrAuth naming %s", err, s)
	}
	for _, secret := range []string{cfg.Password, r.Password()} {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("error shows a secret: %v", err)
		}
	}
	_, err = s.Apply(context.Background(), statestore.Update{Workload: "w/x", Files: map[string][]byte{"d/x.yaml": []byte("x\n")}, Record: &statestore.Record{}})
	if !errors.Is(err, statestore.ErrAuth) {
		t.Fatalf("Apply with a wrong password: got %v, want ErrAuth", err)
	}
}

// TestApplyAll: a batch is one new state (one generation, each destination
// tagged once), each update planned on top of the ones before it; a batch
// whose updates fight over a file writes nothing; an unchanged batch
// pushes nothing.
func TestApplyAll(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("batch"))
	s := open(t, cfg)
	ctx := context.Background()
	upd := func(w string, files map[string]string) statestore.Update {
		u := statestore.Update{Workload: w, Files: map[string][]byte{}, Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: w}}
		for p, c := range files {
			u.Files[p] = []byte(c)
			d, _, _ := strings.Cut(p, "/")
			if !slices.Contains(u.Destinations, d) {
				u.Destinations = append(u.Destinations, d)
			}
		}
		return u
	}
	if _, err := s.Apply(ctx, upd("promise/p/w1", map[string]string{"d1/w1.yaml": "w1\n"})); err != nil {
		t.Fatal(err)
	}
	batch := []statestore.Update{
		upd("promise/p/w2", map[string]string{"d1/w2.yaml": "w2\n"}),
		upd("promise/p/w3", map[string]string{"d2/w3.yaml": "w3\n", "d1/w3.yaml": "w3\n"}),
		{Workload: "promise/p/w1"}, // removed
	}
	res, err := s.ApplyAll(ctx, batch)
	if err != nil || !res.Updated {
		t.Fatalf("ApplyAll: %+v, %v", res, err)
	}
	if got := sorted(res.Added); !reflect.DeepEqual(got, []string{"d1/w2.yaml", "d1/w3.yaml", "d2/w3.yaml"}) || !reflect.DeepEqual(res.Deleted, []string{"d1/w1.yaml"}) {
		t.Fatalf("diff %+v", res.Diff)
	}
	for d, want := range map[string]map[string]string{
		"d1": {"w2.yaml": "w2\n", "w3.yaml": "w3\n"},
		"d2": {"w3.yaml": "w3\n"},
	} {
		if got := orasPull(t, r, cfg.Registry+"/"+cfg.Repository+"/"+d+":latest"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s holds %v, want %v", d, got, want)
		}
		// One generation for the whole batch: render-2, no render-3.
		tags := r.Tags(t, cfg.Registry+"/"+cfg.Repository+"/"+d)
		if !slices.Contains(tags, "render-2") || slices.Contains(tags, "render-3") {
			t.Errorf("%s's tags after one batch: %v", d, tags)
		}
	}
	recs, err := s.Records(ctx)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records after the batch: %v, %v", recs, err)
	}

	// A later update of the batch cannot take a file an earlier one wrote.
	before := r.Tags(t, cfg.Registry+"/"+cfg.Repository)
	state := resolveRef(t, r, cfg.Registry+"/"+cfg.Repository+":"+ocistore.StateTag)
	_, err = s.ApplyAll(ctx, []statestore.Update{
		upd("promise/p/w4", map[string]string{"d2/new.yaml": "w4\n"}),
		upd("promise/p/w5", map[string]string{"d2/new.yaml": "w5\n"}),
	})
	if err == nil {
		t.Fatal("a batch whose updates write one file: no error")
	}
	if got := resolveRef(t, r, cfg.Registry+"/"+cfg.Repository+":"+ocistore.StateTag); got != state {
		t.Fatalf("a refused batch moved the state from %s to %s", state, got)
	}
	// An unchanged batch pushes nothing, not even a tag.
	if res, err := s.ApplyAll(ctx, batch[:2]); err != nil || res.Updated {
		t.Fatalf("unchanged batch: %+v, %v", res, err)
	}
	if after := r.Tags(t, cfg.Registry+"/"+cfg.Repository); !reflect.DeepEqual(after, before) {
		t.Fatalf("tags moved: %v -> %v", before, after)
	}
}

func resolveRef(t *testing.T, r *testenv.RegistryServer, ref string) string {
	t.Helper()
	return strings.TrimSpace(string(r.RunORAS(t, "resolve", ref)))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
