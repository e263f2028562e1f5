package inputs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

func write(t *testing.T, p, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// inputErr asserts err is an InputError whose message contains every want.
func inputErr(t *testing.T, err error, want ...string) *renderer.InputError {
	t.Helper()
	var ie *renderer.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("want an InputError, got %T %v", err, err)
	}
	for _, w := range want {
		if !strings.Contains(ie.Error(), w) {
			t.Errorf("error lacks %q: %s", w, ie.Error())
		}
	}
	if strings.Contains(ie.Error(), "\n") {
		t.Errorf("error is not one line: %q", ie.Error())
	}
	return ie
}

// kratix starts a platform.kratix.io document.
const kratix = "apiVersion: platform.kratix.io/v1alpha1\n"

const storeDoc = `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: default
spec:
  url: file:///tmp/state.git
`

func destDoc(name, spec string) string {
	return fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n  labels: {env: dev}\nspec:\n  stateStoreRef: {kind: GitStateStore, name: default}\n%s", name, spec)
}

// ---------------------------------------------------------------------------
// Platform.
// ---------------------------------------------------------------------------

func TestLoadPlatformReadsFoldersRecursively(t *testing.T) {
	dir := t.TempDir()
	plat := filepath.Join(dir, "platform")
	write(t, filepath.Join(plat, "stores.yml"), storeDoc)
	deep := write(t, filepath.Join(plat, "clusters", "eu", "dests.yaml"), destDoc("eu-1", "")+"---\n"+destDoc("eu-2", "  path: /eu/two/\n"))
	write(t, filepath.Join(plat, "clusters", "us.YAML"), destDoc("us-1", ""))
	// Not platform configuration: ignored.
	write(t, filepath.Join(plat, "README.md"), "garbage: [\n")
	write(t, filepath.Join(plat, ".git", "config.yaml"), "garbage: [\n")
	write(t, filepath.Join(plat, "extra.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unrelated\n---\n---\n")
	// A second --platform path that is a single file.
	single := write(t, filepath.Join(dir, "one.yaml"), destDoc("solo", "  filepath: {mode: aggregatedYAML}\n"))

	p, err := inputs.LoadPlatform(kinds, []string{plat, single}, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range p.Destinations {
		names = append(names, d.Name)
	}
	if fmt.Sprint(names) != "[eu-1 eu-2 solo us-1]" {
		t.Fatalf("destinations %v", names)
	}
	if got := p.DestinationFile("eu-2"); got != deep {
		t.Errorf("eu-2 comes from %q, want %q", got, deep)
	}
	byName := map[string]renderer.Destination{}
	for _, d := range p.Destinations {
		byName[d.Name] = d
	}
	// Defaults: path = name, mode nestedByMetadata; paths lose their slashes.
	if d := byName["eu-1"]; d.Path != "eu-1" || d.Mode != renderer.NestedByMetadata || d.Store != (renderer.StoreRef{Kind: "GitStateStore", Name: "default"}) || d.Labels["env"] != "dev" {
		t.Errorf("eu-1 defaults: %+v", d)
	}
	if d := byName["eu-2"]; d.Path != "eu/two" {
		t.Errorf("eu-2 path %q", d.Path)
	}
	if d := byName["solo"]; d.Mode != renderer.AggregatedYAML || d.Filename != "aggregated.yaml" {
		t.Errorf("aggregatedYAML defaults: %+v", d)
	}
	gs := inputs.StoresOf[*storekind.GitStateStore](p)["default"]
	if gs == nil || gs.Branch != "main" || gs.URL != "file:///tmp/state.git" || gs.File != filepath.Join(plat, "stores.yml") {
		t.Errorf("store defaults: %+v", gs)
	}
}

// A platform folder that is a link to a folder is read like the folder.
// --platform naming a named pipe or /dev/zero is refused at once: it
// neither waits for a writer nor reads without end.
func TestLoadPlatformReadsOnlyRegularFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "platform.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() {
			_, err := inputs.LoadPlatform(kinds, []string{p}, "")
			done <- err
		}()
		select {
		case err := <-done:
			inputErr(t, err, p, "is not a regular file or a folder")
		case <-time.After(10 * time.Second):
			t.Fatalf("LoadPlatform(%s) still reading after 10s", p)
		}
	}
}

func TestLoadPlatformFollowsALinkedFolder(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "real", "all.yaml"), storeDoc+"---\n"+destDoc("d", ""))
	symlink(t, filepath.Join(dir, "real"), filepath.Join(dir, "link"))
	p, err := inputs.LoadPlatform(kinds, []string{filepath.Join(dir, "link")}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Destinations) != 1 || p.Destinations[0].Name != "d" {
		t.Fatalf("destinations through a linked folder: %+v", p.Destinations)
	}
}

// Kubernetes mounts a ConfigMap as links into a hidden ..data folder.
func TestLoadPlatformReadsAConfigMapMount(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..2024_01_01", "all.yaml"), storeDoc+"---\n"+destDoc("d", ""))
	symlink(t, "..2024_01_01", filepath.Join(dir, "..data"))
	symlink(t, "..data/all.yaml", filepath.Join(dir, "all.yaml"))
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Destinations) != 1 {
		t.Fatalf("want the one destination once, got %+v", p.Destinations)
	}
}

func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "platform", "secrets.yaml"), `apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: kratix
data:
  username: cmVuZGVy
  password: |
    cGFzcw==
  both: ZnJvbS1kYXRh
stringData:
  token: plain-token
  both: from-stringData
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: other
stringData:
  username: other-user
`)
	secrets := filepath.Join(dir, "secrets")
	write(t, filepath.Join(secrets, "mounted", "username"), "m-user")
	write(t, filepath.Join(secrets, "mounted", "password"), "m-pass\n")
	write(t, filepath.Join(secrets, "mounted", ".hidden"), "x")
	write(t, filepath.Join(secrets, "not-a-secret.txt"), "x")
	// A Kubernetes secret volume: keys are links into ..data.
	write(t, filepath.Join(secrets, "k8s", "..2024", "sshPrivateKey"), "KEY")
	symlink(t, "..2024", filepath.Join(secrets, "k8s", "..data"))
	symlink(t, "..data/sshPrivateKey", filepath.Join(secrets, "k8s", "sshPrivateKey"))

	p, err := inputs.LoadPlatform(kinds, []string{filepath.Join(dir, "platform")}, secrets)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ref inputs.SecretRef) map[string][]byte {
		t.Helper()
		s, ok := p.Secret(&ref)
		if !ok {
			t.Fatalf("secret %+v not found", ref)
		}
		return s
	}
	s := get(inputs.SecretRef{Name: "creds", Namespace: "kratix"})
	if string(s["username"]) != "render" || string(s["password"]) != "pass" || string(s["token"]) != "plain-token" || string(s["both"]) != "from-stringData" {
		t.Errorf("creds in kratix: %q", s)
	}
	if s := get(inputs.SecretRef{Name: "creds", Namespace: "other"}); string(s["username"]) != "other-user" {
		t.Errorf("creds in other: %q", s)
	}
	m := get(inputs.SecretRef{Name: "mounted"})
	if string(m["username"]) != "m-user" || string(m["password"]) != "m-pass\n" || len(m) != 2 {
		t.Errorf("mounted secret: %q", m)
	}
	if k := get(inputs.SecretRef{Name: "k8s", Namespace: "kratix"}); string(k["sshPrivateKey"]) != "KEY" || len(k) != 1 {
		t.Errorf("k8s-mounted secret: %q", k)
	}
	if _, ok := p.Secret(&inputs.SecretRef{Name: "absent"}); ok {
		t.Error("an absent secret was found")
	}
	if _, ok := p.Secret(nil); ok {
		t.Error("a nil ref found a secret")
	}
}

func TestSecretWithBadBase64NeverEchoesTheValue(t *testing.T) {
	dir := t.TempDir()
	f := write(t, filepath.Join(dir, "s.yaml"), "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n  password: \"hunter2!!\"\n")
	_, err := inputs.LoadPlatform(kinds, []string{f}, "")
	ie := inputErr(t, err, f, "Secret creds", "data.password is not valid base64")
	if strings.Contains(ie.Error(), "hunter2") {
		t.Errorf("the value was echoed: %s", ie)
	}
}

func TestPlatformErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"no documents of ours is fine but a missing store is not", map[string]string{"a.yaml": destDoc("d", "")},
			[]string{"a.yaml: Destination d: spec.stateStoreRef names GitStateStore default, which is not defined"}},
		{"duplicate destination", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", ""), "b.yaml": destDoc("d", "")},
			[]string{"b.yaml: document 1 (Destination d): Destination d is defined twice (also in ", "a.yaml)"}},
		{"missing name", map[string]string{"a.yaml": kratix + "kind: Destination\nmetadata: {}\n"},
			[]string{"a.yaml: document 1: metadata.name is missing"}},
		{"unknown mode", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  filepath: {mode: flat}\n")},
			[]string{"a.yaml: document 2 (Destination d): spec.filepath.mode \"flat\" is unknown"}},
		{"bad aggregate filename", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  filepath: {mode: aggregatedYAML, filename: a/b.yaml}\n")},
			[]string{"spec.filepath.filename \"a/b.yaml\" must be a plain file name"}},
		{"reserved path", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  path: .render/x\n")},
			[]string{"spec.path \".render/x\" is reserved"}},
		{"same path", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d1", "  path: x\n") + "---\n" + destDoc("d2", "  path: x/\n")},
			[]string{"a.yaml: Destination d2: spec.path \"x\" is also used by Destination d1"}},
		{"overlapping paths", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d1", "  path: x\n") + "---\n" + destDoc("d2", "  path: x/y\n")},
			[]string{"overlaps the path", "one worker could apply, or prune, another's workloads"}},
		{"root path /", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  path: /\n")},
			[]string{"spec.path \"/\": a destination at the store's root is refused", "move the store's spec.path into it"}},
		{"root path .", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  path: .\n")},
			[]string{"spec.path \".\": a destination at the store's root is refused"}},
		{"unknown store kind", map[string]string{"a.yaml": kratix + "kind: Destination\nmetadata: {name: d}\nspec:\n  stateStoreRef: {kind: Bucket, name: b}\n"},
			[]string{"spec.stateStoreRef.kind \"Bucket\" is not GitStateStore, BucketStateStore or OCIStateStore"}},
		{"store without url", map[string]string{"a.yaml": kratix + "kind: GitStateStore\nmetadata: {name: s}\nspec: {branch: main}\n"},
			[]string{"a.yaml: document 1 (GitStateStore s): spec.url is missing"}},
		{"unknown auth", map[string]string{"a.yaml": kratix + "kind: GitStateStore\nmetadata: {name: s}\nspec: {url: https://x, authMethod: token}\n"},
			[]string{"spec.authMethod \"token\" is unknown"}},
		{"wrong shape spec", map[string]string{"a.yaml": storeDoc + "---\n" + destDoc("d", "  strictMatchLabels: maybe\n  path: [a]\n")},
			[]string{"a.yaml: document 2 (Destination d): line 15: spec.strictMatchLabels is a string: want true or false"}},
		{"invalid YAML", map[string]string{"a.yaml": storeDoc + "---\nkind: [\n"},
			[]string{"a.yaml: document 2: invalid YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, c := range tc.files {
				write(t, filepath.Join(dir, name), c)
			}
			_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
			inputErr(t, err, tc.want...)
		})
	}
	t.Run("no paths", func(t *testing.T) {
		_, err := inputs.LoadPlatform(kinds, nil, "")
		inputErr(t, err, "--platform")
	})
	t.Run("missing path", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, err := inputs.LoadPlatform(kinds, []string{missing}, "")
		inputErr(t, err, missing)
	})
	t.Run("missing secrets folder", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "p.yaml"), storeDoc)
		_, err := inputs.LoadPlatform(kinds, []string{dir}, filepath.Join(dir, "nope"))
		inputErr(t, err, filepath.Join(dir, "nope"), "secrets folder")
	})
}

func TestPromiseSelectors(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "p.yaml"), "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: pg\nspec:\n  destinationSelectors:\n  - matchLabels: {env: dev}\n  - matchLabels: {zone: eu}\n")
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	pr := p.Promises["pg"]
	if pr == nil || len(pr.DestinationSelectors) != 2 || pr.DestinationSelectors[0].MatchLabels["env"] != "dev" || pr.DestinationSelectors[1].MatchLabels["zone"] != "eu" {
		t.Fatalf("promise: %+v", pr)
	}
}

// A GitStateStore written for Kratix with a secretRef and no authMethod
// sends its credentials: Kratix's CRD defaults authMethod to basicAuth.
// Without a secretRef nothing is sent (a public or local repository).
func TestGitAuthMethodDefaultsAsKratix(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "s.yaml"), kratix+"kind: GitStateStore\nmetadata: {name: withsecret}\nspec: {url: https://git.example/x.git, secretRef: {name: creds}}\n---\n"+
		kratix+"kind: GitStateStore\nmetadata: {name: public}\nspec: {url: https://git.example/y.git}\n---\n"+
		kratix+"kind: GitStateStore\nmetadata: {name: keys}\nspec: {url: ssh://git@git.example/z.git, authMethod: ssh, secretRef: {name: creds}}\n")
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"withsecret": "basicAuth", "public": "", "keys": "ssh"} {
		if got := inputs.StoresOf[*storekind.GitStateStore](p)[name].AuthMethod; got != want {
			t.Errorf("%s: authMethod %q, want %q", name, got, want)
		}
	}
}

// ---------------------------------------------------------------------------
// Identity.
// ---------------------------------------------------------------------------

func TestIdentityPrecedence(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	full := map[string]string{
		"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_WORKFLOW_ACTION": "configure", "KRATIX_PROMISE_NAME": "env-promise",
		"KRATIX_PIPELINE_NAME": "env-pipe", "KRATIX_OBJECT_NAME": "env-name", "KRATIX_OBJECT_NAMESPACE": "env-ns",
	}
	obj := &inputs.Object{Name: "obj-name", Namespace: "obj-ns"}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		obj   *inputs.Object
		want  renderer.Workflow
	}{
		{"variables", full, nil, obj,
			renderer.Workflow{Type: "resource", Action: "configure", Promise: "env-promise", Pipeline: "env-pipe", Name: "env-name", Namespace: "env-ns"}},
		{"flags over variables", full, map[string]string{"workflow-type": "promise", "action": "delete", "promise": "f-promise", "pipeline": "f-pipe", "name": "f-name", "namespace": "f-ns"}, obj,
			renderer.Workflow{Type: "promise", Action: "delete", Promise: "f-promise", Pipeline: "f-pipe", Name: "f-name", Namespace: "f-ns"}},
		{"object.yaml when the variables are absent", map[string]string{"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_PROMISE_NAME": "p", "KRATIX_PIPELINE_NAME": "x"}, nil, obj,
			renderer.Workflow{Type: "resource", Action: "configure", Promise: "p", Pipeline: "x", Name: "obj-name", Namespace: "obj-ns"}},
		{"flag name, object namespace", map[string]string{"KRATIX_WORKFLOW_TYPE": "resource"}, map[string]string{"name": "f-name"}, obj,
			renderer.Workflow{Type: "resource", Action: "configure", Name: "f-name", Namespace: "obj-ns"}},
		{"a cluster-scoped resource is in Kratix's namespace", map[string]string{"KRATIX_WORKFLOW_TYPE": "resource"}, nil, &inputs.Object{Name: "n"},
			renderer.Workflow{Type: "resource", Action: "configure", Name: "n", Namespace: "kratix-platform-system"}},
		{"no object, no fallback", map[string]string{"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_OBJECT_NAME": "n"}, nil, nil,
			renderer.Workflow{Type: "resource", Action: "configure", Name: "n"}},
		{"promise workflow: the object names the promise", map[string]string{"KRATIX_WORKFLOW_TYPE": "promise", "KRATIX_PIPELINE_NAME": "x"}, nil, &inputs.Object{Name: "pg", Namespace: "ignored"},
			renderer.Workflow{Type: "promise", Action: "configure", Promise: "pg", Pipeline: "x"}},
		{"promise workflow: the variable wins over the object", map[string]string{"KRATIX_WORKFLOW_TYPE": "promise", "KRATIX_PROMISE_NAME": "named"}, nil, &inputs.Object{Name: "pg"},
			renderer.Workflow{Type: "promise", Action: "configure", Promise: "named"}},
		{"action from the variable", map[string]string{"KRATIX_WORKFLOW_TYPE": "promise", "KRATIX_WORKFLOW_ACTION": "delete"}, nil, nil,
			renderer.Workflow{Type: "promise", Action: "delete"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inputs.Identity(env(tc.env), tc.flags, tc.obj)
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLoadObject(t *testing.T) {
	dir := t.TempDir()
	if o, err := inputs.LoadObject(dir); o != nil || err != nil {
		t.Fatalf("missing object.yaml: %+v %v", o, err)
	}
	f := write(t, filepath.Join(dir, "object.yaml"), "apiVersion: x/v1\nkind: P\nmetadata:\n  name: db\n  namespace: team\n  labels: {flavour: gold}\nspec: {size: 1}\n")
	o, err := inputs.LoadObject(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o.File != f || o.Name != "db" || o.Namespace != "team" || o.Labels["flavour"] != "gold" {
		t.Errorf("object: %+v", o)
	}
	write(t, f, "metadata:\n  labels: [a]\n  name: [b]\n")
	_, err = inputs.LoadObject(dir)
	inputErr(t, err, f, "invalid YAML: line ")
}

// ---------------------------------------------------------------------------
// Selectors.
// ---------------------------------------------------------------------------

func TestLoadSelectors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "destination-selectors.yaml")
	if e, f, err := inputs.LoadSelectors(dir); e != nil || err != nil || f != file {
		t.Fatalf("missing file: %v %q %v", e, f, err)
	}
	write(t, file, "  \n")
	if e, _, err := inputs.LoadSelectors(dir); e != nil || err != nil {
		t.Fatalf("empty file: %v %v", e, err)
	}
	write(t, file, "- directory: platform\n  matchLabels: {role: platform}\n- matchLabels:\n    env: dev\n")
	e, _, err := inputs.LoadSelectors(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(e) != 2 || e[0].Directory != "platform" || e[0].MatchLabels["role"] != "platform" || e[1].Directory != "" || e[1].MatchLabels["env"] != "dev" {
		t.Fatalf("entries %+v", e)
	}
	for _, bad := range []struct{ content, want string }{
		{"- directory: x\n  matchLabel: {a: b}\n", "entry 1: line 2: unknown field matchLabel (did you mean matchLabels?)"},
		{"- matchLabels: {a: b}\n---\n- matchLabels: {c: d}\n", "expected one document"},
		{"matchLabels: {a: b}\n", "want a list"},
		{"- matchLabels: {a: [b\n", "invalid YAML"},
	} {
		write(t, file, bad.content)
		_, _, err := inputs.LoadSelectors(dir)
		inputErr(t, err, file+": ", bad.want)
	}
}

// ---------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------

func paths(o *inputs.Output) []string {
	var out []string
	for _, f := range o.Files {
		out = append(out, f.Path)
	}
	return out
}

func TestScanOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "output")
	write(t, filepath.Join(out, "root.yaml"), "kind: A\n---\nkind: B\n")
	write(t, filepath.Join(out, "platform", "deep", "er", "crd.yml"), "kind: CRD\n")
	write(t, filepath.Join(out, "notes.txt"), "not: yaml: [at all\x00")
	write(t, filepath.Join(out, "shared", "real.yaml"), "kind: Real\n")
	symlink(t, "../shared/real.yaml", filepath.Join(out, "linked", "rel.yaml"))
	symlink(t, filepath.Join(out, "root.yaml"), filepath.Join(out, "abs.yaml"))
	if err := os.MkdirAll(filepath.Join(out, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, "platform", "empty-nested"), 0o755); err != nil {
		t.Fatal(err)
	}

	o, err := inputs.ScanOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "[abs.yaml linked/rel.yaml notes.txt platform/deep/er/crd.yml root.yaml shared/real.yaml]"
	if got := fmt.Sprint(paths(o)); got != want {
		t.Errorf("files %s, want %s", got, want)
	}
	if fmt.Sprint(o.Dirs) != "[empty linked platform shared]" {
		t.Errorf("top-level folders %v", o.Dirs)
	}
	data := map[string]string{}
	for _, f := range o.Files {
		data[f.Path] = string(f.Data)
	}
	if data["linked/rel.yaml"] != "kind: Real\n" || data["abs.yaml"] != "kind: A\n---\nkind: B\n" || data["notes.txt"] != "not: yaml: [at all\x00" {
		t.Errorf("contents %q", data)
	}

	// The output folder may itself be reached through a link.
	symlink(t, out, filepath.Join(dir, "output-link"))
	o2, err := inputs.ScanOutput(filepath.Join(dir, "output-link"))
	if err != nil {
		t.Fatalf("output through a link: %v", err)
	}
	if fmt.Sprint(paths(o2)) != want || fmt.Sprint(o2.Dirs) != fmt.Sprint(o.Dirs) {
		t.Errorf("output through a link: %v %v", paths(o2), o2.Dirs)
	}
}

func TestScanOutputRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, out string) (file string)
		want  string
	}{
		{"link outside", func(t *testing.T, dir, out string) string {
			write(t, filepath.Join(dir, "secret.yaml"), "kind: Secret\n")
			symlink(t, filepath.Join(dir, "secret.yaml"), filepath.Join(out, "a", "leak.yaml"))
			return filepath.Join(out, "a", "leak.yaml")
		}, "link leads outside the output folder"},
		{"relative link climbing out", func(t *testing.T, dir, out string) string {
			write(t, filepath.Join(dir, "secret.txt"), "x")
			symlink(t, "../secret.txt", filepath.Join(out, "leak.txt"))
			return filepath.Join(out, "leak.txt")
		}, "link leads outside the output folder"},
		{"link to a sibling with the same prefix", func(t *testing.T, dir, out string) string {
			write(t, out+"-other/x.yaml", "kind: X\n")
			symlink(t, out+"-other/x.yaml", filepath.Join(out, "x.yaml"))
			return filepath.Join(out, "x.yaml")
		}, "link leads outside the output folder"},
		{"link to a folder", func(t *testing.T, dir, out string) string {
			write(t, filepath.Join(out, "real", "x.yaml"), "kind: X\n")
			symlink(t, "real", filepath.Join(out, "alias"))
			return filepath.Join(out, "alias")
		}, "links to folders are not followed"},
		{"broken link", func(t *testing.T, dir, out string) string {
			symlink(t, "nowhere.yaml", filepath.Join(out, "broken.yaml"))
			return filepath.Join(out, "broken.yaml")
		}, "broken link"},
		{"invalid yaml", func(t *testing.T, dir, out string) string {
			return write(t, filepath.Join(out, "a", "b.yaml"), "kind: A\n---\nkind: [\n")
		}, "document 2: invalid YAML"},
		{"invalid yml", func(t *testing.T, dir, out string) string {
			return write(t, filepath.Join(out, "b.yml"), "a: b: c\n")
		}, "document 1: invalid YAML"},
		{"invalid YAML upper case", func(t *testing.T, dir, out string) string {
			return write(t, filepath.Join(out, "B.YAML"), "{unclosed\n")
		}, "invalid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "output")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			file := tc.setup(t, dir, out)
			_, err := inputs.ScanOutput(out)
			ie := inputErr(t, err, tc.want)
			if ie.File != file {
				t.Errorf("error names %q, want %q", ie.File, file)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, err := inputs.ScanOutput(missing)
		inputErr(t, err, missing, "cannot read the output folder")
	})
	t.Run("a file", func(t *testing.T) {
		f := write(t, filepath.Join(t.TempDir(), "f.yaml"), "a: b\n")
		_, err := inputs.ScanOutput(f)
		inputErr(t, err, f, "not a folder")
	})
}
