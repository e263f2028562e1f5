package bootstrap

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

func TestBootstrapGitURLs(t *testing.T) {
	for in, want := range map[string]string{
		"git@github.com:org/state.git":          "ssh://git@github.com/org/state.git",
		"git@git.example.com:/srv/state.git":    "ssh://git@git.example.com/srv/state.git",
		"ssh://git@git.example.com/state.git":   "ssh://git@git.example.com/state.git",
		"https://git.example.com/org/state.git": "https://git.example.com/org/state.git",
		"http://user@gitea:3000/render/state":   "http://user@gitea:3000/render/state",
	} {
		if got, warn := fluxGitURL(in); got != want || warn != "" {
			t.Errorf("fluxGitURL(%q) = %q, %q; want %q", in, got, warn, want)
		}
	}
	for _, local := range []string{"file://.demo/state.git", "/srv/git/state.git"} {
		if _, warn := fluxGitURL(local); warn == "" {
			t.Errorf("%s: no warning", local)
		}
	}
}

func TestBootstrapDurationsAndEndpoints(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 30 * time.Second: "30s", time.Hour: "1h", 90 * time.Minute: "1h30m", 2*time.Minute + 5*time.Second: "2m5s",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
	for _, c := range []struct {
		in       string
		insecure bool
		want     string
		wantIns  bool
	}{
		{"minio:9000", false, "minio:9000", false},
		{"http://minio:9000/", false, "minio:9000", true},
		{"https://s3.example.com", false, "s3.example.com", false},
	} {
		if got, ins := bucketEndpoint(c.in, c.insecure); got != c.want || ins != c.wantIns {
			t.Errorf("bucketEndpoint(%q) = %q %v", c.in, got, ins)
		}
	}
}

// A Bucket's prefix ends with a slash, so destination "dev" does not list
// (and change revision with) "dev-eu".
func TestBootstrapBucketPrefixPerDestination(t *testing.T) {
	p := &inputs.Platform{
		Stores: inputs.StoreMap(&storekind.BucketStateStore{Name: "s3", Endpoint: "s3:9000", BucketName: "b", Path: "clusters"}),
		Destinations: []renderer.Destination{
			{Name: "dev", Path: "dev", Store: renderer.StoreRef{Kind: "BucketStateStore", Name: "s3"}},
			{Name: "dev-eu", Path: "dev-eu", Store: renderer.StoreRef{Kind: "BucketStateStore", Name: "s3"}},
		},
	}
	prefixes := map[string]string{}
	for _, d := range []string{"dev", "dev-eu"} {
		out, err := Flux(p, d, FluxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var bucket struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Prefix    string
				SecretRef any `yaml:"secretRef"`
			}
		}
		if err := yaml.NewDecoder(strings.NewReader(string(out.YAML))).Decode(&bucket); err != nil {
			t.Fatal(err)
		}
		if bucket.Kind != "Bucket" || bucket.Spec.SecretRef != nil {
			t.Errorf("%s: %+v", d, bucket)
		}
		prefixes[d] = bucket.Spec.Prefix
	}
	if prefixes["dev"] != "clusters/dev/" || prefixes["dev-eu"] != "clusters/dev-eu/" {
		t.Errorf("prefixes %v", prefixes)
	}
	if strings.HasPrefix(prefixes["dev-eu"], prefixes["dev"]) {
		t.Errorf("prefix %q also lists %q", prefixes["dev"], prefixes["dev-eu"])
	}
}

func TestBootstrapUnknownDestination(t *testing.T) {
	_, err := Flux(&inputs.Platform{}, "x", FluxOptions{})
	var ie *renderer.InputError
	if !errors.As(err, &ie) || !strings.Contains(ie.Msg, "none are defined") {
		t.Errorf("got %v", err)
	}
}

// Credentials in a store's URL are never copied into what bootstrap
// prints (the platform loader refuses them; a Platform built otherwise
// must not leak them either).
func TestBootstrapNeverPrintsURLCredentials(t *testing.T) {
	const pw = "s3cr@t-pw:with:chars"
	for _, u := range []string{
		"https://render:" + pw + "@git.example.com/org/state.git",
		"https://" + pw + "@git.example.com/org/state.git",
		"ssh://git:" + pw + "@git.example.com/org/state.git",
		"git:" + pw + "@git.example.com:org/state.git",
	} {
		p := &inputs.Platform{
			Stores:       inputs.StoreMap(&storekind.GitStateStore{Name: "g", URL: u, Branch: "main"}),
			Destinations: []renderer.Destination{{Name: "dev", Path: "dev", Store: renderer.StoreRef{Kind: "GitStateStore", Name: "g"}}},
		}
		for name, run := range map[string]func() (*Output, error){
			"flux":   func() (*Output, error) { return Flux(p, "dev", FluxOptions{}) },
			"argocd": func() (*Output, error) { return ArgoCD(p, "dev", ArgoCDOptions{}) },
		} {
			out, err := run()
			if err != nil {
				t.Fatalf("%s %s: %v", name, u, err)
			}
			all := string(out.YAML) + strings.Join(out.Warnings, "\n")
			for _, leak := range []string{pw, "s3cr", "with:chars"} {
				if strings.Contains(all, leak) {
					t.Errorf("%s with url %s printed %q:\n%s", name, u, leak, all)
				}
			}
			if len(out.Warnings) == 0 {
				t.Errorf("%s with url %s: no warning that credentials were left out", name, u)
			}
		}
	}
}

// An aggregatedYAML or none destination has everything at its root
// (aggregated.yaml and Kratix's canaries): Flux reads that folder with one
// Kustomization, and Argo CD with one Application; a nestedByMetadata one
// keeps the two.
func TestBootstrapFlatDestinationsReadTheirRoot(t *testing.T) {
	git := inputs.StoreMap(&storekind.GitStateStore{Name: "g", URL: "https://git.example.com/state.git", Branch: "main", Path: "clusters"})
	ref := renderer.StoreRef{Kind: "GitStateStore", Name: "g"}
	for _, c := range []struct {
		mode  renderer.FilepathMode
		paths []string
	}{
		{renderer.AggregatedYAML, []string{"./clusters/dev"}},
		{renderer.NoNesting, []string{"./clusters/dev"}},
		{renderer.NestedByMetadata, []string{"./clusters/dev/dependencies", "./clusters/dev/resources"}},
	} {
		p := &inputs.Platform{Stores: git, Destinations: []renderer.Destination{{Name: "dev", Path: "dev", Store: ref, Mode: c.mode, Filename: "aggregated.yaml"}}}
		out, err := Flux(p, "dev", FluxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		dec := yaml.NewDecoder(strings.NewReader(string(out.YAML)))
		for {
			var d struct {
				Kind string
				Spec struct{ Path string }
			}
			if dec.Decode(&d) != nil {
				break
			}
			if d.Kind == "Kustomization" {
				paths = append(paths, d.Spec.Path)
			}
		}
		if strings.Join(paths, " ") != strings.Join(c.paths, " ") {
			t.Errorf("%s: Kustomization paths %v, want %v", c.mode, paths, c.paths)
		}
		argo, err := ArgoCD(p, "dev", ArgoCDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(argo.YAML), "kind: Application"); n != len(c.paths) {
			t.Errorf("%s: %d Applications, want %d", c.mode, n, len(c.paths))
		}
	}
}
