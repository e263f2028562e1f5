package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The trust boundary (docs/design.md, "Trust boundary"): what render reads
// from its inputs and its stores can never make it delete, overwrite or
// take over what another workload owns, and what it cannot resolve by
// reading again is said at once, with what is in the way.

// foreignCommit changes the branch main of the bare repository repo as
// another tool (or a person) would: a commit made with git itself, which
// writes files (a "/" at the end of a path's content is not special) and
// removes paths (files or whole folders).
func foreignCommit(t *testing.T, repo string, write map[string]string, remove ...string) {
	t.Helper()
	work := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=someone", "GIT_AUTHOR_EMAIL=someone@example.com", "GIT_COMMITTER_NAME=someone", "GIT_COMMITTER_EMAIL=someone@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("clone", "--quiet", "--branch", "main", repo, ".")
	for _, p := range remove {
		git("rm", "-r", "--quiet", p)
	}
	for p, c := range write {
		writeFile(t, filepath.Join(work, p), c)
	}
	git("add", "-A")
	git("commit", "--quiet", "-m", "by hand")
	git("push", "--quiet", "origin", "main")
}

func cm(name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\n"
}

// oneLine checks that a refused render printed one line in all (stderr),
// nothing on stdout, and that the line holds every part of want.
func oneLine(t *testing.T, r result, want ...string) {
	t.Helper()
	if r.out != "" || strings.Count(strings.TrimSuffix(r.errout, "\n"), "\n") != 0 {
		t.Errorf("want one line on stderr and nothing on stdout, got %s", r)
	}
	for _, w := range want {
		if !strings.Contains(r.errout, w) {
			t.Errorf("the message does not say %q:\n%s", w, r)
		}
	}
}

// trustWorld has a none destination "flat" (label mode: flat) and a
// nestedByMetadata one "dev" (mode: nested), with workload B's
// flat/cm.yaml and promise postgres's dev/dependencies/postgres/p/5058f/cm.yaml
// written by render.
func trustWorld(t *testing.T) *world {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("flat", map[string]string{"mode": "flat"}, "filepath: {mode: none}"),
		dest("dev", map[string]string{"mode": "nested"}),
	))
	w.workflow("b").setOutput(map[string]string{"cm.yaml": cm("b")}).setSelectors("- matchLabels: {mode: flat}\n").
		mustRun(0, resourceEnv("pg", "ns", "b", "instance"))
	w.workflow("postgres").setOutput(map[string]string{"cm.yaml": cm("postgres")}).setSelectors("- matchLabels: {mode: nested}\n").
		mustRun(0, promiseEnv("postgres", "p"))
	tree := repoTree(t, w.repo)
	for _, p := range []string{bFile, postgresFile} {
		if _, ok := tree[p]; !ok {
			t.Fatalf("%s was not written: %v", p, keysOf(tree))
		}
	}
	return w
}

const (
	bFile        = "clusters/flat/cm.yaml"
	postgresFile = "clusters/dev/dependencies/postgres/p/5058f/cm.yaml"
)

// A workflow's output may not hold Kratix's ledgers or render's records:
// a .kratix ledger written into a none destination would be taken, on
// the first render of the workload it names, as Kratix's word on what
// that workload owns (fails on main before this change: written, exit 0).
func TestOutputMayNotHoldLedgersOrRecords(t *testing.T) {
	w := trustWorld(t)
	tip := branchTip(t, w.repo)
	for _, file := range []string{
		".kratix/kratix-platform-system-redis-p-abcde.flat-5058f.yaml",
		".kratix/notes.txt",
		".render/workloads/promise/postgres/p.json",
	} {
		t.Run(file, func(t *testing.T) {
			wf := w.workflow("evil").setOutput(map[string]string{
				file:     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ledger, namespace: ns}\nfiles:\n- flat/cm.yaml\n",
				"r.yaml": cm("r"),
			}).setSelectors("- matchLabels: {mode: flat}\n")
			r := wf.run(promiseEnv("evil", "p"))
			if r.code != 2 {
				t.Fatalf("want exit 2, got %s", r)
			}
			oneLine(t, r, file, "reserved", "nothing was written")
			if branchTip(t, w.repo) != tip {
				t.Errorf("the refused render wrote")
			}
		})
	}
}

// A Kratix ledger in the store that lists files render's records give to
// other workloads never makes render delete them: it is evidence about
// the workload it names, in its own destination, and only for files no
// other workload's record owns. What Kratix wrote for the workload is
// still taken over (fails on main before this change: the first render
// of redis deleted B's and postgres's files).
func TestForeignLedgerNeverDeletesAnotherWorkloadsFiles(t *testing.T) {
	w := trustWorld(t)
	ledger := "clusters/flat/.kratix/kratix-platform-system-redis-p-abcde.flat-5058f.yaml"
	foreignCommit(t, w.repo, map[string]string{
		ledger:                         "files:\n- flat/cm.yaml\n- dev/dependencies/postgres/p/5058f/cm.yaml\n- flat/old-redis.yaml\n- .render/workloads/resource/ns/pg/b/instance.json\n",
		"clusters/flat/old-redis.yaml": cm("old-redis"),
	})
	r := w.workflow("redis").setOutput(map[string]string{"r.yaml": cm("r")}).setSelectors("- matchLabels: {mode: flat}\n").
		mustRun(0, promiseEnv("redis", "p"))
	tree := repoTree(t, w.repo)
	for _, p := range []string{bFile, postgresFile, "clusters/.render/workloads/resource/ns/pg/b/instance.json"} {
		if _, ok := tree[p]; !ok {
			t.Errorf("%s was deleted by another workload's render:\n%s", p, r)
		}
	}
	for _, p := range []string{"clusters/flat/old-redis.yaml", ledger} {
		if _, ok := tree[p]; ok {
			t.Errorf("%s, which Kratix wrote for redis, was not taken over:\n%s", p, r)
		}
	}
	if _, ok := tree["clusters/flat/r.yaml"]; !ok {
		t.Errorf("redis's file was not written:\n%s", r)
	}
}

// No store's path, and no destination's path, may lie inside the folder
// where another store of the same repository and branch keeps render's
// records (fails on main before this change: accepted, and the
// destination's files overwrote the records).
func TestStoreInsideAnotherStoresRecordsIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, store, dest string
		want              []string
	}{
		{"a store's path", "path: clusters/.render/workloads/promise", "inner",
			[]string{"GitStateStore/inner", "GitStateStore/default", `"clusters/.render"`, `"clusters/.render/workloads/promise/inner"`}},
		{"a destination's path", "path: /", "clusters/.render/placed/dev",
			[]string{"GitStateStore/inner", "GitStateStore/default", `"clusters/.render"`, `"clusters/.render/placed/dev"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.file("platform/inner.yaml", strings.Replace(gitStore("inner", "file://"+w.repo), "path: clusters", c.store, 1))
			w.file("platform/destinations.yaml", docs(
				dest("dev", map[string]string{"env": "dev"}),
				dest("inner", map[string]string{"env": "dev"}, "store=inner", "path: "+c.dest),
			))
			r := w.workflow("postgres").setOutput(map[string]string{"p.json": `{"workload": "promise/postgres/p", "files": []}`}).
				mustRun(2, promiseEnv("postgres", "p"))
			oneLine(t, r, append(c.want, "destinations.yaml", "Destination inner")...)
			if tip := branchTip(t, w.repo); tip != "" {
				t.Errorf("the refused render wrote %s", tip)
			}
		})
	}
}

// Where the planner needs a folder and the store has a file, or needs a
// file and the store has a folder, reading again cannot help: render says
// at once what is in the way and whose it is, exit 2 when the workflow's
// file names can fix it (another workload has the path), 1 when the
// store is damaged (fails on main before this change: exit 1 after the
// whole retry deadline, "other writers kept changing the store").
func TestFileWhereAFolderIsNeededIsSaidAtOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		// setup changes the store; wf is the render then run.
		setup func(t *testing.T, w *world)
		wf    func(w *world) (*workflow, map[string]string)
		code  int
		want  []string
	}{
		{"render's placement index turned into a file", func(t *testing.T, w *world) {
			foreignCommit(t, w.repo, map[string]string{"clusters/.render/placed/dev": "x\n"}, "clusters/.render/placed/dev")
		}, func(w *world) (*workflow, map[string]string) {
			return w.workflow("c").setOutput(map[string]string{"c.yaml": cm("c")}).setSelectors("- matchLabels: {mode: nested}\n"),
				resourceEnv("pg", "ns", "c", "instance")
		}, 1, []string{".render/placed/dev", "is a file", "damaged"}},
		{"a workload's folder turned into a file", func(t *testing.T, w *world) {
			foreignCommit(t, w.repo, map[string]string{"clusters/dev/dependencies/postgres": "x\n"}, "clusters/dev/dependencies/postgres")
		}, func(w *world) (*workflow, map[string]string) {
			return w.workflow("postgres").setOutput(map[string]string{"cm.yaml": cm("postgres2")}), promiseEnv("postgres", "p")
		}, 1, []string{"dev/dependencies/postgres", "is a file", "no workload"}},
		{"a folder where another workload has a file", func(t *testing.T, w *world) {}, func(w *world) (*workflow, map[string]string) {
			return w.workflow("d").setOutput(map[string]string{"cm.yaml/x.yaml": cm("d")}).setSelectors("- matchLabels: {mode: flat}\n"),
				resourceEnv("pg", "ns", "d", "instance")
		}, 2, []string{"flat/cm.yaml/x.yaml", "flat/cm.yaml", "resource/ns/pg/b/instance", "nothing was written"}},
		{"a file where another workload has a folder", func(t *testing.T, w *world) {
			w.workflow("b").setOutput(map[string]string{"cm.yaml": cm("b"), "sub/x.yaml": cm("bx")}).
				mustRun(0, resourceEnv("pg", "ns", "b", "instance"))
		}, func(w *world) (*workflow, map[string]string) {
			return w.workflow("d").setOutput(map[string]string{"sub": "plain text\n"}).setSelectors("- matchLabels: {mode: flat}\n"),
				resourceEnv("pg", "ns", "d", "instance")
		}, 2, []string{"flat/sub", "folder", "resource/ns/pg/b/instance", "nothing was written"}},
		{"a file another workload has", func(t *testing.T, w *world) {}, func(w *world) (*workflow, map[string]string) {
			return w.workflow("d").setOutput(map[string]string{"cm.yaml": cm("d")}).setSelectors("- matchLabels: {mode: flat}\n"),
				resourceEnv("pg", "ns", "d", "instance")
		}, 2, []string{"flat/cm.yaml", "resource/ns/pg/b/instance", "nothing was written"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := trustWorld(t)
			c.setup(t, w)
			before := repoTree(t, w.repo)
			tip := branchTip(t, w.repo)
			wf, env := c.wf(w)
			r := wf.run(env, "--retry-deadline", "20s")
			if r.code != c.code {
				t.Fatalf("want exit %d, got %s", c.code, r)
			}
			if strings.Contains(r.errout, "kept changing") || strings.Contains(r.errout, "gave up") {
				t.Errorf("a conflict re-reading cannot resolve was taken for a race:\n%s", r)
			}
			if c.code == 2 {
				oneLine(t, r, c.want...)
			} else {
				for _, s := range c.want {
					if !strings.Contains(r.errout, s) {
						t.Errorf("the message does not say %q:\n%s", s, r)
					}
				}
			}
			if branchTip(t, w.repo) != tip || len(repoTree(t, w.repo)) != len(before) {
				t.Errorf("the refused render wrote")
			}
		})
	}
}

// A file:// URL to a repository with a work tree is refused, as git push
// refuses to move a checked-out branch: render would move the branch under
// the work tree, which would then show render's whole change as undone
// (fails on main before this change: exit 0, the branch moved).
func TestNonBareLocalRepositoryIsRefused(t *testing.T) {
	w := newWorld(t)
	clone := filepath.Join(w.root, "clone")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	writeFile(t, filepath.Join(clone, "README"), "hello\n")
	git("init", "--quiet", "--initial-branch=main")
	git("add", "-A")
	git("commit", "--quiet", "-m", "first")
	head := git("rev-parse", "HEAD")
	w.file("platform/store.yaml", gitStore("default", "file://"+clone))
	w.file("platform/destinations.yaml", dest("dev", nil))
	r := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("X")}).run(resourceEnv("p", "ns", "r", "pipe"))
	if r.code != 1 && r.code != 2 {
		t.Fatalf("want exit 1 or 2, got %s", r)
	}
	if !strings.Contains(r.errout, clone) || !strings.Contains(r.errout, "work tree") || !strings.Contains(r.errout, "bare") {
		t.Errorf("the message does not say the repository has a work tree and what to do:\n%s", r)
	}
	if got := git("rev-parse", "HEAD"); got != head {
		t.Errorf("the branch moved: %s -> %s", head, got)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Errorf("the work tree changed:\n%s", st)
	}
}

// A branch whose ref file exists but is empty (a torn write) is damage:
// exit 1 naming the ref, nothing written. (A repository without the
// branch at all still gets it created: TestMissingBranchIsCreated.)
// Fails on main before this change: a new root commit holding only the
// render's workload replaced the branch's history.
func TestTornBranchRefIsDamage(t *testing.T) {
	w := trustWorld(t)
	ref := filepath.Join(w.repo, "refs", "heads", "main")
	if _, err := os.Stat(ref); err != nil {
		t.Fatalf("the branch is not a loose ref: %v", err)
	}
	if err := os.WriteFile(ref, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := w.workflow("c").setOutput(map[string]string{"c.yaml": cm("c")}).setSelectors("- matchLabels: {mode: nested}\n").
		run(resourceEnv("pg", "ns", "c", "instance"))
	if r.code != 1 {
		t.Fatalf("want exit 1, got %s", r)
	}
	if !strings.Contains(r.errout, "refs/heads/main") {
		t.Errorf("the message does not name the ref:\n%s", r)
	}
	if data, err := os.ReadFile(ref); err != nil || len(data) != 0 {
		t.Errorf("the ref was written: %q, %v", data, err)
	}
}
