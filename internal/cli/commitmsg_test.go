package cli_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

func headCommit(t *testing.T, repo string) *object.Commit {
	t.Helper()
	r, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trailers parses a message's trailers with git itself.
func trailers(t *testing.T, msg string) string {
	t.Helper()
	cmd := exec.Command("git", "interpret-trailers", "--parse")
	cmd.Stdin = strings.NewReader(msg)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

const commitTemplate = `{{.Workflow.Action}} {{.Workflow.Namespace}}/{{.Workflow.Name}} for {{annotation "example.com/ticket"}}
{{range .Destinations}}{{.Name}}: +{{.Added}} ~{{.Changed}} -{{.Deleted}}
{{end}}requested by {{index .Annotations "example.com/requester"}} in run {{env "KRATIX_PIPELINE_RUN"}}`

const requestObject = `apiVersion: example.com/v1
kind: Database
metadata:
  name: r1
  namespace: team
  annotations:
    example.com/ticket: OPS-42
    example.com/requester: Ada Lovelace <ada@example.com>
`

func commitSpec(tmpl string, extra string) string {
	return "  commit:\n    template: |\n      " + strings.ReplaceAll(tmpl, "\n", "\n      ") + "\n    annotations: [example.com/ticket, example.com/requester]\n" + extra
}

func TestCommitMessageTemplateAndAuthor(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev", nil), dest("prod", nil)))
	env := with(resourceEnv("pg", "team", "r1", "configure"), "KRATIX_PIPELINE_RUN", "run-7")
	wf := w.workflow("r1").setObject(requestObject)
	wf.setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db")})

	// The default message is unchanged.
	wf.mustRun(0, env)
	def := headCommit(t, w.repo)
	if !strings.HasPrefix(def.Message, "render: configure resource team/r1 of promise pg (pipeline configure)\n\nRender-Workflow-Type: resource\n") || def.Author.Name != "render" {
		t.Fatalf("default commit changed: %q by %s", def.Message, def.Author.Name)
	}

	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+commitSpec(commitTemplate, "    authorAnnotation: example.com/requester\n")+"  gitAuthor: {name: render-bot, email: bot@example.com}\n")
	wf.setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db2"), "svc.yaml": objNamed("Service", "svc")})
	wf.mustRun(0, env)
	c := headCommit(t, w.repo)
	dest := placedOn(t, repoTree(t, w.repo), "team", "pg", "r1")[0]
	wantHead := "configure team/r1 for OPS-42\n\n" + dest + ": +1 ~1 -0\nrequested by Ada Lovelace <ada@example.com> in run run-7\n\nRender-Workflow-Type: resource\n"
	if !strings.HasPrefix(c.Message, wantHead) {
		t.Errorf("message:\n%s\nwant it to begin:\n%s", c.Message, wantHead)
	}
	tr := trailers(t, c.Message)
	for _, want := range []string{"Render-Workflow-Type: resource\n", "Render-Resource: r1\n", "Render-Pipeline: configure\n"} {
		if !strings.Contains(tr, want) {
			t.Errorf("git interpret-trailers does not find %q in:\n%s", want, tr)
		}
	}
	if c.Author.Name != "Ada Lovelace" || c.Author.Email != "ada@example.com" {
		t.Errorf("author = %s <%s>, want the requester", c.Author.Name, c.Author.Email)
	}
	if c.Committer.Name != "render-bot" || c.Committer.Email != "bot@example.com" {
		t.Errorf("committer = %s <%s>, want the store's gitAuthor", c.Committer.Name, c.Committer.Email)
	}

	// --commit-template takes the store's place.
	flagTmpl := w.file("commit.tmpl", "{{.Subject}} [{{index .Annotations \"example.com/ticket\"}}]\n\n{{.Added}} added, {{.Deleted}} deleted\n")
	wf.setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db2")})
	wf.mustRun(0, env, "--commit-template", flagTmpl)
	if c := headCommit(t, w.repo); !strings.HasPrefix(c.Message, "render: configure resource team/r1 of promise pg (pipeline configure) [OPS-42]\n\n0 added, 1 deleted\n\nRender-") {
		t.Errorf("message from --commit-template: %q", c.Message)
	}
}

func TestCommitTemplateErrorsAreBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, extra, object, want string
		flag                            bool
	}{
		{name: "parse", tmpl: "{{.Workflow.Name", want: "(GitStateStore default): spec.commit.template: commit:2: unclosed action started at commit:1"},
		{name: "unknown field", tmpl: "{{.Workflow.Nmae}}", want: "GitStateStore default: spec.commit.template: commit:1:11: executing \"commit\" at <.Workflow.Nmae>: can't evaluate field Nmae"},
		{name: "annotation not named", tmpl: `{{annotation "example.com/owner"}}`, want: `GitStateStore default: spec.commit.template: commit:1:2: executing "commit" at <annotation "example.com/owner">: error calling annotation: annotation "example.com/owner" is not named in spec.commit.annotations`},
		{name: "other env", tmpl: `x {{env "HOME"}}`, want: `env "HOME": a template reads only KRATIX_* variables`},
		{name: "empty subject", tmpl: `{{if false}}x{{end}}`, want: "spec.commit.template: the template's first line, the commit subject, is empty"},
		{name: "flag", tmpl: "{{end}}", flag: true, want: "commit.tmpl: --commit-template: for GitStateStore default: commit:1: unexpected {{end}}"},
		{name: "author", tmpl: "ok", extra: "    authorAnnotation: example.com/ticket\n", want: `object.yaml: annotation example.com/ticket (spec.commit.authorAnnotation of GitStateStore default): "OPS-42" is not an author as "Name <email>"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.file("platform/destinations.yaml", dest("dev", nil))
			var extra []string
			if tc.flag {
				extra = []string{"--commit-template", w.file("commit.tmpl", tc.tmpl)}
			} else {
				w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+commitSpec(tc.tmpl, tc.extra))
			}
			wf := w.workflow("r1").setObject(requestObject).setOutput(map[string]string{"db.yaml": obj("ConfigMap")})
			r := wf.mustRun(2, resourceEnv("pg", "team", "r1", "configure"), extra...)
			if !strings.Contains(r.errout, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, r)
			}
			if branchTip(t, w.repo) != "" {
				t.Error("something was written")
			}
		})
	}
}

// TestCommitTemplateFailingOnRealCounts: a template that fails only on the
// counts of the real write is bad input. When a count being non-zero takes
// the branch that fails, it is caught before anything is written anywhere
// (a second store, with no template, is not written either); when only the
// exact counts do, the write classifies it as bad input, and its store
// writes nothing.
func TestCommitTemplateFailingOnRealCounts(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, want string
		atWrite          bool
	}{
		{name: "a branch taken when something is added", tmpl: "x{{if .Added}}{{.Workflow.Nmae}}{{end}}", want: "can't evaluate field Nmae"},
		{name: "a branch taken when a destination deletes", tmpl: "x{{range .Destinations}}{{if .Deleted}}{{.Nope}}{{end}}{{end}}", want: "can't evaluate field Nope"},
		{name: "a branch taken when more than one file is added", tmpl: "x{{if gt .Added 1}}{{.Workflow.Nmae}}{{end}}", want: "can't evaluate field Nmae", atWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			other := filepath.Join(w.root, "other.git")
			w.file("platform/other.yaml", gitStore("other", "file://"+other))
			w.file("platform/destinations.yaml", docs(dest("dev", nil), dest("prod", nil, "store=other")))
			wf := w.workflow("pg").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
			env := promiseEnv("pg", "install")
			if strings.Contains(tc.tmpl, "Deleted") {
				wf.mustRun(0, env) // something to delete
			}
			tip, otherTip := branchTip(t, w.repo), branchTip(t, other)
			w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+commitSpec(tc.tmpl, ""))
			wf.setOutput(map[string]string{"b.yaml": objNamed("ConfigMap", "b"), "c.yaml": objNamed("ConfigMap", "c")})
			r := wf.run(env)
			if r.code != 2 || !strings.Contains(r.errout, "GitStateStore default: spec.commit.template") || !strings.Contains(r.errout, tc.want) {
				t.Errorf("want exit 2 naming spec.commit.template and %q, got %s", tc.want, r)
			}
			if got := branchTip(t, w.repo); got != tip {
				t.Errorf("the store was written: main moved from %q to %q", tip, got)
			}
			if got := branchTip(t, other); got != otherTip && !tc.atWrite {
				t.Errorf("the other store was written: main moved from %q to %q", otherTip, got)
			}
		})
	}
}

// TestCommitTemplateFlagReadsOnlyARegularFile: --commit-template naming a
// named pipe does not wait for a writer, /dev/zero does not fill memory,
// and a file over the size bound is refused: exit 2, naming the flag and
// the file, nothing written.
func TestCommitTemplateFlagReadsOnlyARegularFile(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	wf := w.workflow("r1").setObject(requestObject).setOutput(map[string]string{"db.yaml": obj("ConfigMap")})
	fifo := filepath.Join(w.root, "commit.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"fifo", fifo, "is not a regular file"},
		{"dev-zero", "/dev/zero", "is not a regular file"},
		{"folder", w.root, "is not a regular file"},
		{"too-large", w.file("big.tmpl", "x"+strings.Repeat(" ", 64<<10)), "is larger than 64 KiB, the limit for a commit message template"},
		{"missing", filepath.Join(w.root, "missing.tmpl"), "cannot be read: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan result, 1)
			go func() { done <- wf.run(resourceEnv("pg", "team", "r1", "configure"), "--commit-template", tc.file) }()
			select {
			case r := <-done:
				if want := "--commit-template " + tc.file + ": " + tc.want; r.code != 2 || !strings.Contains(r.errout, want) {
					t.Errorf("want exit 2 with %q, got %s", want, r)
				}
			case <-time.After(time.Minute):
				t.Fatalf("render still waits after a minute")
			}
			if branchTip(t, w.repo) != "" {
				t.Fatalf("something was written")
			}
		})
	}
}
