package planner

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// A Kratix ledger is evidence about the workload it names, in its own
// destination, and only when render did not write it: the files it lists
// that another workload's record owns, that lie outside its destination
// or in render's own folder stay; a ledger a workload's record owns (a
// workflow wrote it) takes nothing over. Fails on main before this change
// (every listed file was deleted).
func TestLedgerIsEvidenceAboutItsWorkloadOnly(t *testing.T) {
	const redis = "promise/redis/p"
	m := memSnap{}
	// Workload b (render's) has flat/cm.yaml; postgres has a file in
	// another destination.
	if _, err := m.apply(t, upd("resource/ns/pg/b/instance", map[string]string{"flat/cm.yaml": "b\n"})); err != nil {
		t.Fatal(err)
	}
	if _, err := m.apply(t, upd("promise/postgres/p", map[string]string{"dev/dependencies/postgres/p/5058f/cm.yaml": "pg\n"})); err != nil {
		t.Fatal(err)
	}
	// What Kratix wrote for redis, and a ledger listing more than that.
	m["flat/old.yaml"] = []byte("old\n")
	m["dev/stray.yaml"] = []byte("stray\n")
	ledger := "flat/.kratix/kratix-platform-system-redis-p-abcde.flat-5058f.yaml"
	m[ledger] = []byte("files:\n- flat/cm.yaml\n- /flat/old.yaml\n- dev/dependencies/postgres/p/5058f/cm.yaml\n- dev/stray.yaml\n" +
		"- .render/workloads/promise/postgres/p.json\n- flat/.kratix/other.yaml\n- flat/../dev/stray.yaml\n")
	m["flat/.kratix/other.yaml"] = []byte("files: []\n")
	// A ledger of redis that a workflow's output put there: render wrote it.
	written := "flat/.kratix/kratix-platform-system-redis-p-zzzzz.flat-5058f.yaml"
	m["flat/smuggled.yaml"] = []byte("x\n")
	if _, err := m.apply(t, upd("promise/evil/p", map[string]string{written: "files:\n- flat/smuggled.yaml\n"})); err != nil {
		t.Fatal(err)
	}
	u := upd(redis, map[string]string{"flat/r.yaml": "r\n"})
	u.Adopt = &statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Namespace: "kratix-platform-system", Work: "redis-p", Destination: "flat"}}}
	plan, err := m.apply(t, u)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(plan.Diff.Deleted)
	if want := []string{"flat/.kratix/kratix-platform-system-redis-p-abcde.flat-5058f.yaml", "flat/old.yaml"}; !reflect.DeepEqual(plan.Diff.Deleted, want) {
		t.Errorf("deleted %v, want only what Kratix wrote for redis there: %v", plan.Diff.Deleted, want)
	}
	for _, p := range []string{"flat/cm.yaml", "dev/dependencies/postgres/p/5058f/cm.yaml", "dev/stray.yaml", "flat/.kratix/other.yaml", written, "flat/smuggled.yaml", statestore.RecordPath("promise/postgres/p")} {
		if _, ok := m[p]; !ok {
			t.Errorf("%s was deleted", p)
		}
	}
}

// An Adoption names only the workload's own Kratix folders and ledgers:
// one read from the store (a git request) that names another workload's
// folder, a whole destination or render's own folder is refused before
// anything is planned (fails on main before this change: a request of
// promise evil adopting postgres's folder deleted postgres's files).
func TestAdoptionNamesOnlyTheWorkloadsOwn(t *testing.T) {
	ok := []struct {
		workload string
		a        statestore.Adoption
	}{
		{"promise/pg/install", statestore.Adoption{Folders: []string{"dev/dependencies/pg/install", "eu/west/dependencies/pg/install"}}},
		{"promise/pg/.static-dependencies", statestore.Adoption{Folders: []string{"dev/dependencies/pg/5058f"}}},
		{"resource/ns/pg/db/instance", statestore.Adoption{Folders: []string{"dev/resources/ns/pg/db/instance", "dev/resources/platform/pg/db/instance"},
			Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Namespace: "ns", Work: "pg-db-instance", Destination: "flat"},
				{Dir: "flat/.kratix", Namespace: "platform", Work: "pg-db-ns-instance", Destination: "flat"}}}},
		{"promise/pg/install", statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "a/b/.kratix", Namespace: "kratix-platform-system", Work: "pg-install", Destination: "b"}}}},
	}
	for _, c := range ok {
		if err := bookkeeping.CheckAdoption(&c.a, c.workload); err != nil {
			t.Errorf("%s: %+v refused: %v", c.workload, c.a, err)
		}
	}
	bad := []struct {
		workload string
		a        statestore.Adoption
	}{
		{"promise/evil/x", statestore.Adoption{Folders: []string{"dev/dependencies/postgres/p"}}},
		{"promise/evil/x", statestore.Adoption{Folders: []string{"dev"}}},
		{"promise/evil/x", statestore.Adoption{Folders: []string{"dependencies/evil/x"}}},
		{"promise/evil/x", statestore.Adoption{Folders: []string{".render/dependencies/evil/x"}}},
		{"promise/evil/x", statestore.Adoption{Folders: []string{"dev/../dependencies/evil/x"}}},
		{"promise/evil/x", statestore.Adoption{Folders: []string{"dev/resources/ns/evil/x/x"}}},
		{"resource/ns/pg/db/instance", statestore.Adoption{Folders: []string{"dev/resources/ns/pg/other/instance"}}},
		{"promise/evil/x", statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Namespace: "kratix-platform-system", Work: "postgres-p", Destination: "flat"}}}},
		{"promise/evil/x", statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat", Namespace: "kratix-platform-system", Work: "evil-x", Destination: "flat"}}}},
		{"promise/evil/x", statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: ".kratix", Namespace: "kratix-platform-system", Work: "evil-x", Destination: "flat"}}}},
		{"promise/evil/x", statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Work: "evil-x", Destination: "flat"}}}},
		{"evil", statestore.Adoption{}},
	}
	for _, c := range bad {
		if err := bookkeeping.CheckAdoption(&c.a, c.workload); err == nil {
			t.Errorf("%s: %+v accepted", c.workload, c.a)
		}
	}

	// The planner refuses such an update whole.
	m := memSnap{}
	if _, err := m.apply(t, upd("promise/postgres/p", map[string]string{"dev/dependencies/postgres/p/5058f/cm.yaml": "pg\n"})); err != nil {
		t.Fatal(err)
	}
	u := upd("promise/evil/x", map[string]string{"dev/dependencies/evil/x/5058f/e.yaml": "e\n"})
	u.Adopt = &statestore.Adoption{Folders: []string{"dev/dependencies/postgres/p"}}
	if _, err := m.apply(t, u); err == nil || !strings.Contains(err.Error(), "dev/dependencies/postgres/p") || errors.Is(err, statestore.ErrConflict) {
		t.Errorf("an adoption of another workload's folder: %v", err)
	}
	if _, ok := m["dev/dependencies/postgres/p/5058f/cm.yaml"]; !ok {
		t.Error("postgres's file was deleted")
	}
}
