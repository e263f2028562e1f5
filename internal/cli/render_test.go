package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/render-dev/render/internal/cli"
	"github.com/render-dev/render/internal/testinfra/testenv"
)

// ---------------------------------------------------------------------------
// Harness: a platform in a temp folder, a local bare repository, workflows.
// ---------------------------------------------------------------------------

// world is one test's platform, state store and workflow folders.
type world struct {
	t        *testing.T
	root     string
	repo     string // <root>/state.git, the store "default"
	platform string // folder of platform YAML files
}

func newWorld(t *testing.T) *world {
	t.Helper()
	root := t.TempDir()
	w := &world{t: t, root: root, repo: filepath.Join(root, "state.git"), platform: filepath.Join(root, "platform")}
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo))
	return w
}

func gitStore(name, url string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: %s
spec:
  url: %s
  branch: main
  path: clusters
`, name, url)
}

// dest is a Destination document in store "default" unless store is set.
func dest(name string, labels map[string]string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n", name)
	if len(labels) > 0 {
		b.WriteString("  labels:\n")
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %s\n", k, labels[k])
		}
	}
	store := "default"
	b.WriteString("spec:\n")
	for _, e := range extra {
		if s, ok := strings.CutPrefix(e, "store="); ok {
			store = s
			continue
		}
		b.WriteString("  " + strings.ReplaceAll(e, "\n", "\n  ") + "\n")
	}
	fmt.Fprintf(&b, "  stateStoreRef:\n    kind: GitStateStore\n    name: %s\n", store)
	return b.String()
}

func docs(d ...string) string { return strings.Join(d, "---\n") }

// file writes root-relative path.
func (w *world) file(rel, content string) string {
	w.t.Helper()
	p := filepath.Join(w.root, rel)
	writeFile(w.t, p, content)
	return p
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// workflow is one workflow's output, metadata and input folders.
type workflow struct {
	w                       *world
	name                    string
	output, metadata, input string
}

func (w *world) workflow(name string) *workflow {
	base := filepath.Join(w.root, "wf", name)
	wf := &workflow{w: w, name: name, output: filepath.Join(base, "output"), metadata: filepath.Join(base, "metadata"), input: filepath.Join(base, "input")}
	for _, d := range []string{wf.output, wf.metadata, wf.input} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
	return wf
}

// setOutput replaces the output folder's content.
func (wf *workflow) setOutput(files map[string]string) *workflow {
	wf.w.t.Helper()
	if err := os.RemoveAll(wf.output); err != nil {
		wf.w.t.Fatal(err)
	}
	if err := os.MkdirAll(wf.output, 0o755); err != nil {
		wf.w.t.Fatal(err)
	}
	for p, c := range files {
		writeFile(wf.w.t, filepath.Join(wf.output, p), c)
	}
	return wf
}

// setSelectors writes destination-selectors.yaml ("" removes it).
func (wf *workflow) setSelectors(y string) *workflow {
	wf.w.t.Helper()
	p := filepath.Join(wf.metadata, "destination-selectors.yaml")
	if y == "" {
		os.Remove(p)
		return wf
	}
	writeFile(wf.w.t, p, y)
	return wf
}

func (wf *workflow) setObject(y string) *workflow {
	writeFile(wf.w.t, filepath.Join(wf.input, "object.yaml"), y)
	return wf
}

func (wf *workflow) args(extra ...string) []string {
	return append([]string{"--platform", wf.w.platform, "--output", wf.output, "--metadata", wf.metadata, "--input", wf.input}, extra...)
}

type result struct {
	code        int
	out, errout string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.out, r.errout)
}

// run calls cli.Main with buffers and a map-backed environment.
func run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, cli.IO{Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] }})
	return result{code: code, out: out.String(), errout: errb.String()}
}

func (wf *workflow) run(env map[string]string, extra ...string) result {
	wf.w.t.Helper()
	return run(wf.w.t, env, wf.args(extra...)...)
}

// mustRun runs and fails the test unless the exit code is want.
func (wf *workflow) mustRun(want int, env map[string]string, extra ...string) result {
	wf.w.t.Helper()
	r := wf.run(env, extra...)
	if r.code != want {
		wf.w.t.Fatalf("want exit %d, got %s", want, r)
	}
	return r
}

func resourceEnv(promise, ns, name, pipeline string) map[string]string {
	return map[string]string{
		"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_PROMISE_NAME": promise,
		"KRATIX_OBJECT_NAMESPACE": ns, "KRATIX_OBJECT_NAME": name, "KRATIX_PIPELINE_NAME": pipeline,
	}
}

func promiseEnv(promise, pipeline string) map[string]string {
	return map[string]string{"KRATIX_WORKFLOW_TYPE": "promise", "KRATIX_PROMISE_NAME": promise, "KRATIX_PIPELINE_NAME": pipeline}
}

func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// --- reading the repository back ----------------------------------------

// branchTip is refs/heads/main's commit, "" when the repository or the
// branch does not exist.
func branchTip(t *testing.T, repo string) string {
	t.Helper()
	r, err := git.PlainOpen(repo)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return ""
	}
	if err != nil {
		t.Fatalf("open %s: %v", repo, err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return ref.Hash().String()
}

// repoTree is every file on main, path -> content.
func repoTree(t *testing.T, repo string) map[string]string {
	t.Helper()
	return testenv.BranchFiles(t, repo)
}

func commitCount(t *testing.T, repo string) int {
	t.Helper()
	r, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Log(&git.LogOptions{From: ref.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := it.ForEach(func(*object.Commit) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func underPrefix(tree map[string]string, prefix string) []string {
	var out []string
	for p := range tree {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reportGroup mirrors a group of the JSON report.
type reportGroup struct {
	Directory    string   `json:"directory"`
	ID           string   `json:"id"`
	Files        []string `json:"files"`
	Selector     string   `json:"selector"`
	Destinations []string `json:"destinations"`
	Unscheduled  bool     `json:"unscheduled"`
	Kept         bool     `json:"kept"`
	Misscheduled []string `json:"misscheduled"`
	KeptFrom     string   `json:"keptFrom"`
	Verdicts     []struct {
		Destination  string   `json:"destination"`
		Filtered     string   `json:"filtered"`
		Reasons      []string `json:"reasons"`
		Score        int      `json:"score"`
		Chosen       bool     `json:"chosen"`
		Misscheduled bool     `json:"misscheduled"`
		TiedWith     []string `json:"tiedWith"`
	} `json:"verdicts"`
}

// report mirrors the JSON report (-o json).
type report struct {
	Workflow struct {
		Type, Action, Promise, Pipeline, Name, Namespace string
	} `json:"workflow"`
	DryRun bool          `json:"dryRun"`
	Groups []reportGroup `json:"groups"`
	Static []reportGroup `json:"static"`
	Stores []struct {
		Store        string `json:"store"`
		Description  string `json:"description"`
		Updated      bool   `json:"updated"`
		Revision     string `json:"revision"`
		Attempts     int    `json:"attempts"`
		Error        string `json:"error"`
		Destinations []struct {
			Destination string   `json:"destination"`
			Path        string   `json:"path"`
			Added       []string `json:"added"`
			Changed     []string `json:"changed"`
			Deleted     []string `json:"deleted"`
		} `json:"destinations"`
	} `json:"stores"`
	Warnings []string `json:"warnings"`
}

func decodeReport(t *testing.T, r result) report {
	t.Helper()
	var rep report
	dec := json.NewDecoder(strings.NewReader(r.out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, r)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout has more than one JSON document:\n%s", r.out)
	}
	return rep
}

// groupDest is the single destination of the JSON report's group dir.
func groupDests(t *testing.T, rep report, dir string) []string {
	t.Helper()
	for _, g := range rep.Groups {
		if g.Directory == dir {
			return g.Destinations
		}
	}
	t.Fatalf("no group %q in report %+v", dir, rep.Groups)
	return nil
}

// ---------------------------------------------------------------------------
// 1. Validation before any write.
// ---------------------------------------------------------------------------

const twoDests = `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-eu
  labels: {env: dev, zone: eu}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-us
  labels: {env: dev, zone: us}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
`

// badCase sets up a world whose render must be refused.
type badCase struct {
	name string
	// setup prepares the world and returns the workflow, its environment,
	// extra flags, and the substrings stderr must contain.
	setup func(w *world, wf *workflow) (env map[string]string, extra []string, want []string)
}

func validWorkflow(wf *workflow) map[string]string {
	wf.setOutput(map[string]string{"db.yaml": obj("ConfigMap"), "backup/job.yaml": obj("Job")})
	wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu}\n")
	return resourceEnv("postgres", "team-a", "orders", "configure")
}

func TestValidationRefusesBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	cases := []badCase{
		{"selectors invalid YAML", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu\n")
			return env, nil, []string{filepath.Join(wf.metadata, "destination-selectors.yaml") + ": ", "invalid YAML"}
		}},
		{"selectors unknown field", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabel: {zone: eu}\n")
			return env, nil, []string{filepath.Join(wf.metadata, "destination-selectors.yaml") + ": ", "matchLabel"}
		}},
		{"selectors of the wrong shape", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: [zone, eu]\n- directory: [x]\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{filepath.Join(wf.metadata, "destination-selectors.yaml") + ": entry 1: line 2: matchLabels is a list: want a mapping"}
		}},
		{"destination spec of the wrong shape", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", dest("odd", nil, "strictMatchLabels: maybe", "filepath: [x]"))
			return env, nil, []string{p + ": document 1 (Destination odd): line 6: spec.strictMatchLabels is a string: want true or false"}
		}},
		{"platform document of the wrong shape", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: [x]\n  labels: [y]\n")
			return env, nil, []string{p + ": document 1: invalid YAML: line "}
		}},
		{"object.yaml of the wrong shape", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setObject("metadata:\n  name: [x]\n  labels: [y]\n")
			return env, nil, []string{filepath.Join(wf.input, "object.yaml") + ": invalid YAML: line "}
		}},
		{"output yaml invalid", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			writeFile(w.t, filepath.Join(wf.output, "backup", "broken.yaml"), "kind: Job\n---\nmetadata: [unclosed\n")
			return env, nil, []string{filepath.Join(wf.output, "backup", "broken.yaml") + ": document 2: invalid YAML"}
		}},
		{"output yml invalid", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			writeFile(w.t, filepath.Join(wf.output, "svc.yml"), "a: b: c\n")
			return env, nil, []string{filepath.Join(wf.output, "svc.yml") + ": document 1: invalid YAML"}
		}},
		{"nested directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			writeFile(w.t, filepath.Join(wf.output, "a", "b", "x.yaml"), obj("X"))
			wf.setSelectors("- directory: a/b\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"a/b\"): nested directories are not supported"}
		}},
		{"duplicate directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu}\n- directory: backup\n  matchLabels: {zone: us}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 2 (directory \"backup\"): directory is listed twice"}
		}},
		{"missing directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu}\n- directory: nowhere\n  matchLabels: {zone: us}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 2 (directory \"nowhere\"): directory \"nowhere\" does not exist in the output"}
		}},
		{"dot-dot directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: ..\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"..\"): directory must be a top-level folder"}
		}},
		{"escaping directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: ../metadata\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"../metadata\"): directory must be a top-level folder"}
		}},
		{"absolute directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: /backup\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"/backup\"): directory must be a top-level folder"}
		}},
		{"climbing back directory", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup/../backup\n  matchLabels: {zone: eu}\n")
			return env, nil, []string{"entry 1 (directory \"backup/../backup\"): directory must be a top-level folder"}
		}},
		{"empty matchLabels", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: {}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"backup\"): matchLabels is empty"}
		}},
		{"empty root matchLabels", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- matchLabels: {}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1: matchLabels is empty"}
		}},
		{"invalid label selector key", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setSelectors("- directory: backup\n  matchLabels: {\"-bad key\": eu}\n")
			return env, nil, []string{"destination-selectors.yaml: entry 1 (directory \"backup\"): invalid selector", "-bad key"}
		}},
		{"invalid Promise selector key", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/promise.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: postgres\nspec:\n  destinationSelectors:\n  - matchLabels: {\"bad key\": x}\n")
			return env, nil, []string{p + ": document 1 (Promise postgres): spec.destinationSelectors[0]: invalid selector"}
		}},
		{"symlink out of the output", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			secret := w.file("elsewhere/secret.yaml", obj("Secret"))
			link := filepath.Join(wf.output, "backup", "leak.yaml")
			if err := os.Symlink(secret, link); err != nil {
				w.t.Fatal(err)
			}
			return env, nil, []string{link + ": link leads outside the output folder"}
		}},
		{"relative symlink out of the output", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			w.file("wf/"+wf.name+"/metadata/other.yaml", obj("X"))
			link := filepath.Join(wf.output, "leak.yaml")
			if err := os.Symlink("../metadata/other.yaml", link); err != nil {
				w.t.Fatal(err)
			}
			return env, nil, []string{link + ": link leads outside the output folder"}
		}},
		{"destination with unknown store", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", dest("lost", map[string]string{"zone": "eu"}, "store=nope"))
			return env, nil, []string{p + ": Destination lost: spec.stateStoreRef names GitStateStore nope, which is not defined"}
		}},
		{"unknown filepath mode", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", docs(dest("ok", nil), dest("odd", nil, "filepath: {mode: flat}")))
			return env, nil, []string{p + ": document 2 (Destination odd): spec.filepath.mode \"flat\" is unknown"}
		}},
		{"two destinations with one path", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", docs(dest("a", nil, "path: shared/x"), dest("b", nil, "path: /shared/x/")))
			return env, nil, []string{p + ": Destination b: spec.path \"shared/x\" is also used by Destination a in the same state store"}
		}},
		{"destination path climbing out", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", dest("a", nil, "path: ../outside"))
			return env, nil, []string{p + ": document 1 (Destination a): spec.path"}
		}},
		{"platform invalid YAML", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", dest("a", nil)+"---\nkind: Destination\nmetadata: {name: [b\n")
			return env, nil, []string{p + ": document 2: invalid YAML"}
		}},
		{"missing workflow type", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_WORKFLOW_TYPE", ""), nil, []string{"workflow identity: workflow type: missing", "KRATIX_WORKFLOW_TYPE"}
		}},
		{"unknown workflow type", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_WORKFLOW_TYPE", "job"), nil, []string{"workflow identity: workflow type: \"job\" is neither promise nor resource"}
		}},
		{"missing promise", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_PROMISE_NAME", ""), nil, []string{"workflow identity: promise: missing", "KRATIX_PROMISE_NAME"}
		}},
		{"missing promise of a promise workflow without object.yaml", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			validWorkflow(wf)
			return map[string]string{"KRATIX_WORKFLOW_TYPE": "promise", "KRATIX_PIPELINE_NAME": "p"}, nil, []string{"workflow identity: promise: missing"}
		}},
		{"missing pipeline", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_PIPELINE_NAME", ""), nil, []string{"workflow identity: pipeline: missing", "KRATIX_PIPELINE_NAME"}
		}},
		{"missing resource name", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_OBJECT_NAME", ""), nil, []string{"workflow identity: name: missing", "object.yaml"}
		}},
		{"missing resource namespace", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_OBJECT_NAMESPACE", ""), nil, []string{"workflow identity: namespace: missing", "object.yaml"}
		}},
		{"object.yaml without a name", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setObject("apiVersion: v1\nkind: Thing\nmetadata:\n  namespace: team-a\n")
			return with(env, "KRATIX_OBJECT_NAME", "", "KRATIX_OBJECT_NAMESPACE", ""), nil, []string{"workflow identity: name: missing"}
		}},
		{"object.yaml invalid YAML", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setObject("metadata: {name: [x\n")
			return with(env, "KRATIX_OBJECT_NAME", "", "KRATIX_OBJECT_NAMESPACE", ""), nil, []string{filepath.Join(wf.input, "object.yaml") + ": invalid YAML"}
		}},
		{"resource name not a Kubernetes name", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return with(env, "KRATIX_OBJECT_NAME", "../../etc"), nil, []string{"workflow identity: name: \"../../etc\" is not a valid Kubernetes name"}
		}},
		{"unknown action", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return env, []string{"--action", "destroy"}, []string{"workflow identity: action: \"destroy\" is neither configure nor delete"}
		}},
		{"secret missing for a remote store", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/remote.yaml", docs(
				"apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: remote\nspec:\n  url: https://git.example.invalid/state.git\n  authMethod: basicAuth\n  secretRef: {name: git-creds, namespace: default}\n",
				dest("far", map[string]string{"zone": "far"}, "store=remote")))
			return env, nil, []string{p + ": GitStateStore remote: spec.secretRef default/git-creds: no Secret default/git-creds in the platform configuration, and no --secrets-dir was given"}
		}},
		{"secret without password for a remote store", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/remote.yaml", docs(
				"apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: remote\nspec:\n  url: https://git.example.invalid/state.git\n  authMethod: basicAuth\n  secretRef: {name: git-creds}\n",
				"apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-creds\nstringData:\n  username: bob\n",
				dest("far", map[string]string{"zone": "far"}, "store=remote")))
			return env, nil, []string{p + ": GitStateStore remote: secret git-creds has no key \"password\""}
		}},
		{"secret with bad base64", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-creds\ndata:\n  password: 'not base64 !!'\n")
			return env, nil, []string{p + ": document 1 (Secret git-creds): data.password is not valid base64"}
		}},
		// Issue 16.1: an alias bomb ran render out of memory in kustomize.
		{"output alias bomb", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			var b strings.Builder
			b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  a: &a [x,x,x,x,x,x,x,x,x,x]\n")
			for l, prev := range "abcdefgh" {
				n := string(rune('b' + l))
				fmt.Fprintf(&b, "  %s: &%s [%s]\n", n, n, strings.TrimSuffix(strings.Repeat("*"+string(prev)+",", 10), ","))
			}
			p := filepath.Join(wf.output, "bomb.yaml")
			writeFile(w.t, p, b.String())
			return env, nil, []string{p + ": document 1: its aliases expand to more than 100000 nodes"}
		}},
		// Issue 11.3: typos in the platform configuration.
		{"destination field typo", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/more.yaml", dest("odd", map[string]string{"zone": "eu"}, "strictMatchLabel: true"))
			return env, nil, []string{p + ": document 1 (Destination odd): line ", ": unknown field spec.strictMatchLabel (did you mean spec.strictMatchLabels?)"}
		}},
		{"store field typo", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/store.yaml", strings.Replace(gitStore("default", "file://"+w.repo), "branch: main", "branchh: main", 1))
			return env, nil, []string{p + ": document 1 (GitStateStore default): line 7: unknown field spec.branchh (did you mean spec.branch?)"}
		}},
		// Issue 16.5: accepted without a word before.
		{"missing metadata folder", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			if err := os.RemoveAll(wf.metadata); err != nil {
				w.t.Fatal(err)
			}
			return env, nil, []string{wf.metadata + ": the metadata folder does not exist"}
		}},
		{"object.yaml with two documents", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			wf.setObject("apiVersion: x/v1\nkind: P\nmetadata: {name: a}\n---\napiVersion: x/v1\nkind: P\nmetadata: {name: b}\n")
			return env, nil, []string{filepath.Join(wf.input, "object.yaml") + ": holds 2 documents"}
		}},
		{"branch git refuses", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/store.yaml", strings.Replace(gitStore("default", "file://"+w.repo), "branch: main", "branch: main.lock", 1))
			return env, nil, []string{p + ": document 1 (GitStateStore default): spec.branch \"main.lock\" is not a branch name git accepts"}
		}},
		{"two stores aliasing one folder", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			p := w.file("platform/alias.yaml", docs(gitStore("alias", w.repo), dest("dev-eu-again", map[string]string{"zone": "far"}, "store=alias", "path: dev-eu")))
			return env, nil, []string{p + ": Destination dev-eu-again: spec.path \"dev-eu\" puts it in folder \"clusters/dev-eu\" of GitStateStore/alias, which overlaps folder \"clusters/dev-eu\" of Destination dev-eu"}
		}},
		{"unknown format", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return env, []string{"--format", "yaml"}, []string{"--format \"yaml\": use text or json"}
		}},
		{"unknown flag", func(w *world, wf *workflow) (map[string]string, []string, []string) {
			env := validWorkflow(wf)
			return env, []string{"--colour"}, []string{"unknown flag: --colour\nRun 'render --help' for usage.\n"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, existing := range []bool{false, true} {
				w := newWorld(t)
				w.file("platform/destinations.yaml", twoDests)
				wf := w.workflow("wf")
				before := ""
				var beforeTree map[string]string
				if existing {
					// A good render first, so the branch exists and must not move.
					validWorkflow(wf)
					wf.mustRun(0, resourceEnv("postgres", "team-a", "orders", "configure"))
					before = branchTip(t, w.repo)
					beforeTree = repoTree(t, w.repo)
					if before == "" {
						t.Fatal("the good render left no branch")
					}
				}
				env, extra, want := tc.setup(w, wf)
				r := wf.run(env, extra...)
				if r.code != 2 {
					t.Fatalf("existing=%v: want exit 2, got %s", existing, r)
				}
				// One line; a mistyped flag adds the usual hint.
				line := strings.TrimSuffix(r.errout, "Run 'render --help' for usage.\n")
				if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") || !strings.HasPrefix(line, "render: ") {
					t.Errorf("stderr is not one line starting with \"render: \":\n%s", r.errout)
				}
				for _, s := range want {
					if !strings.Contains(r.errout, s) {
						t.Errorf("stderr lacks %q:\n%s", s, r.errout)
					}
				}
				if r.out != "" {
					t.Errorf("stdout should be empty on bad input, got:\n%s", r.out)
				}
				if !existing {
					if _, err := os.Stat(w.repo); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the repository was created by a refused render (stat: %v)", err)
					}
					continue
				}
				if after := branchTip(t, w.repo); after != before {
					t.Errorf("the branch moved from %s to %s on a refused render", before, after)
				}
				if got := repoTree(t, w.repo); fmt.Sprint(keysOf(got)) != fmt.Sprint(keysOf(beforeTree)) {
					t.Errorf("tree changed:\nbefore %v\nafter  %v", keysOf(beforeTree), keysOf(got))
				}
			}
		})
	}
}

// A .txt file of garbage is not YAML and is carried as it is.
func TestNonYAMLFileIsCarriedVerbatim(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("only", nil))
	wf := w.workflow("wf").setOutput(map[string]string{"notes.txt": "a: b: c: [\x00garbage", "cm.yaml": obj("ConfigMap")})
	wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"))
	tree := repoTree(t, w.repo)
	got, ok := tree["clusters/only/resources/ns/p/r/pipe/5058f/notes.txt"]
	if !ok || got != "a: b: c: [\x00garbage" {
		t.Fatalf("notes.txt not carried verbatim: ok=%v %q; tree %v", ok, got, keysOf(tree))
	}
}

// The identity comes from object.yaml when the variables are absent, and a
// namespace-less (cluster-scoped) object lands in "kratix-platform-system".
func TestIdentityFallsBackToObjectYAML(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("only", nil))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	env := map[string]string{"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_PROMISE_NAME": "p", "KRATIX_PIPELINE_NAME": "pipe"}

	wf.setObject("apiVersion: x/v1\nkind: P\nmetadata:\n  name: from-object\n  namespace: obj-ns\n")
	wf.mustRun(0, env)
	tree := repoTree(t, w.repo)
	if _, ok := tree["clusters/only/resources/obj-ns/p/from-object/pipe/5058f/cm.yaml"]; !ok {
		t.Fatalf("object.yaml's name and namespace were not used: %v", keysOf(tree))
	}

	// The variables win over object.yaml; the flags win over the variables.
	// (Each resource writes its own ConfigMap: one object may not come from
	// two workloads in one destination.)
	wf.setOutput(map[string]string{"cm.yaml": objNamed("ConfigMap", "cm-env")})
	wf.mustRun(0, with(env, "KRATIX_OBJECT_NAME", "from-env", "KRATIX_OBJECT_NAMESPACE", "env-ns"))
	wf.setOutput(map[string]string{"cm.yaml": objNamed("ConfigMap", "cm-flag")})
	wf.mustRun(0, with(env, "KRATIX_OBJECT_NAME", "from-env"), "--name", "from-flag", "--namespace", "flag-ns")
	tree = repoTree(t, w.repo)
	for _, p := range []string{
		"clusters/only/resources/env-ns/p/from-env/pipe/5058f/cm.yaml",
		"clusters/only/resources/flag-ns/p/from-flag/pipe/5058f/cm.yaml",
	} {
		if _, ok := tree[p]; !ok {
			t.Errorf("missing %s: %v", p, keysOf(tree))
		}
	}

	wf.setObject("apiVersion: x/v1\nkind: P\nmetadata:\n  name: no-ns\n")
	wf.setOutput(map[string]string{"cm.yaml": objNamed("ConfigMap", "cm-no-ns")})
	wf.mustRun(0, env)
	// A namespace-less object is a cluster-scoped resource: Kratix files it
	// under its own namespace, kratix-platform-system.
	if _, ok := repoTree(t, w.repo)["clusters/only/resources/kratix-platform-system/p/no-ns/pipe/5058f/cm.yaml"]; !ok {
		t.Fatalf("a namespace-less object should land in kratix-platform-system: %v", keysOf(repoTree(t, w.repo)))
	}
}

// Credentials never reach stdout or stderr, even when the store fails. A
// password in a URL is refused before anything is contacted (exit 2).
func TestCredentialsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-pa55"
	const store = "apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: remote\nspec:\n  url: http://127.0.0.1:1/state.git\n  branch: main\n  authMethod: basicAuth\n  secretRef: {name: git-creds, namespace: kratix}\n"
	for _, v := range []struct {
		name  string
		code  int
		setup func(w *world) []string
	}{
		{"in the URL", 2, func(w *world) []string {
			w.file("platform/store.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: remote\nspec:\n  url: http://render:"+password+"@127.0.0.1:1/state.git\n")
			return nil
		}},
		{"stringData", 1, func(w *world) []string {
			w.file("platform/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-creds\n  namespace: kratix\nstringData:\n  username: render\n  password: "+password+"\n")
			return nil
		}},
		{"mounted", 1, func(w *world) []string {
			w.file("secrets/git-creds/username", "render\n")
			w.file("secrets/git-creds/password", password+"\n")
			return []string{"--secrets-dir", filepath.Join(w.root, "secrets")}
		}},
	} {
		for _, format := range []string{"text", "json"} {
			t.Run(v.name+"/"+format, func(t *testing.T) {
				w := newWorld(t)
				w.file("platform/store.yaml", store)
				w.file("platform/destinations.yaml", dest("far", nil, "store=remote"))
				extra := v.setup(w)
				wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
				extra = append(extra, "--retry-deadline", "1s", "--log-level", "debug", "-o", format)
				r := wf.run(resourceEnv("p", "ns", "r", "pipe"), extra...)
				if r.code != v.code {
					t.Fatalf("want exit %d, got %s", v.code, r)
				}
				if !strings.Contains(r.errout, "GitStateStore/remote") && !strings.Contains(r.errout, "GitStateStore remote") {
					t.Errorf("stderr does not name the store:\n%s", r.errout)
				}
				for _, s := range []string{r.out, r.errout} {
					if strings.Contains(s, password) {
						t.Errorf("the password was printed:\n%s", r)
					}
				}
			})
		}
	}
}

// ---------------------------------------------------------------------------
// 2. Unscheduled groups: exit 3, the rest is written.
// ---------------------------------------------------------------------------

func TestUnscheduledGroupExit3(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", twoDests)
	wf := w.workflow("wf").setOutput(map[string]string{
		"db.yaml":         obj("ConfigMap"),
		"backup/b.yaml":   obj("Job"),
		"mars/rover.yaml": obj("Rover"),
	})
	wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu}\n- directory: mars\n  matchLabels: {zone: mars}\n")
	r := wf.run(resourceEnv("p", "ns", "r", "pipe"))
	if r.code != 3 {
		t.Fatalf("want exit 3, got %s", r)
	}
	for _, s := range []string{
		"group mars is unscheduled: no destination matches selector zone=mars",
		"dev-eu: label zone=mars: the destination has zone=eu",
		"dev-us: label zone=mars: the destination has zone=us",
	} {
		if !strings.Contains(r.errout, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.errout)
		}
	}
	if strings.Contains(r.errout, "group backup") || strings.Contains(r.errout, "group .") {
		t.Errorf("stderr names scheduled groups as unscheduled:\n%s", r.errout)
	}
	if !strings.Contains(r.out, "mars") || !strings.Contains(r.out, "UNSCHEDULED") {
		t.Errorf("stdout does not show the unscheduled group:\n%s", r.out)
	}
	tree := repoTree(t, w.repo)
	backup := "clusters/dev-eu/resources/ns/p/r/pipe/" + md5id("backup") + "/backup/b.yaml"
	if tree[backup] != obj("Job") {
		t.Errorf("the backup group was not written to dev-eu: %v", keysOf(tree))
	}
	db := append(underPrefix(tree, "clusters/dev-eu/resources/ns/p/r/pipe/5058f/"), underPrefix(tree, "clusters/dev-us/resources/ns/p/r/pipe/5058f/")...)
	if len(db) != 1 || !strings.HasSuffix(db[0], "/db.yaml") {
		t.Errorf("the default group should be on exactly one destination, got %v", db)
	}
	for p := range tree {
		if strings.Contains(p, "rover") {
			t.Errorf("the unscheduled group was written: %s", p)
		}
	}
}

// md5id is Kratix's group id, spelled out for the two groups tests use, so a
// change of the id scheme fails here.
func md5id(dir string) string {
	return map[string]string{".": "5058f", "backup": "40205", "extra": "ea9f9"}[dir]
}

// ---------------------------------------------------------------------------
// 3. Dry run.
// ---------------------------------------------------------------------------

func TestDryRunWritesNothingAndShowsTheDiff(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", twoDests)
	env := resourceEnv("p", "ns", "r", "pipe")
	wf := w.workflow("wf").setOutput(map[string]string{
		"keep.yaml": obj("A"), "change.yaml": obj("B"), "drop.yaml": obj("C"), "backup/b.yaml": obj("Job"),
	})
	wf.setSelectors("- matchLabels: {zone: us}\n- directory: backup\n  matchLabels: {zone: eu}\n")

	// A dry run against a store that has nothing yet.
	r := wf.mustRun(0, env, "--dry-run")
	if !strings.Contains(r.out, "destination dev-us (dev-us):") || !strings.Contains(r.out, "    + resources/ns/p/r/pipe/5058f/keep.yaml") ||
		!strings.Contains(r.out, "    + resources/kratix-canary-configmap.yaml") {
		t.Errorf("first dry run does not list the additions:\n%s", r.out)
	}
	if tip := branchTip(t, w.repo); tip != "" {
		t.Fatalf("a dry run created branch main at %s", tip)
	}

	wf.mustRun(0, env)
	before := branchTip(t, w.repo)
	beforeTree := repoTree(t, w.repo)

	wf.setOutput(map[string]string{"keep.yaml": obj("A"), "change.yaml": obj("B2"), "new.yaml": obj("D"), "backup/b.yaml": obj("Job")})
	r = wf.mustRun(0, env, "--dry-run")
	if branchTip(t, w.repo) != before {
		t.Fatal("a dry run moved the branch")
	}
	// Per destination: dev-us has the default group, dev-eu is untouched.
	wantLines := []string{
		"  destination dev-us (dev-us):",
		"    + resources/ns/p/r/pipe/5058f/new.yaml",
		"    ~ resources/ns/p/r/pipe/5058f/change.yaml",
		"    - resources/ns/p/r/pipe/5058f/drop.yaml",
		"would write 1 added, 1 changed, 1 deleted",
	}
	for _, s := range wantLines {
		if !strings.Contains(r.out, s) {
			t.Errorf("dry run lacks %q:\n%s", s, r.out)
		}
	}
	if strings.Contains(r.out, "destination dev-eu") || strings.Contains(r.out, "keep.yaml") {
		t.Errorf("dry run lists unchanged files or destinations:\n%s", r.out)
	}
	// The lines come in the order +, ~, - below their destination.
	i1, i2, i3 := strings.Index(r.out, "    + "), strings.Index(r.out, "    ~ "), strings.Index(r.out, "    - ")
	if !(strings.Index(r.out, "destination dev-us") < i1 && i1 < i2 && i2 < i3) {
		t.Errorf("dry-run lines out of order:\n%s", r.out)
	}

	// The same as JSON.
	r = wf.mustRun(0, env, "--dry-run", "-o", "json")
	if branchTip(t, w.repo) != before {
		t.Fatal("a JSON dry run moved the branch")
	}
	rep := decodeReport(t, r)
	if !rep.DryRun || rep.Workflow.Type != "resource" || rep.Workflow.Name != "r" || rep.Workflow.Namespace != "ns" {
		t.Errorf("workflow/dryRun wrong: %+v", rep)
	}
	if len(rep.Groups) != 2 {
		t.Fatalf("want 2 groups, got %+v", rep.Groups)
	}
	if d := groupDests(t, rep, "."); fmt.Sprint(d) != "[dev-us]" {
		t.Errorf("default group destinations %v", d)
	}
	if d := groupDests(t, rep, "backup"); fmt.Sprint(d) != "[dev-eu]" {
		t.Errorf("backup group destinations %v", d)
	}
	if rep.Groups[0].Directory != "." || rep.Groups[0].ID != "5058f" || rep.Groups[0].Selector != "zone=us" ||
		fmt.Sprint(rep.Groups[0].Files) != "[change.yaml keep.yaml new.yaml]" {
		t.Errorf("default group: %+v", rep.Groups[0])
	}
	if len(rep.Stores) != 1 || !rep.Stores[0].Updated || rep.Stores[0].Revision != "" || !strings.HasPrefix(rep.Stores[0].Store, "GitStateStore/default") {
		t.Fatalf("stores: %+v", rep.Stores)
	}
	ds := rep.Stores[0].Destinations
	if len(ds) != 1 || ds[0].Destination != "dev-us" || ds[0].Path != "dev-us" ||
		fmt.Sprint(ds[0].Added) != "[resources/ns/p/r/pipe/5058f/new.yaml]" ||
		fmt.Sprint(ds[0].Changed) != "[resources/ns/p/r/pipe/5058f/change.yaml]" ||
		fmt.Sprint(ds[0].Deleted) != "[resources/ns/p/r/pipe/5058f/drop.yaml]" {
		t.Errorf("destinations: %+v", ds)
	}

	// And the real render does what the dry run said.
	wf.mustRun(0, env)
	after := repoTree(t, w.repo)
	base := "clusters/dev-us/resources/ns/p/r/pipe/5058f/"
	if after[base+"new.yaml"] != obj("D") || after[base+"change.yaml"] != obj("B2") || after[base+"keep.yaml"] != beforeTree[base+"keep.yaml"] {
		t.Errorf("render after dry run: %v", keysOf(after))
	}
	if _, ok := after[base+"drop.yaml"]; ok {
		t.Error("drop.yaml survived")
	}
}

// ---------------------------------------------------------------------------
// 4. Ownership end to end.
// ---------------------------------------------------------------------------

func TestOwnershipAcrossWorkloads(t *testing.T) {
	w := newWorld(t)
	other := filepath.Join(w.root, "other.git")
	w.file("platform/other-store.yaml", gitStore("other", "file://"+other))
	w.file("platform/destinations.yaml", docs(
		dest("worker", map[string]string{"role": "worker"}),
		dest("edge", map[string]string{"role": "edge"}, "store=other", "path: edge/eu"),
	))
	envA := resourceEnv("p", "team", "r1", "pipe")
	envB := resourceEnv("p", "team", "r2", "pipe")
	a := w.workflow("a").setOutput(map[string]string{"a1.yaml": obj("A1"), "a2.yaml": obj("A2"), "extra/e.yaml": obj("E")})
	a.setSelectors("- matchLabels: {role: worker}\n- directory: extra\n  matchLabels: {role: edge}\n")
	b := w.workflow("b").setOutput(map[string]string{"b1.yaml": obj("B1")})
	b.setSelectors("- matchLabels: {role: worker}\n")

	a.mustRun(0, envA)
	b.mustRun(0, envB)
	aDir := "clusters/worker/resources/team/p/r1/pipe/5058f/"
	aExtra := "clusters/edge/eu/resources/team/p/r1/pipe/" + md5id("extra") + "/extra/e.yaml"
	bFile := "clusters/worker/resources/team/p/r2/pipe/5058f/b1.yaml"
	tree := repoTree(t, w.repo)
	for _, p := range []string{aDir + "a1.yaml", aDir + "a2.yaml", bFile,
		"clusters/worker/dependencies/kratix-canary-namespace.yaml", "clusters/worker/resources/kratix-canary-configmap.yaml"} {
		if _, ok := tree[p]; !ok {
			t.Fatalf("missing %s: %v", p, keysOf(tree))
		}
	}
	if repoTree(t, other)[aExtra] != obj("E") {
		t.Fatalf("extra group not in the other store: %v", keysOf(repoTree(t, other)))
	}
	bOnly := func(tree map[string]string) map[string]string {
		out := map[string]string{}
		for p, c := range tree {
			if strings.Contains(p, "/r2/") || strings.Contains(p, "kratix-canary") {
				out[p] = c
			}
		}
		return out
	}
	bBefore := bOnly(tree)

	// Re-render A with a1 removed and a3 added.
	a.setOutput(map[string]string{"a2.yaml": obj("A2"), "a3.yaml": obj("A3"), "extra/e.yaml": obj("E")})
	a.mustRun(0, envA)
	tree = repoTree(t, w.repo)
	if _, ok := tree[aDir+"a1.yaml"]; ok {
		t.Error("A's stale a1.yaml survived")
	}
	if tree[aDir+"a3.yaml"] != obj("A3") || tree[aDir+"a2.yaml"] != obj("A2") {
		t.Errorf("A's files wrong: %v", underPrefix(tree, aDir))
	}
	if fmt.Sprint(bOnly(tree)) != fmt.Sprint(bBefore) {
		t.Errorf("B was touched:\nbefore %v\nafter  %v", bBefore, bOnly(tree))
	}

	// A's extra group disappears from the output: its folder goes. It was
	// edge's only workload file, so the mass-deletion breaker must be told.
	a.setOutput(map[string]string{"a2.yaml": obj("A2"), "a3.yaml": obj("A3")})
	a.setSelectors("- matchLabels: {role: worker}\n")
	a.mustRun(0, envA, "--allow-mass-deletion")
	otherTree := repoTree(t, other)
	if left := underPrefix(otherTree, "clusters/edge/eu/resources/team/p/r1/"); len(left) > 0 {
		t.Errorf("the vanished group's folder survived: %v", left)
	}
	for _, p := range []string{"clusters/edge/eu/dependencies/kratix-canary-namespace.yaml", "clusters/edge/eu/resources/kratix-canary-configmap.yaml"} {
		if _, ok := otherTree[p]; !ok {
			t.Errorf("canary %s was removed", p)
		}
	}
	if len(underPrefix(repoTree(t, w.repo), aDir)) != 2 {
		t.Errorf("A's default group changed: %v", underPrefix(repoTree(t, w.repo), aDir))
	}

	// Bring the group back, then delete A.
	a.setOutput(map[string]string{"a2.yaml": obj("A2"), "extra/e.yaml": obj("E")})
	a.setSelectors("- matchLabels: {role: worker}\n- directory: extra\n  matchLabels: {role: edge}\n")
	a.mustRun(0, envA)
	if _, ok := repoTree(t, other)[aExtra]; !ok {
		t.Fatal("extra group did not come back")
	}
	// The delete needs no output: it removes what the stores recorded.
	a.setOutput(nil)
	a.setSelectors("")
	a.mustRun(0, envA, "--action", "delete")
	for _, repo := range []string{w.repo, other} {
		tree := repoTree(t, repo)
		for p := range tree {
			if strings.Contains(p, "/r1/") {
				t.Errorf("%s: A's file %s survived the delete", filepath.Base(repo), p)
			}
		}
		if _, ok := tree["clusters/.render/workloads/resource/team/p/r1/pipe.json"]; ok {
			t.Errorf("%s: A's record survived the delete", filepath.Base(repo))
		}
		if len(underPrefix(tree, "clusters/")) == 0 {
			t.Errorf("%s: everything went", filepath.Base(repo))
		}
	}
	tree = repoTree(t, w.repo)
	if fmt.Sprint(bOnly(tree)) != fmt.Sprint(bBefore) {
		t.Errorf("B was touched by A's delete:\nbefore %v\nafter  %v", bBefore, bOnly(tree))
	}
	if _, ok := tree["clusters/.render/workloads/resource/team/p/r2/pipe.json"]; !ok {
		t.Error("B's record went with A's delete")
	}
	if _, ok := repoTree(t, other)["clusters/edge/eu/resources/kratix-canary-configmap.yaml"]; !ok {
		t.Error("the other store's canary went with A's delete")
	}
	// Deleting again changes nothing.
	tip := branchTip(t, w.repo)
	a.mustRun(0, envA, "--action", "delete")
	if branchTip(t, w.repo) != tip {
		t.Error("a second delete made a commit")
	}
}

// Nothing render keeps for itself is YAML or inside a destination path.
func TestRecordsLiveOutsideDestinations(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", twoDests)
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X")})
	wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"))
	for p := range repoTree(t, w.repo) {
		if strings.HasPrefix(p, "clusters/dev-") {
			if strings.Contains(p, ".render") {
				t.Errorf("render's own file inside a destination: %s", p)
			}
			continue
		}
		if !strings.HasPrefix(p, "clusters/.render/") || strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") {
			t.Errorf("unexpected file outside the destinations: %s", p)
		}
	}
}

// ---------------------------------------------------------------------------
// 5. Stickiness and determinism.
// ---------------------------------------------------------------------------

// placeFresh renders resource name into a fresh repository with the given
// destinations (all matching) and returns where the default group went.
func placeFresh(t *testing.T, destNames []string, name string) string {
	t.Helper()
	w := newWorld(t)
	var ds []string
	for _, d := range destNames {
		ds = append(ds, dest(d, map[string]string{"pool": "a"}))
	}
	w.file("platform/destinations.yaml", docs(ds...))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X")})
	r := wf.mustRun(0, resourceEnv("p", "ns", name, "pipe"), "-o", "json")
	d := groupDests(t, decodeReport(t, r), ".")
	if len(d) != 1 {
		t.Fatalf("a resource group went to %v", d)
	}
	return d[0]
}

func TestPlacementIsStickyAcrossRenders(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("s1", map[string]string{"pool": "a"}), dest("s2", map[string]string{"pool": "a"})))
	env := resourceEnv("p", "ns", "r", "pipe")
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X")})
	r := wf.mustRun(0, env, "-o", "json")
	first := groupDests(t, decodeReport(t, r), ".")
	if len(first) != 1 {
		t.Fatalf("placed on %v", first)
	}
	placed := first[0]

	// A third matching destination that a fresh render would choose.
	third := ""
	for i := 3; i < 60 && third == ""; i++ {
		name := fmt.Sprintf("s%d", i)
		if placeFresh(t, []string{"s1", "s2", name}, "r") == name {
			third = name
		}
	}
	if third == "" {
		t.Fatal("no third destination name changes a fresh placement; the test cannot show stickiness")
	}
	w.file("platform/third.yaml", dest(third, map[string]string{"pool": "a"}))

	wf.setOutput(map[string]string{"db.yaml": obj("X") + "data: {v: \"2\"}\n"})
	for i := 0; i < 3; i++ {
		r = wf.mustRun(0, env, "-o", "json")
		rep := decodeReport(t, r)
		if d := groupDests(t, rep, "."); fmt.Sprint(d) != "["+placed+"]" || !rep.Groups[0].Kept {
			t.Fatalf("render %d: moved from %s to %v (kept=%v)", i+2, placed, d, rep.Groups[0].Kept)
		}
	}
	tree := repoTree(t, w.repo)
	var where []string
	for p := range tree {
		if strings.HasSuffix(p, "/db.yaml") {
			where = append(where, p)
		}
	}
	if len(where) != 1 || where[0] != "clusters/"+placed+"/resources/ns/p/r/pipe/5058f/db.yaml" || tree[where[0]] != obj("X")+"data: {v: \"2\"}\n" {
		t.Errorf("db.yaml is at %v", where)
	}
	// The text report says it was kept.
	r = wf.mustRun(0, env)
	if !strings.Contains(r.out, "-> "+placed+" (kept from an earlier render)") {
		t.Errorf("text report does not say the placement was kept:\n%s", r.out)
	}
}

func TestPlacementIsDeterministic(t *testing.T) {
	dests := []string{"d1", "d2", "d3"}
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("res-%d", i)
		a, b := placeFresh(t, dests, name), placeFresh(t, dests, name)
		if a != b {
			t.Errorf("%s: two fresh repositories chose %s and %s", name, a, b)
		}
		seen[a] = true
	}
	if len(seen) < 2 {
		t.Errorf("six resources all went to %v: the choice ignores the workload", seen)
	}
}

// ---------------------------------------------------------------------------
// 6. Promise workflows and the inherited selector.
// ---------------------------------------------------------------------------

func TestPromiseWorkflowGoesToEveryMatch(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("a", map[string]string{"env": "dev"}),
		dest("b", map[string]string{"env": "dev", "zone": "eu"}),
		dest("c", map[string]string{"env": "prod"}),
		dest("strict", map[string]string{"env": "dev"}, "strictMatchLabels: true"),
	))
	w.file("platform/promise.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: pg\nspec:\n  destinationSelectors:\n  - matchLabels: {env: dev}\n")
	wf := w.workflow("wf").setOutput(map[string]string{"operator.yaml": obj("Deployment")})
	wf.mustRun(0, promiseEnv("pg", "install"))
	tree := repoTree(t, w.repo)
	for _, d := range []string{"a", "b", "strict"} {
		if tree["clusters/"+d+"/dependencies/pg/install/5058f/operator.yaml"] != obj("Deployment") {
			t.Errorf("destination %s lacks the dependency: %v", d, keysOf(tree))
		}
	}
	// c gets Kratix's canaries, as every destination of the store does, and
	// nothing else.
	for _, p := range underPrefix(tree, "clusters/c/") {
		if !strings.Contains(p, "/kratix-canary-") {
			t.Errorf("destination c (env=prod) got %s", p)
		}
	}
}

func TestResourceInheritsPromiseWorkflowSelector(t *testing.T) {
	w := newWorld(t)
	// Only "target" has env=dev, tier=gold and zone=eu; each decoy has what a
	// wrong precedence would ask for.
	w.file("platform/destinations.yaml", docs(
		dest("target", map[string]string{"env": "dev", "tier": "gold", "zone": "eu"}),
		dest("promise-loses", map[string]string{"env": "prod", "tier": "gold", "zone": "eu"}),
		dest("resource-wins-env", map[string]string{"env": "staging", "tier": "gold", "zone": "eu"}),
		dest("resource-wins-tier", map[string]string{"env": "dev", "tier": "silver", "zone": "eu"}),
		dest("no-inherit", map[string]string{"env": "dev", "zone": "eu"}),
		dest("other-promise", map[string]string{"env": "dev", "tier": "bronze", "zone": "eu"}),
	))
	w.file("platform/promise.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: pg\nspec:\n  destinationSelectors:\n  - matchLabels: {env: dev}\n")

	// Another promise's workflow leaves a root selector too: it must not leak.
	o := w.workflow("other").setOutput(map[string]string{"x.yaml": obj("X")})
	o.setSelectors("- matchLabels: {tier: bronze}\n")
	o.mustRun(0, promiseEnv("redis", "install"))

	// The promise workflow: its root entry conflicts with the Promise on env.
	pw := w.workflow("promise").setOutput(map[string]string{"operator.yaml": obj("Deployment")})
	pw.setSelectors("- matchLabels: {env: prod, tier: gold}\n")
	pw.mustRun(0, promiseEnv("pg", "install"))

	rw := w.workflow("resource").setOutput(map[string]string{"db.yaml": objNamed("DB", "db1")})
	rw.setSelectors("- matchLabels: {env: staging, tier: silver, zone: eu}\n")
	r := rw.mustRun(0, resourceEnv("pg", "ns", "db1", "configure"), "-o", "json")
	rep := decodeReport(t, r)
	if len(rep.Groups) != 1 || rep.Groups[0].Selector != "env=dev,tier=gold,zone=eu" {
		t.Fatalf("effective selector wrong: %+v", rep.Groups)
	}
	if d := groupDests(t, rep, "."); fmt.Sprint(d) != "[target]" {
		t.Fatalf("went to %v, want [target]", d)
	}
	if _, ok := repoTree(t, w.repo)["clusters/target/resources/ns/pg/db1/configure/5058f/db.yaml"]; !ok {
		t.Error("db.yaml not written to target")
	}

	// Without its own root entry the resource still gets the inherited tier.
	rw2 := w.workflow("resource2").setOutput(map[string]string{"db.yaml": objNamed("DB", "db2")})
	r = rw2.mustRun(0, resourceEnv("pg", "ns", "db2", "configure"), "-o", "json")
	rep = decodeReport(t, r)
	if rep.Groups[0].Selector != "env=dev,tier=gold" {
		t.Errorf("inherited selector wrong: %q", rep.Groups[0].Selector)
	}
	if d := groupDests(t, rep, "."); fmt.Sprint(d) != "[target]" {
		t.Errorf("went to %v, want [target]", d)
	}

	// A directory group ignores both the Promise and the inherited selector.
	rw3 := w.workflow("resource3").setOutput(map[string]string{"db.yaml": objNamed("DB", "db3"), "backup/b.yaml": obj("Job")})
	rw3.setSelectors("- directory: backup\n  matchLabels: {env: prod}\n")
	r = rw3.mustRun(0, resourceEnv("pg", "ns", "db3", "configure"), "-o", "json")
	if d := groupDests(t, decodeReport(t, r), "backup"); fmt.Sprint(d) != "[promise-loses]" {
		t.Errorf("directory group went to %v, want [promise-loses]", d)
	}
}

// The inherited selector comes from the store even when the promise
// workflow wrote no files at all.
func TestInheritedSelectorWithoutPromiseFiles(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("gold", map[string]string{"tier": "gold"}), dest("silver", map[string]string{"tier": "silver"})))
	pw := w.workflow("promise").setOutput(nil)
	pw.setSelectors("- matchLabels: {tier: gold}\n")
	pw.mustRun(0, promiseEnv("pg", "install"))
	for i := 0; i < 4; i++ {
		rw := w.workflow(fmt.Sprintf("r%d", i)).setOutput(map[string]string{"db.yaml": objNamed("DB", fmt.Sprintf("db%d", i))})
		r := rw.mustRun(0, resourceEnv("pg", "ns", fmt.Sprintf("db%d", i), "configure"), "-o", "json")
		if d := groupDests(t, decodeReport(t, r), "."); fmt.Sprint(d) != "[gold]" {
			t.Fatalf("resource %d went to %v", i, d)
		}
	}
}

// ---------------------------------------------------------------------------
// 7. Commits.
// ---------------------------------------------------------------------------

func TestCommitsIntoAnEmptyBareRepository(t *testing.T) {
	w := newWorld(t)
	if out, err := exec.Command("git", "init", "--bare", "--quiet", w.repo).CombinedOutput(); err != nil {
		t.Fatalf("git init --bare: %v\n%s", err, out)
	}
	w.file("platform/destinations.yaml", twoDests)
	env := resourceEnv("p", "ns", "r", "pipe")
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X"), "backup/b.yaml": obj("Job")})
	wf.setSelectors("- directory: backup\n  matchLabels: {zone: eu}\n")

	r := wf.mustRun(0, env)
	if n := commitCount(t, w.repo); n != 1 {
		t.Fatalf("first render: %d commits, want 1", n)
	}
	tip := branchTip(t, w.repo)
	if !strings.Contains(r.out, "wrote "+tip[:12]) {
		t.Errorf("report does not name the commit %s:\n%s", tip[:12], r.out)
	}
	// git itself reads what was written.
	out, err := exec.Command("git", "--git-dir", w.repo, "ls-tree", "-r", "--name-only", "main").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "clusters/dev-eu/resources/ns/p/r/pipe/40205/backup/b.yaml") {
		t.Errorf("git ls-tree: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "--git-dir", w.repo, "fsck", "--strict").CombinedOutput(); err != nil {
		t.Errorf("git fsck: %v\n%s", err, out)
	}
	msg, _ := exec.Command("git", "--git-dir", w.repo, "log", "-1", "--format=%B", "main").Output()
	if !strings.Contains(string(msg), "Render-Resource: r") || !strings.Contains(string(msg), "Render-Namespace: ns") {
		t.Errorf("commit message lacks the trailers:\n%s", msg)
	}

	// An identical render makes no commit.
	r = wf.mustRun(0, env)
	if n := commitCount(t, w.repo); n != 1 || branchTip(t, w.repo) != tip {
		t.Fatalf("identical render: %d commits", n)
	}
	if !strings.Contains(r.out, "up to date") {
		t.Errorf("identical render report:\n%s", r.out)
	}

	// A render touching both destinations and several files is one commit.
	wf.setOutput(map[string]string{"db.yaml": obj("X2"), "more.yaml": obj("Y"), "backup/b.yaml": obj("Job2")})
	wf.mustRun(0, env)
	if n := commitCount(t, w.repo); n != 2 {
		t.Fatalf("changed render: %d commits, want 2", n)
	}
	// A second workload: one more commit.
	w.workflow("wf2").setOutput(map[string]string{"x.yaml": obj("X")}).mustRun(0, resourceEnv("p", "ns", "r2", "pipe"))
	if n := commitCount(t, w.repo); n != 3 {
		t.Fatalf("second workload: %d commits, want 3", n)
	}
	// Never a force push: each commit's parent is the previous tip.
	rp, _ := git.PlainOpen(w.repo)
	ref, _ := rp.Reference(plumbing.NewBranchReferenceName("main"), true)
	c, _ := rp.CommitObject(ref.Hash())
	for c.NumParents() == 1 {
		c, _ = c.Parent(0)
	}
	if c.NumParents() != 0 {
		t.Error("history is not linear")
	}
}

// The branch is created when the repository exists but the branch does not.
func TestMissingBranchIsCreated(t *testing.T) {
	w := newWorld(t)
	if out, err := exec.Command("git", "init", "--bare", "--quiet", "--initial-branch", "trunk", w.repo).CombinedOutput(); err != nil {
		t.Fatalf("git init --bare: %v\n%s", err, out)
	}
	w.file("platform/destinations.yaml", dest("only", nil))
	w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X")}).mustRun(0, resourceEnv("p", "ns", "r", "pipe"))
	if _, ok := repoTree(t, w.repo)["clusters/only/resources/ns/p/r/pipe/5058f/db.yaml"]; !ok {
		t.Fatal("branch main was not created")
	}
}

// Many renders of different workloads on one branch at once all land, each
// as one commit, and none undoes another.
func TestConcurrentRendersAllLand(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", twoDests)
	const n = 6
	wfs := make([]*workflow, n)
	for i := range wfs {
		wfs[i] = w.workflow(fmt.Sprintf("wf%d", i)).setOutput(map[string]string{"db.yaml": objNamed("DB", fmt.Sprintf("db-%d", i))})
	}
	// The first render creates the repository; the rest race on it.
	wfs[0].mustRun(0, resourceEnv("p", "ns", "r0", "pipe"))
	results := make(chan result, n)
	for i := 1; i < n; i++ {
		go func() {
			var out, errb bytes.Buffer
			env := resourceEnv("p", "ns", fmt.Sprintf("r%d", i), "pipe")
			code := cli.Main(context.Background(), wfs[i].args(), cli.IO{Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] }})
			results <- result{code: code, out: out.String(), errout: errb.String()}
		}()
	}
	for i := 1; i < n; i++ {
		if r := <-results; r.code != 0 {
			t.Errorf("a concurrent render failed: %s", r)
		}
	}
	tree := repoTree(t, w.repo)
	for i := 0; i < n; i++ {
		var found []string
		for p, c := range tree {
			if strings.Contains(p, fmt.Sprintf("/r%d/", i)) && c == objNamed("DB", fmt.Sprintf("db-%d", i)) {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Errorf("r%d: %v", i, found)
		}
		if _, ok := tree[fmt.Sprintf("clusters/.render/workloads/resource/ns/p/r%d/pipe.json", i)]; !ok {
			t.Errorf("r%d has no record", i)
		}
	}
	if c := commitCount(t, w.repo); c != n {
		t.Errorf("%d commits for %d renders", c, n)
	}
}

// obj is a minimal Kubernetes object of the given kind, named after it:
// every output YAML file must hold Kubernetes objects (Flux builds them).
func obj(kind string) string {
	return "apiVersion: v1\nkind: " + kind + "\nmetadata:\n  name: " + strings.ToLower(kind) + "\n"
}

// objNamed is a minimal Kubernetes object with its own name: two workloads
// may not write the same object into one destination.
func objNamed(kind, name string) string {
	return "apiVersion: v1\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n"
}
