package storetest

import (
	"errors"
	"testing"

	"github.com/render-dev/render/statestore"
)

// Foreign state: what another tool, a person or a hostile writer left in
// the store is evidence, never an order (see "Trust boundary" in
// docs/design.md). A Kratix ledger naming other workloads' files, a request
// handed over to take over another workload's folders, and a file where
// the plan needs a folder never make a store delete or overwrite what
// another workload owns, and what reading again cannot resolve is said at
// once.

func init() {
	Cases = append(Cases,
		Case{"ForeignLedger", testForeignLedger},
		Case{"ForeignRequest", testForeignRequest},
		Case{"FileWhereAFolderIsNeeded", testFileWhereAFolderIsNeeded},
	)
}

const (
	foreignB        = "resource/ns/pg/b/instance"
	foreignPostgres = "promise/postgres/p"
	foreignBFile    = "flat/cm.yaml"
	foreignPgFile   = "dev/dependencies/postgres/p/5058f/cm.yaml"
)

// foreignStore is a store holding workload b's flat/cm.yaml (a none
// destination) and postgres's file in the nested destination dev.
func foreignStore(t *testing.T, h Harness) (func() statestore.Store, map[string]string) {
	open := h.Fresh(t)
	s := open()
	defer s.Close()
	apply(t, s, update(foreignB, map[string]string{foreignBFile: "b\n"}))
	apply(t, s, update(foreignPostgres, map[string]string{foreignPgFile: "pg\n"}))
	return open, map[string]string{foreignBFile: "b\n", foreignPgFile: "pg\n"}
}

// plant leaves files no workload owns, as another tool would: shared
// files of an update are written where absent and owned by nobody.
func plant(t *testing.T, s statestore.Store, files map[string]string) {
	t.Helper()
	u := statestore.Update{Workload: "promise/planter/x", Shared: map[string][]byte{}, Message: statestore.Message{Subject: "test: plant"}}
	for p, c := range files {
		u.Shared[p] = []byte(c)
	}
	apply(t, s, u)
}

// A Kratix ledger is evidence about the workload it names, in its own
// destination, for files no other workload's record owns: adopting it
// takes over what Kratix wrote for the workload and nothing else.
func testForeignLedger(t *testing.T, h Harness) {
	open, want := foreignStore(t, h)
	s := open()
	defer s.Close()
	ledger := "flat/.kratix/kratix-platform-system-redis-p-abcde.flat-5058f.yaml"
	plant(t, s, map[string]string{
		ledger:          "files:\n- " + foreignBFile + "\n- " + foreignPgFile + "\n- flat/old.yaml\n- .render/workloads/" + foreignB + ".json\n",
		"flat/old.yaml": "old\n",
	})
	u := update("promise/redis/p", map[string]string{"flat/r.yaml": "r\n"})
	u.Adopt = &statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Namespace: "kratix-platform-system", Work: "redis-p", Destination: "flat"}}}
	res := apply(t, s, u)
	equal(t, "deleted", orEmpty(res.Deleted), sorted("flat/old.yaml", ledger))
	want["flat/r.yaml"] = "r\n"
	equal(t, "contents", contents(t, s), want)
	if r := records(t, s); r[foreignB] == nil || r[foreignPostgres] == nil {
		t.Fatalf("records after the adoption: %v", r)
	}
}

// An update handed over to the next writer (a git request) that asks to
// take over another workload's folders is never carried, however the next
// writer comes; the same update written directly is refused.
func testForeignRequest(t *testing.T, h Harness) {
	open, want := foreignStore(t, h)
	evil := update("promise/evil/x", map[string]string{"dev/dependencies/evil/x/5058f/e.yaml": "e\n"})
	evil.Adopt = &statestore.Adoption{Folders: []string{"dev/dependencies/postgres/p"}}
	if h.Pending != nil {
		h.Pending(t, open(), evil)
		apply(t, open(), update("w/live", map[string]string{"d1/live.yaml": "live\n"}))
		h.Fold(t, open())
		want["d1/live.yaml"] = "live\n"
	}
	s := open()
	defer s.Close()
	if _, err := s.Apply(patient(), evil); err == nil || errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("an update adopting another workload's folder: %v, want a refusal that is not a race", err)
	}
	equal(t, "contents", contents(t, s), want)
	if _, ok := records(t, s)["promise/evil/x"]; ok {
		t.Fatal("the update that took over another workload's folder was recorded")
	}
}

// A file where the plan needs a folder, or a folder where it needs a
// file, is not a lost race: the store refuses the write at once with a
// *statestore.BlockedError naming what is in the way and whose it is, and
// writes nothing. A store whose paths form a tree (statestore.SnapshotCapabilities.TreeShaped)
// has the planner check it; a flat store (S3), which holds a key and keys
// below it as different objects, checks it itself (see "Trust boundary"
// in docs/design.md). A workload's own file may become a folder, and
// back, everywhere.
func testFileWhereAFolderIsNeeded(t *testing.T, h Harness) {
	open, want := foreignStore(t, h)
	s := open()
	defer s.Close()
	plant(t, s, map[string]string{"dev/dependencies/late": "by hand\n"})
	want["dev/dependencies/late"] = "by hand\n"
	for _, c := range []struct {
		name     string
		u        statestore.Update
		blocker  string
		owner    string
		badInput bool
	}{
		{"below a file nobody owns", update("promise/late/p", map[string]string{"dev/dependencies/late/p/5058f/cm.yaml": "late\n"}), "dev/dependencies/late", "", false},
		{"below another workload's file", update("resource/ns/pg/d/instance", map[string]string{foreignBFile + "/x.yaml": "d\n"}), foreignBFile, foreignB, true},
		{"at another workload's folder", update("resource/ns/pg/e/instance", map[string]string{"dev/dependencies/postgres": "e\n"}), "dev/dependencies/postgres", foreignPostgres, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := s.Apply(patient(), c.u)
			var be *statestore.BlockedError
			switch {
			case err == nil:
				t.Fatalf("the store wrote %s below or at %s", c.u.Workload, c.blocker)
			case !errors.As(err, &be) || errors.Is(err, statestore.ErrConflict):
				t.Fatalf("err = %v, want a *statestore.BlockedError, not a conflict", err)
			case be.Blocker != c.blocker || be.Owner != c.owner || be.BadInput() != c.badInput:
				t.Fatalf("BlockedError %+v (bad input %v), want the blocker %s of %q (bad input %v)", be, be.BadInput(), c.blocker, c.owner, c.badInput)
			case res.Attempts > 1:
				t.Fatalf("the write was tried %d times: a path in the way is not a lost race", res.Attempts)
			default:
				equal(t, "contents", contents(t, s), want)
			}
		})
	}
	// A workload's own file becomes a folder, and back.
	apply(t, s, update("promise/own/p", map[string]string{"d1/own/x": "file\n"}))
	apply(t, s, update("promise/own/p", map[string]string{"d1/own/x/y.yaml": "folder\n"}))
	apply(t, s, update("promise/own/p", map[string]string{"d1/own/x": "file again\n"}))
	if got := contents(t, s)["d1/own/x"]; got != "file again\n" {
		t.Fatalf("d1/own/x = %q", got)
	}
}
