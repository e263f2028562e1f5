package ocistore_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testenv"
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
