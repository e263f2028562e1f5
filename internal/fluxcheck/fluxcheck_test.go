package fluxcheck

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/renderer"
)

const (
	canaryNS = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\n"
	canaryCM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\ndata:\n  canary: yes\n"
)

func cm(name, ns string) string {
	s := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
	if ns != "" {
		s += "  namespace: " + ns + "\n"
	}
	return s + "data:\n  k: v\n"
}

func dest(extra map[string]string) map[string][]byte {
	m := map[string][]byte{
		"dependencies/kratix-canary-namespace.yaml": []byte(canaryNS),
		"resources/kratix-canary-configmap.yaml":    []byte(canaryCM),
	}
	for p, s := range extra {
		m[p] = []byte(s)
	}
	return m
}

func inputError(t *testing.T, err error) *renderer.InputError {
	t.Helper()
	var ie *renderer.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("want *renderer.InputError, got %T: %v", err, err)
	}
	return ie
}

func names(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Section+" "+o.String()+" <- "+o.File)
	}
	return out
}

func TestCheckDestinationObjects(t *testing.T) {
	objs, err := CheckDestination(dest(map[string]string{
		"dependencies/postgres/install/5058f/operator.yaml": "---\n" + cm("op", "pg") + "---\n# only a comment\n---\n" +
			"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: op\n  namespace: pg\nspec: {}\n",
		"dependencies/postgres/install/5058f/list.yml": "apiVersion: v1\nkind: List\nitems:\n- " +
			strings.ReplaceAll(cm("a", "pg"), "\n", "\n  ") + "\n",
		"dependencies/postgres/install/5058f/.hidden/x.yaml": cm("hidden", "pg"),
		"dependencies/postgres/install/5058f/README.md":      "# not read",
		"dependencies/postgres/install/5058f/data.json":      "{}",
		"dependencies/postgres/install/5058f/upper.YAML":     "not: an object", // Flux compares the extension exactly
		// The same object in the other section is another Kustomization's: fine.
		"resources/team-a/postgres/db/instance/5058f/op.yaml": cm("op", "pg"),
		"flat.yaml": cm("flat", ""),
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := names(objs)
	want := []string{
		"dependencies Namespace kratix-worker-system <- dependencies/kratix-canary-namespace.yaml",
		"dependencies ConfigMap pg/hidden <- dependencies/postgres/install/5058f/.hidden/x.yaml",
		"dependencies ConfigMap pg/a <- dependencies/postgres/install/5058f/list.yml",
		"dependencies ConfigMap pg/op <- dependencies/postgres/install/5058f/operator.yaml",
		"dependencies Deployment.apps pg/op <- dependencies/postgres/install/5058f/operator.yaml",
		"resources ConfigMap kratix-worker-system/kratix-info <- resources/kratix-canary-configmap.yaml",
		"resources ConfigMap pg/op <- resources/team-a/postgres/db/instance/5058f/op.yaml",
		". ConfigMap flat <- flat.yaml",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckDestinationNotAnObject(t *testing.T) {
	const f = "dependencies/p/x/5058f/a.yaml"
	cases := []struct {
		name, doc, where, msg string
	}{
		{"missing apiVersion", cm("ok", "") + "---\nkind: ConfigMap\nmetadata:\n  name: b\n", "document 2", "missing apiVersion"},
		{"missing kind", "apiVersion: v1\nmetadata:\n  name: b\n", "", "missing kind"},
		{"missing name", cm("ok", "") + "---\n" + cm("ok2", "") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n", "document 3", "missing metadata.name"},
		{"missing all", "foo: bar\n", "", "missing apiVersion, kind and metadata.name"},
		{"a list", "- a\n- b\n", "", "not a list"},
		{"a scalar", "just words\n", "", `not the scalar "just words"`},
		{"metadata scalar", "apiVersion: v1\nkind: ConfigMap\nmetadata: x\n", "", "metadata is the scalar"},
		{"list item", "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- kind: ConfigMap\n  metadata: {name: b}\n", "", "ConfigMapList item 2: not a Kubernetes object: missing apiVersion"},
		{"bad separator", cm("a", "") + "--- junk\n" + cm("b", ""), "", "separator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckDestination(dest(map[string]string{f: c.doc}))
			ie := inputError(t, err)
			if ie.File != f || ie.Where != c.where || !strings.Contains(ie.Msg, c.msg) {
				t.Errorf("got File=%q Where=%q Msg=%q; want %q %q ~%q", ie.File, ie.Where, ie.Msg, f, c.where, c.msg)
			}
		})
	}
}

func TestCheckDestinationDuplicates(t *testing.T) {
	cases := []struct {
		name       string
		files      map[string]string
		file, also string
	}{
		{"two files", map[string]string{
			"resources/a/one.yaml": cm("x", "ns"), "resources/b/two.yaml": cm("x", "ns"),
		}, "resources/b/two.yaml", "resources/a/one.yaml"},
		{"default namespace", map[string]string{
			"resources/a/one.yaml": cm("x", ""), "resources/b/two.yaml": cm("x", "default"),
		}, "resources/b/two.yaml", "resources/a/one.yaml"},
		{"cluster scoped ignores namespace", map[string]string{
			"dependencies/a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n",
			"dependencies/b.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n  namespace: whatever\n",
		}, "dependencies/b.yaml", "dependencies/a.yaml"},
		{"versions of one group", map[string]string{
			"resources/a.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: n}\n",
			"resources/b.yaml": "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d, namespace: n}\n",
		}, "resources/b.yaml", "resources/a.yaml"},
		{"the canary", map[string]string{
			"resources/mine.yaml": cm("kratix-info", "kratix-worker-system"),
		}, "resources/mine.yaml", "resources/kratix-canary-configmap.yaml"},
		{"same file", map[string]string{
			"resources/a.yaml": cm("x", "n") + "---\n" + cm("x", "n"),
		}, "resources/a.yaml", "defined twice in this file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckDestination(dest(c.files))
			ie := inputError(t, err)
			if ie.File != c.file || !strings.Contains(ie.Msg, c.also) {
				t.Errorf("got %v; want file %s and mention of %s", ie, c.file, c.also)
			}
		})
	}
	// Different groups are different objects.
	if _, err := CheckDestination(dest(map[string]string{
		"resources/a.yaml": "apiVersion: a.example.com/v1\nkind: Thing\nmetadata: {name: t, namespace: n}\n",
		"resources/b.yaml": "apiVersion: b.example.com/v1\nkind: Thing\nmetadata: {name: t, namespace: n}\n",
	})); err != nil {
		t.Errorf("different groups: %v", err)
	}
}

func TestCheckIgnoredFiles(t *testing.T) {
	files := dest(map[string]string{
		"resources/x/.sops.yaml":          "creation_rules: []\n",
		"resources/x/.github/ci.yaml":     "on: push\n",
		"resources/x/cloudbuild.yaml":     "steps: []\n",
		"resources/x/.gitlab-ci.yml":      "stages: []\n",
		"resources/x/config.yaml":         cm("c", "n"),
		"resources/x/picture.png":         "\x89PNG",
		"resources/x/nested/.flux.yaml":   "x: 1\n",
		"resources/x/nested/deploy.yaml":  cm("d", "n"),
		"resources/x/nested/.hidden.yaml": cm("h", "n"),
	})
	objs, err := check(files, options{})
	if err != nil {
		t.Fatalf("git source: %v", err.inputError(func(s string) string { return s }))
	}
	if len(objs) != 5 { // the canaries, config, deploy and .hidden
		t.Errorf("git source: %d objects, want 5: %v", len(objs), names(objs))
	}
	// A Bucket source keeps those files, and Flux would decode them.
	if _, err := check(files, options{keepIgnored: true}); err == nil || !strings.HasPrefix(err.file, "resources/x/") {
		t.Errorf("bucket source: want an error on an ignored file, got %+v", err)
	}
}

func TestCheckKustomizationFolders(t *testing.T) {
	base := "dependencies/p/install/5058f/"
	good := dest(map[string]string{
		base + "app/kustomization.yaml": "namePrefix: pre-\nnamespace: app\nresources:\n- deploy.yaml\nconfigMapGenerator:\n- name: cfg\n  files: [values.yaml]\n  options: {disableNameSuffixHash: true}\n",
		base + "app/deploy.yaml":        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
		// Not a Kubernetes object, but only the kustomization reads it: fine.
		base + "app/values.yaml":         "replicas: 3\n",
		base + "app/sub/ignored.yaml":    "not: read\n",
		base + "plain.yaml":              cm("plain", "p"),
		base + "other/kustomization.yml": "resources:\n- ../plain-too.yaml\n",
		base + "plain-too.yaml":          cm("plain2", "p"),
	})
	objs, err := CheckDestination(good)
	if err == nil {
		t.Fatalf("plain-too.yaml is both a plain file and a kustomization resource: want a duplicate, got %v", names(objs))
	}
	if ie := inputError(t, err); !strings.Contains(ie.Msg, "plain-too.yaml") && !strings.Contains(ie.File, "plain-too.yaml") {
		t.Errorf("duplicate through a kustomization: %v", ie)
	}
	delete(good, base+"other/kustomization.yml")
	objs, err = CheckDestination(good)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(names(objs), "\n")
	for _, want := range []string{
		"dependencies Deployment.apps app/pre-web <- " + base + "app/kustomization.yaml",
		"dependencies ConfigMap app/pre-cfg <- " + base + "app/kustomization.yaml",
		"dependencies ConfigMap p/plain <- " + base + "plain.yaml",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}

	broken := dest(map[string]string{
		base + "app/kustomization.yaml": "resources:\n- missing.yaml\n",
	})
	_, err = CheckDestination(broken)
	if ie := inputError(t, err); ie.File != base+"app/kustomization.yaml" || !strings.Contains(ie.Msg, "missing.yaml") {
		t.Errorf("broken kustomization: %v", ie)
	}

	helm := dest(map[string]string{
		base + "chart/kustomization.yaml": "helmCharts:\n- name: x\n  repo: https://charts.example.com\n",
	})
	if _, err := CheckDestination(helm); err == nil {
		t.Error("helmCharts: Flux builds without --enable-helm; want an error")
	}

	// A remote base is Flux's to fetch: not built here, and no network.
	remote := dest(map[string]string{
		base + "app/kustomization.yaml": "resources:\n- https://github.com/example/repo//deploy?ref=v1\n- deploy.yaml\n",
		base + "app/deploy.yaml":        cm("d", "n"),
	})
	start := time.Now()
	if _, err := CheckDestination(remote); err != nil {
		t.Errorf("remote base: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("remote base took %v: was something fetched?", d)
	}

	// A kustomization at the section's root is built as it is.
	rooted := map[string][]byte{
		"resources/kustomization.yaml": []byte("resources:\n- a.yaml\n"),
		"resources/a.yaml":             []byte(cm("a", "n")),
		"resources/b.yaml":             []byte("not: listed, so not read\n"),
	}
	objs, err = CheckDestination(rooted)
	if err != nil || len(objs) != 1 || objs[0].Name != "a" {
		t.Errorf("rooted kustomization: %v %v", names(objs), err)
	}
}

func TestCheckRemoteReferences(t *testing.T) {
	for ref, want := range map[string]bool{
		"https://github.com/org/repo//path?ref=v1": true,
		"github.com/org/repo/path":                 true,
		"git@gitlab.com:org/repo.git":              true,
		"git::https://example.com/r.git":           true,
		"ssh://git@example.com/r.git":              true,
		"../base":                                  false,
		"deploy.yaml":                              false,
		"./overlays/dev":                           false,
	} {
		if got := isRemote(ref); got != want {
			t.Errorf("isRemote(%q) = %v, want %v", ref, got, want)
		}
	}
}

// TestFidelity builds a tree without kustomizations both ways: decoding
// files (what CheckDestination does) and krusty on the kustomization Flux
// would generate. They must agree.
func TestCheckFidelityWithGeneratedKustomization(t *testing.T) {
	files := map[string][]byte{}
	var resources []string
	for i := 0; i < 30; i++ {
		p := fmt.Sprintf("resources/ns%d/w/x%d.yaml", i%3, i)
		doc := cm(fmt.Sprintf("c%d", i), fmt.Sprintf("ns%d", i%3))
		if i%5 == 0 {
			doc += "---\napiVersion: v1\nkind: ServiceList\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s" + fmt.Sprint(i) + "}\n"
		}
		files[p] = []byte(doc)
		resources = append(resources, strings.TrimPrefix(p, "resources/"))
	}
	objs, err := CheckDestination(files)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(resources)
	files["resources/kustomization.yaml"] = []byte("resources:\n- " + strings.Join(resources, "\n- ") + "\n")
	built, cerr := newMemTree(files).build("resources")
	if cerr != nil {
		t.Fatal(cerr.msg)
	}
	key := func(objs []Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, identity(o))
		}
		sort.Strings(out)
		return out
	}
	if a, b := key(objs), key(built); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("decoded:\n%v\nkrusty:\n%v", a, b)
	}
}

// TestCheckManyFiles: a destination of 1,000 files, one document each, is
// checked whole (every object found once). How fast is
// BenchmarkCheckDestination1000's to say (`make bench` style, never a
// timed test: on a busy machine any bound here would fail for want of CPU).
func TestCheckManyFiles(t *testing.T) {
	files := dest(nil)
	for i := 0; i < 1000; i++ {
		files[fmt.Sprintf("resources/team-%d/postgres/db-%d/instance/5058f/cm.yaml", i%20, i)] = []byte(cm(fmt.Sprintf("c%d", i), fmt.Sprintf("team-%d", i%20)))
	}
	objs, err := CheckDestination(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1002 {
		t.Fatalf("%d objects", len(objs))
	}
}

func BenchmarkCheckDestination1000(b *testing.B) {
	files := dest(nil)
	for i := 0; i < 1000; i++ {
		files[fmt.Sprintf("resources/team-%d/postgres/db-%d/instance/5058f/cm.yaml", i%20, i)] = []byte(cm(fmt.Sprintf("c%d", i), fmt.Sprintf("team-%d", i%20)))
	}
	for b.Loop() {
		if _, err := CheckDestination(files); err != nil {
			b.Fatal(err)
		}
	}
}
