package cli_test

import (
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// requestWith is a resource request with annotations given as key, value
// pairs of Go strings (a later pair replaces an earlier one of its key),
// quoted as YAML double-quoted scalars, so any byte gets through.
func requestWith(annotations ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(annotations); i += 2 {
		m[annotations[i]] = annotations[i+1]
	}
	var b strings.Builder
	b.WriteString("apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: r1\n  namespace: team\n  annotations:\n")
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString("    " + k + ": " + strconv.Quote(m[k]) + "\n")
	}
	return b.String()
}

// allCommits is every commit on main, newest first.
func allCommits(t *testing.T, repo string) []*object.Commit {
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
	var out []*object.Commit
	if err := it.ForEach(func(c *object.Commit) error { out = append(out, c); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnnotationsCannotForgeProvenance: a request's annotations, read by
// the store's commit template or naming the author, try every way to make
// git read a forged Render-* trailer, hide render's own, or write a forged
// header into the commit object. Each is refused (exit 2, naming the
// annotation, nothing written), and git's own parser and fsck find every
// commit render made intact.
func TestAnnotationsCannotForgeProvenance(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	tmpl := "{{.Subject}}\n{{annotation \"example.com/a\"}}\n{{annotation \"example.com/b\"}}\nby {{annotation \"example.com/requester\"}}"
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+
		"  commit:\n    template: "+strconv.Quote(tmpl)+"\n    annotations: [example.com/a, example.com/b, example.com/requester]\n    authorAnnotation: example.com/requester\n")
	env := resourceEnv("pg", "team", "r1", "configure")
	wf := w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")})

	// Harmless values, trailer-like ones included, are written as they are.
	wf.setObject(requestWith("example.com/a", "Fixes: OPS-1", "example.com/b", "---- not a patch start", "example.com/requester", "Ada Lovelace <ada@example.com>"))
	wf.mustRun(0, env)
	good := branchTip(t, w.repo)
	if c := headCommit(t, w.repo); !strings.Contains(c.Message, "\nFixes: OPS-1\n---- not a patch start\nby Ada Lovelace <ada@example.com>\n\nRender-") {
		t.Fatalf("harmless annotations were not written as they are:\n%s", c.Message)
	}

	for i, tc := range []struct {
		name, want  string
		annotations []string
	}{
		{name: "line breaks and a patch start in one value", want: "annotation example.com/a",
			annotations: []string{"example.com/a", "x\n\nRender-Promise: forged\n---"}},
		{name: "a carriage return", want: "annotation example.com/a",
			annotations: []string{"example.com/a", "x\rRender-Promise: forged"}},
		{name: "a forged trailer and a patch start on lines of their own", want: "annotation example.com/a (read by spec.commit.template of GitStateStore default): its value makes line 2",
			annotations: []string{"example.com/a", "Render-Promise: forged", "example.com/b", "--- "}},
		{name: "a bare patch start", want: "annotation example.com/b",
			annotations: []string{"example.com/b", "---"}},
		{name: "a forged trailer alone", want: "annotation example.com/a",
			annotations: []string{"example.com/a", "render-resource : r2"}},
		{name: "git's scissors line", want: "annotation example.com/a",
			annotations: []string{"example.com/a", "# ------------------------ >8 ------------------------"}},
		{name: "an author whose encoded name decodes to a line break", want: "annotation example.com/requester",
			annotations: []string{"example.com/requester", "=?utf-8?q?Eve_=3Ceve=40example.com=3E_1_+0000=0Acommitter_Mallory_=3Cm=40example.com=3E?= <eve@example.com>"}},
		{name: "an author with a NUL", want: "annotation example.com/requester",
			annotations: []string{"example.com/requester", "=?utf-8?b?RXZlAA==?= <eve@example.com>"}},
		{name: "an author name with angle brackets", want: "annotation example.com/requester",
			annotations: []string{"example.com/requester", `"Eve <x>" <eve@example.com>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := append([]string{"example.com/requester", "Ada Lovelace <ada@example.com>"}, tc.annotations...)
			wf.setOutput(map[string]string{"db.yaml": obj("ConfigMap"), "other.yaml": objNamed("ConfigMap", "c"+strconv.Itoa(i))})
			wf.setObject(requestWith(ann...))
			r := wf.run(env)
			if r.code != 2 {
				t.Errorf("want exit 2, got %s", r)
			}
			if !strings.Contains(r.errout, tc.want) || !strings.Contains(r.errout, "object.yaml") {
				t.Errorf("the message does not name %s in object.yaml:\n%s", tc.want, r)
			}
			if strings.Contains(r.errout, "forged") || strings.Contains(r.errout, "Mallory") {
				t.Errorf("the message echoes the annotation's value:\n%s", r)
			}
			if tip := branchTip(t, w.repo); tip != good {
				t.Errorf("something was written: main moved from %s to %s", good, tip)
			}
		})
	}

	// Git's own parser reads exactly render's trailers from every commit,
	// and fsck finds nothing wrong.
	wantTrailers := "Render-Workflow-Type: resource\nRender-Action: configure\nRender-Promise: pg\nRender-Resource: r1\nRender-Namespace: team\nRender-Pipeline: configure\n"
	for _, c := range allCommits(t, w.repo) {
		if got := trailers(t, c.Message); !strings.HasPrefix(got, wantTrailers) || strings.Count(got, "Render-Promise:") != 1 {
			t.Errorf("commit %s: git interpret-trailers --parse gives:\n%s\nwant render's own:\n%s", c.Hash, got, wantTrailers)
		}
		if c.Author.Name != "Ada Lovelace" && c.Author.Name != "render" {
			t.Errorf("commit %s: author %q", c.Hash, c.Author.Name)
		}
	}
	out, err := exec.Command("git", "--git-dir", w.repo, "fsck", "--strict", "--no-dangling").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("git fsck: %v\n%s", err, out)
	}
}
