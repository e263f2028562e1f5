package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const bootstrapPlatformYAML = `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: platform-state}
spec:
  url: git@git.example.com:platform/state.git
  branch: live
  path: /clusters/
  authMethod: ssh
  secretRef: {name: git-ssh, namespace: kratix}
---
apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: public}
spec:
  url: https://git.example.com/platform/public.git
---
apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: minio}
spec:
  endpoint: minio.example.com:9000
  bucketName: kratix
  path: buckets/state
  insecure: true
  region: eu-west-1
  secretRef: {name: minio-read}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: dev-eu, labels: {env: dev}}
spec:
  path: eu/dev
  stateStoreRef: {kind: GitStateStore, name: platform-state}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: edge}
spec:
  stateStoreRef: {kind: GitStateStore, name: public}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: dev}
spec:
  stateStoreRef: {kind: BucketStateStore, name: minio}
---
apiVersion: v1
kind: Secret
metadata: {name: minio-read}
stringData: {accessKeyID: AKIA-NEVER-PRINTED, secretAccessKey: never-printed-secret}
`

type bootstrapResult struct {
	code        int
	out, errOut string
	docs        []map[string]any
}

func bootstrapPlatform(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "platform.yaml"), []byte(bootstrapPlatformYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bootstrapRun runs `render bootstrap ARGS...` through Main.
func bootstrapRun(t *testing.T, args ...string) bootstrapResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), append([]string{"bootstrap"}, args...), IO{Out: &out, Err: &errOut, Getenv: func(string) string { return "" }})
	r := bootstrapResult{code: code, out: out.String(), errOut: errOut.String()}
	if r.code == 0 {
		dec := yaml.NewDecoder(strings.NewReader(r.out))
		for {
			var d map[string]any
			if err := dec.Decode(&d); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("printed YAML does not decode: %v\n%s", err, r.out)
				}
				break
			}
			if d != nil {
				r.docs = append(r.docs, d)
			}
		}
	}
	return r
}

// field walks a dotted path; "[0]" indexes a list.
func field(t *testing.T, doc map[string]any, p string) any {
	t.Helper()
	var cur any = doc
	for _, part := range strings.Split(p, ".") {
		idx := -1
		if i := strings.Index(part, "["); i >= 0 {
			idx = int(part[i+1] - '0')
			part = part[:i]
		}
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: %q is not a mapping in %v", p, part, doc)
		}
		cur, ok = m[part]
		if !ok {
			return nil
		}
		if idx >= 0 {
			l, ok := cur.([]any)
			if !ok || idx >= len(l) {
				t.Fatalf("%s: no item %d", p, idx)
			}
			cur = l[idx]
		}
	}
	return cur
}

func expectFields(t *testing.T, doc map[string]any, want map[string]any) {
	t.Helper()
	for p, w := range want {
		if got := field(t, doc, p); !reflect.DeepEqual(got, w) {
			t.Errorf("%s %s: %s = %#v, want %#v", field(t, doc, "kind"), field(t, doc, "metadata.name"), p, got, w)
		}
	}
}

func TestBootstrapFluxGit(t *testing.T) {
	r := bootstrapRun(t, "flux", "dev-eu", "--platform", bootstrapPlatform(t), "--interval", "30s", "--namespace", "gitops")
	if r.code != 0 || len(r.docs) != 3 {
		t.Fatalf("exit %d, %d documents\n%s\n%s", r.code, len(r.docs), r.out, r.errOut)
	}
	expectFields(t, r.docs[0], map[string]any{
		"apiVersion":         "source.toolkit.fluxcd.io/v1",
		"kind":               "GitRepository",
		"metadata.name":      "platform-state",
		"metadata.namespace": "gitops",
		"spec.interval":      "30s",
		"spec.url":           "ssh://git@git.example.com/platform/state.git", // scp-like, made a URL Flux takes
		"spec.ref.branch":    "live",
		"spec.secretRef":     map[string]any{"name": "git-ssh"},
	})
	expectFields(t, r.docs[1], map[string]any{
		"apiVersion":         "kustomize.toolkit.fluxcd.io/v1",
		"kind":               "Kustomization",
		"metadata.name":      "dev-eu-dependencies",
		"metadata.namespace": "gitops",
		"spec.interval":      "30s",
		"spec.sourceRef":     map[string]any{"kind": "GitRepository", "name": "platform-state"},
		"spec.path":          "./clusters/eu/dev/dependencies",
		"spec.prune":         true,
		"spec.dependsOn":     nil,
	})
	expectFields(t, r.docs[2], map[string]any{
		"kind":           "Kustomization",
		"metadata.name":  "dev-eu-resources",
		"spec.sourceRef": map[string]any{"kind": "GitRepository", "name": "platform-state"},
		"spec.path":      "./clusters/eu/dev/resources",
		"spec.prune":     true,
		"spec.dependsOn": []any{map[string]any{"name": "dev-eu-dependencies"}},
	})
	if !strings.Contains(r.out, "# Create Secret git-ssh in namespace gitops") || !strings.Contains(r.out, "identity and known_hosts") {
		t.Errorf("the secret to create is not explained:\n%s", r.out)
	}

	// No secretRef on the store: none printed. Defaults: flux-system, 1m.
	r = bootstrapRun(t, "flux", "edge", "--platform", bootstrapPlatform(t))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	expectFields(t, r.docs[0], map[string]any{
		"metadata.namespace": "flux-system",
		"spec.interval":      "1m",
		"spec.url":           "https://git.example.com/platform/public.git",
		"spec.ref.branch":    "main",
		"spec.secretRef":     nil,
	})
	expectFields(t, r.docs[1], map[string]any{"spec.path": "./edge/dependencies"})
}

func TestBootstrapFluxBucket(t *testing.T) {
	r := bootstrapRun(t, "flux", "dev", "--platform", bootstrapPlatform(t))
	if r.code != 0 || len(r.docs) != 3 {
		t.Fatalf("exit %d, %d documents\n%s\n%s", r.code, len(r.docs), r.out, r.errOut)
	}
	expectFields(t, r.docs[0], map[string]any{
		"apiVersion":         "source.toolkit.fluxcd.io/v1",
		"kind":               "Bucket",
		"metadata.name":      "minio-dev",
		"metadata.namespace": "flux-system",
		"spec.interval":      "1m",
		"spec.provider":      "generic",
		"spec.bucketName":    "kratix",
		"spec.endpoint":      "minio.example.com:9000",
		"spec.insecure":      true,
		"spec.region":        "eu-west-1",
		"spec.prefix":        "buckets/state/dev/",
		"spec.secretRef":     map[string]any{"name": "minio-read"},
	})
	for i, section := range []string{"dependencies", "resources"} {
		expectFields(t, r.docs[i+1], map[string]any{
			"kind":           "Kustomization",
			"metadata.name":  "dev-" + section,
			"spec.sourceRef": map[string]any{"kind": "Bucket", "name": "minio-dev"},
			// The artifact keeps full object keys: the path includes the prefix.
			"spec.path":  "./buckets/state/dev/" + section,
			"spec.prune": true,
		})
	}
	expectFields(t, r.docs[2], map[string]any{"spec.dependsOn": []any{map[string]any{"name": "dev-dependencies"}}})
	if strings.Contains(r.out, "never-printed") || strings.Contains(r.out, "AKIA") {
		t.Errorf("a credential was printed:\n%s", r.out)
	}
	if !strings.Contains(r.out, "accesskey and secretkey") {
		t.Errorf("the secret's keys are not explained:\n%s", r.out)
	}
}

func TestBootstrapArgoCD(t *testing.T) {
	r := bootstrapRun(t, "argocd", "dev-eu", "--platform", bootstrapPlatform(t))
	if r.code != 0 || len(r.docs) != 2 {
		t.Fatalf("exit %d, %d documents\n%s\n%s", r.code, len(r.docs), r.out, r.errOut)
	}
	for i, section := range []string{"dependencies", "resources"} {
		expectFields(t, r.docs[i], map[string]any{
			"apiVersion":                 "argoproj.io/v1alpha1",
			"kind":                       "Application",
			"metadata.name":              "dev-eu-" + section,
			"metadata.namespace":         "argocd",
			"spec.project":               "default",
			"spec.source.repoURL":        "git@git.example.com:platform/state.git",
			"spec.source.targetRevision": "live",
			"spec.source.path":           "clusters/eu/dev/" + section,
			"spec.source.directory":      map[string]any{"recurse": true},
			"spec.destination.server":    "https://kubernetes.default.svc",
			"spec.syncPolicy.automated":  map[string]any{"prune": true, "selfHeal": true},
			"metadata.annotations":       map[string]any{"argocd.argoproj.io/sync-wave": []string{"0", "1"}[i]},
		})
	}
	if !strings.Contains(r.out, "repository Secret") || !strings.Contains(r.out, "git-ssh") {
		t.Errorf("credentials are not explained:\n%s", r.out)
	}

	r = bootstrapRun(t, "argocd", "edge", "--platform", bootstrapPlatform(t), "--namespace", "gitops", "--project", "platform", "--server", "https://worker.example.com")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	expectFields(t, r.docs[1], map[string]any{
		"metadata.namespace":      "gitops",
		"spec.project":            "platform",
		"spec.destination.server": "https://worker.example.com",
		"spec.source.path":        "edge/resources",
	})
}

func TestBootstrapBadInput(t *testing.T) {
	plat := bootstrapPlatform(t)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown destination", []string{"flux", "nowhere", "--platform", plat}, []string{`"nowhere"`, "known destinations: dev, dev-eu, edge"}},
		{"unknown destination argocd", []string{"argocd", "nowhere", "--platform", plat}, []string{"known destinations: dev, dev-eu, edge"}},
		{"no destination", []string{"flux", "--platform", plat}, []string{"one argument"}},
		{"two destinations", []string{"flux", "dev", "edge", "--platform", plat}, []string{"one argument"}},
		{"no platform", []string{"flux", "dev"}, []string{"--platform"}},
		{"missing platform", []string{"flux", "dev", "--platform", filepath.Join(plat, "nope.yaml")}, []string{"nope.yaml"}},
		{"bucket for argocd", []string{"argocd", "dev", "--platform", plat}, []string{"BucketStateStore/minio", "git repositories and OCI registries only"}},
		{"bad interval", []string{"flux", "dev", "--platform", plat, "--interval", "soon"}, []string{"interval"}},
		{"zero interval", []string{"flux", "dev", "--platform", plat, "--interval", "0s"}, []string{"positive"}},
		{"unknown flag", []string{"flux", "dev", "--platform", plat, "--colour"}, []string{"colour"}},
		// Every value that goes into a manifest is one the worker's API
		// server takes, and one line: a line break would print YAML of
		// its own into the output.
		{"namespace with a space", []string{"flux", "dev", "--platform", plat, "--namespace", "Flux System"}, []string{`--namespace "Flux System": not a valid Kubernetes namespace`}},
		{"namespace with a line break", []string{"flux", "dev", "--platform", plat, "--namespace", "flux-system\nkind: Secret"}, []string{`--namespace "flux-system\nkind: Secret": not a valid Kubernetes namespace`}},
		{"argocd namespace with a line break", []string{"argocd", "edge", "--platform", plat, "--namespace", "argocd\n---"}, []string{`--namespace "argocd\n---"`}},
		{"argocd project with a line break", []string{"argocd", "edge", "--platform", plat, "--project", "default\n  sourceRepos: ['*']"}, []string{`--project "default\n  sourceRepos: ['*']": not a valid AppProject name`}},
		{"argocd namespace too long", []string{"argocd", "edge", "--platform", plat, "--namespace", strings.Repeat("a", 64)}, []string{"--namespace", "no more than 63"}},
		{"argocd server that is no URL", []string{"argocd", "edge", "--platform", plat, "--server", "kubernetes.default.svc"}, []string{`--server "kubernetes.default.svc": not a cluster's URL`}},
		{"argocd sops plugin with a line break", []string{"argocd", "edge", "--platform", plat, "--sops-plugin", "sops\n  directory: {}"}, []string{"--sops-plugin", "a config management plugin's name is one word"}},
		{"argocd server with a line break", []string{"argocd", "edge", "--platform", plat, "--server", "https://k8s\n  namespace: kube-system"}, []string{"--server", "control character"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := bootstrapRun(t, c.args...)
			if r.code != ExitBadInput {
				t.Fatalf("exit %d, want %d (%s)", r.code, ExitBadInput, r.errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(r.errOut, w) {
					t.Errorf("message %q lacks %q", r.errOut, w)
				}
			}
			if r.out != "" {
				t.Errorf("printed on failure: %s", r.out)
			}
		})
	}
}

func TestBootstrapWarnsAboutLocalRepositories(t *testing.T) {
	r := bootstrapRun(t, "flux", "dev-eu", "--platform", "../../fixtures/platform")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.errOut, "warning") || !strings.Contains(r.errOut, "file://.demo/state.git") {
		t.Errorf("no warning about the local file:// store: %q", r.errOut)
	}
	expectFields(t, r.docs[1], map[string]any{"spec.path": "./clusters/dev-eu/dependencies"})
}
