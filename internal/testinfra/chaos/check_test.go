package chaos

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// localWorld is a trial's world on a local bare repository (file://), so
// that the checker can be tested without servers.
func localWorld(t *testing.T, sched Schedule) *world {
	t.Helper()
	dir := t.TempDir()
	repo := filepath.Join(dir, "state.git")
	w := &world{dir: dir, bin: testenv.RenderBinary(t), sched: sched, store: target{
		kind: "GitStateStore",
		docs: GitStoreDocs("chaos", "file://"+repo, storePath, ""),
		read: func(context.Context, []string) (*State, error) { return readLocalGit(repo, storePath) },
	}}
	if err := w.platform("platform", false); err != nil {
		t.Fatal(err)
	}
	return w
}

// The checker finds each kind of violation in a store two renders wrote,
// changed by hand, and finds none in the store as they left it.
func TestCheck(t *testing.T) {
	sched := Schedule{Seed: 7, Workloads: []Workload{{Name: "w0", Resource: true, Setup: true}, {Name: "w1", Setup: true}}}
	w := localWorld(t, sched)
	clock := time.Now()
	var runs []*run
	for i, wl := range sched.Workloads {
		r := &run{label: "setup " + wl.Name, key: "setup-" + wl.Name, kind: Configure, workload: i, files: setupFiles, pad: setupPad, deadline: time.Minute}
		if err := w.exec(clock, r, "platform"); err != nil || r.code != 0 {
			t.Fatalf("%s: %v\n%s%s", r.label, err, r.stdout, r.stderr)
		}
		runs = append(runs, r)
	}
	later := &run{label: "op 0", key: "op-0", kind: Configure, workload: 1, files: []string{"c"}, pad: 1, deadline: time.Minute}
	if err := w.exec(clock, later, "platform"); err != nil || later.code != 0 {
		t.Fatalf("%s: %v\n%s%s", later.label, err, later.stdout, later.stderr)
	}
	runs = append(runs, later)
	st, err := w.store.read(context.Background(), dests)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Files["d4/aggregated.yaml"]; !ok {
		t.Fatalf("no aggregated file: %v", sortedKeys(st.Files))
	}
	if v := check(sched, runs, st); len(v) > 0 {
		t.Fatalf("violations in the store as render left it:\n%s", strings.Join(v, "\n"))
	}
	w0a := filePath(sched.Workloads[0], "d1", "a")
	if _, ok := st.Files[w0a]; !ok {
		w0a = ""
		for p := range st.Files {
			if strings.HasSuffix(p, "/w0-a.yaml") {
				w0a = p
			}
		}
	}
	w1 := statestore.WorkloadKey("promise", "w1", "", "", "configure")
	cases := []struct {
		name   string
		change func(st *State, runs []*run) []*run
		want   string
	}{
		{"a file a record lists is missing", func(st *State, runs []*run) []*run { delete(st.Files, w0a); return runs }, "rule 3: the record of resource/team/db/w0/configure lists " + w0a},
		{"a file of no workload", func(st *State, runs []*run) []*run {
			st.Files["d2/resources/team/db/w9/configure/5058f/x.yaml"] = []byte("x")
			return runs
		}, "rule 3: d2/resources/team/db/w9/configure/5058f/x.yaml belongs to no workload"},
		{"outside the store's path", func(st *State, runs []*run) []*run { st.Files["../README"] = []byte("x"); return runs }, "rule 3: README is outside the store's path"},
		{"a mix of two renders", func(st *State, runs []*run) []*run {
			st.Files[w0a] = []byte(document("w0", "a", "op-0", setupPad))
			return runs
		}, "rule 2: w0 is a mix of renders op-0, setup-w0"},
		{"not exactly the render's files", func(st *State, runs []*run) []*run {
			st.Files[w0a] = []byte(document("w0", "a", "setup-w0", setupPad+1))
			return runs
		}, "rule 2: w0 in "},
		{"a landed render lost", func(_ *State, runs []*run) []*run {
			runs[0].end = time.Minute
			return append(runs, &run{label: "op 9", key: "op-9", kind: Configure, workload: 0, start: time.Hour, end: 2 * time.Hour})
		}, "rule 1: w0 holds the output of setup w0, but op 9 landed after setup w0 ended"},
		{"the output of a render that said nothing was written", func(_ *State, runs []*run) []*run { runs[2].outcome = Nothing; return runs }, "rule 5: w1 holds the files of op 0, which said nothing was written"},
		{"a request left behind", func(st *State, runs []*run) []*run {
			st.Leftovers = []Leftover{{Name: "refs/render/pending/x/y"}}
			return runs
		}, "rule 4: left behind, though every render landed: refs/render/pending/x/y"},
		{"an aggregated file that is not its parts", func(st *State, runs []*run) []*run {
			st.Files["d4/aggregated.yaml"] = append(st.Files["d4/aggregated.yaml"], "\n---\n"+document("w9", "a", "x", 0)...)
			return runs
		}, "rule 2: d4/aggregated.yaml does not hold exactly the documents of its parts"},
		{"a destination Flux cannot build", func(st *State, runs []*run) []*run {
			st.Files["d2/dependencies/w1/configure/5058f/w1-c.yaml"] = []byte("kind: [\n")
			return runs
		}, "rule 6: d2 does not build as Flux builds it"},
		{"a record of a workload no render writes", func(st *State, runs []*run) []*run {
			p := statestore.RecordPath(w1)
			st.Files[strings.Replace(p, "w1", "w5", 1)] = []byte(strings.ReplaceAll(string(st.Files[p]), "promise/w1/", "promise/w5/"))
			return runs
		}, "rule 3: a record of promise/w5/configure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := &State{Files: maps.Clone(st.Files), Read: time.Now()}
			rs := make([]*run, len(runs))
			for i, r := range runs {
				x := *r
				rs[i] = &x
			}
			v := check(sched, c.change(cp, rs), cp)
			for _, s := range v {
				if strings.HasPrefix(s, c.want) {
					return
				}
			}
			t.Fatalf("want a violation starting %q, got:\n%s", c.want, strings.Join(v, "\n"))
		})
	}
}
