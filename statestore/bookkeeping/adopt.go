package bookkeeping

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// Taking over a store Kratix wrote. Kratix keeps no records: what a
// workload owns follows from its layout. An Update carries an Adoption
// when its store has no record of the workload yet; planner.PlanUpdate then counts
// what Kratix wrote for the workload as the workload's own, so the update
// replaces it (stale files vanish) and its record takes over from there:
//
//   - nestedByMetadata: every file below the workload's folders
//     (<dest>/dependencies/<promise>/<pipeline>/, or
//     <dest>/resources/<namespace>/<promise>/<name>/<pipeline>/), every
//     <id> folder of them;
//   - none: every file Kratix's ledger for the workload lists
//     (<dest>/.kratix/<namespace>-<work>.<destination>-<id>.yaml), and the
//     ledger itself, which the record replaces;
//   - aggregatedYAML: the first render that contributes to an aggregated
//     file render has no parts of keeps the documents already in it as a
//     part of their own (planner.LegacyPart), less the documents of the workloads
//     render writes there (by object identity): the documents of workloads
//     render does not know stay.
//
// Only the folders an Adoption names are read, never the whole store.
//
// What Kratix left is evidence about the workload it names, and nothing
// more (see "Trust boundary" in docs/design.md). An Adoption may name only
// the workload's own Kratix folders and ledgers (CheckAdoption, which the
// planner and a folded git request both apply), and a ledger counts only
// when render did not write it (no record owns it), and only for the files
// it lists in its own destination that no other workload's record owns.
// So neither a ledger a workflow's output smuggled in, nor one another
// tool left listing another workload's files, nor a request asking for
// another workload's folders, can make render delete what it does not own.

// defaultGroupID is Kratix's id of the default group: the first five hex
// digits of the md5 of ".".
const defaultGroupID = "5058f"

// CheckAdoption reports why a may not be workload's: every folder must be the
// workload's own Kratix folder in some destination
// (<dest>/dependencies/<promise>/<pipeline>, a promise's static
// dependencies' <dest>/dependencies/<promise>/5058f, a resource's
// <dest>/resources/<namespace>/<promise>/<name>/<pipeline>, the namespace
// being the resource's or its Promise's pipeline namespace), and every
// ledger match must look in a destination's .kratix folder for ledgers of
// one of the workload's Kratix Works. An Adoption the engine made always
// passes; one read from the store (a git request) may not.
func CheckAdoption(a *statestore.Adoption, workload string) error {
	if a == nil {
		return nil
	}
	parts := strings.Split(workload, "/")
	var folder func(rel []string) bool // rel: the folder's last parts
	var works []string
	n := 0
	switch {
	case len(parts) == 3 && parts[0] == "promise" && parts[2] == ".static-dependencies":
		n = 3
		folder = func(rel []string) bool {
			return rel[0] == "dependencies" && rel[1] == parts[1] && rel[2] == defaultGroupID
		}
		works = []string{parts[1] + "-static-deps"}
	case len(parts) == 3 && parts[0] == "promise":
		n = 3
		folder = func(rel []string) bool { return rel[0] == "dependencies" && rel[1] == parts[1] && rel[2] == parts[2] }
		works = []string{parts[1] + "-" + parts[2]}
	case len(parts) == 5 && parts[0] == "resource":
		n = 5
		ns, promise, name, pipeline := parts[1], parts[2], parts[3], parts[4]
		folder = func(rel []string) bool {
			return rel[0] == "resources" && rel[1] != "" && rel[2] == promise && rel[3] == name && rel[4] == pipeline
		}
		works = []string{promise + "-" + name + "-" + pipeline, promise + "-" + name + "-" + ns + "-" + pipeline}
	default:
		return fmt.Errorf("workload %q is not a workload key render makes", workload)
	}
	for _, f := range a.Folders {
		rel := strings.Split(f, "/")
		if layout.ValidPath(f) != nil || layout.IsMeta(f) || len(rel) <= n || !folder(rel[len(rel)-n:]) {
			return fmt.Errorf("the folder %q is not a Kratix folder of workload %s", f, workload)
		}
	}
	for _, m := range a.Ledgers {
		if layout.ValidPath(m.Dir) != nil || layout.IsMeta(m.Dir) || path.Base(m.Dir) != layout.KratixDir || path.Dir(m.Dir) == "." {
			return fmt.Errorf("%q is not the %s folder of a destination", m.Dir, layout.KratixDir)
		}
		ok := false
		for _, id := range works {
			ok = ok || m.Work == statestore.KratixWorkName(id)
		}
		if !ok || m.Namespace == "" || m.Destination == "" {
			return fmt.Errorf("the ledgers %s/%s-%s-*.%s-*.yaml are not Kratix's ledgers of workload %s", m.Dir, m.Namespace, m.Work, m.Destination, workload)
		}
	}
	return nil
}

// ledger is a .kratix ledger file.
type ledger struct {
	Files []string `yaml:"files"`
}

// Adopted returns the files Kratix wrote for workload, which a names (a
// passed CheckAdoption): every file below its folders, and every ledger render
// did not write with the files it lists in its own destination that no
// other workload's record owns (store-relative, as Kratix writes them).
// owners is the store's index of records (path -> workload), built only
// when a ledger is found.
func Adopted(snap statestore.Snapshot, workload string, a *statestore.Adoption, owners func() (map[string]string, error)) ([]string, error) {
	if a == nil {
		return nil, nil
	}
	var out []string
	for _, dir := range a.Folders {
		files, err := snap.List(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	for _, m := range a.Ledgers {
		re, err := regexp.Compile(m.Pattern())
		if err != nil {
			return nil, fmt.Errorf("ledger pattern %q: %w", m.Pattern(), err)
		}
		names, err := snap.List(m.Dir)
		if err != nil {
			return nil, err
		}
		dest := path.Dir(m.Dir) + "/"
		for _, p := range names {
			if path.Dir(p) != m.Dir || !re.MatchString(path.Base(p)) {
				continue
			}
			idx, err := owners()
			if err != nil {
				return nil, err
			}
			if _, ours := idx[p]; ours {
				continue // render wrote it: a workflow's file, not Kratix's word
			}
			data, err := snap.ReadFile(p)
			if errors.Is(err, statestore.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			var l ledger
			if err := yaml.Unmarshal(data, &l); err != nil {
				return nil, fmt.Errorf("Kratix ledger %s: %w", p, err)
			}
			out = append(out, p)
			for _, f := range l.Files {
				f = path.Clean(strings.TrimPrefix(f, "/"))
				if layout.ValidPath(f) != nil || layout.IsMeta(f) || !strings.HasPrefix(f, dest) || strings.HasPrefix(f, m.Dir+"/") {
					continue // not a file of the ledger's destination
				}
				if o, ok := idx[f]; ok && o != workload {
					continue // another workload's, by render's own record
				}
				out = append(out, f)
			}
		}
	}
	return out, nil
}
