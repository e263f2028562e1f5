package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/layout"
)

// Taking over a store Kratix wrote. Kratix keeps no records: what a
// workload owns follows from its layout. An Update carries an Adoption
// when its store has no record of the workload yet; PlanUpdate then counts
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
//     part of their own (LegacyPart), less the documents of the workloads
//     render writes there (by object identity): the documents of workloads
//     render does not know stay.
//
// Only the folders an Adoption names are read, never the whole store.

// Adoption names where Kratix kept a workload's files in one store.
type Adoption struct {
	// Folders are store-relative folders whose files are the workload's.
	Folders []string `json:"folders,omitempty"`
	// Ledgers match Kratix's .kratix ledgers of the workload.
	Ledgers []LedgerMatch `json:"ledgers,omitempty"`
}

// LedgerMatch finds a workload's ledgers in one .kratix folder: their
// names carry a random part (Kratix's Work name), so they are matched.
type LedgerMatch struct {
	// Dir is the store-relative .kratix folder of a destination.
	Dir string `json:"dir"`
	// Pattern is a regular expression a ledger's file name matches.
	Pattern string `json:"pattern"`
}

// LegacyPart is the name, in an aggregated file's parts folder, of the
// part holding the documents Kratix wrote there for workloads render
// does not know. It sorts before every workload's part.
const LegacyPart = "kratix.part"

// ledger is a .kratix ledger file.
type ledger struct {
	Files []string `yaml:"files"`
}

// adopted returns the files Kratix wrote for the workload a names: every
// file below its folders, every file its ledgers list (store-relative,
// as Kratix writes them), and the ledgers.
func adopted(snap Snapshot, a *Adoption) ([]string, error) {
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
		re, err := regexp.Compile(m.Pattern)
		if err != nil {
			return nil, fmt.Errorf("ledger pattern %q: %w", m.Pattern, err)
		}
		names, err := snap.List(m.Dir)
		if err != nil {
			return nil, err
		}
		for _, p := range names {
			if path.Dir(p) != m.Dir || !re.MatchString(path.Base(p)) {
				continue
			}
			data, err := snap.ReadFile(p)
			if errors.Is(err, ErrNotFound) {
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
				if layout.ValidPath(f) == nil && !layout.IsMeta(f) {
					out = append(out, f)
				}
			}
		}
	}
	return out, nil
}

// legacyPart returns the content the aggregated file's legacy part must
// hold (nil for none) and whether it must be written: on the first
// contribution to a target render has no parts of, the target's current
// documents; then, always, less the documents whose identity the
// workload's contribution holds.
func legacyPart(snap Snapshot, target string, parts []string, contribution []byte) (data []byte, write bool, err error) {
	lp := path.Join(layout.MetaDir, "aggregate", target, LegacyPart)
	var have []byte
	switch {
	case len(parts) == 0:
		have, err = snap.ReadFile(target)
		if errors.Is(err, ErrNotFound) {
			return nil, false, nil
		}
		write = true
	case contains(parts, lp):
		have, err = snap.ReadFile(lp)
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	mine := map[string]bool{}
	for _, d := range splitDocuments(contribution) {
		if id, ok := identity(d); ok {
			mine[id] = true
		}
	}
	var kept [][]byte
	for _, d := range splitDocuments(have) {
		if id, ok := identity(d); ok && mine[id] {
			write = true
			continue
		}
		kept = append(kept, d)
	}
	if len(kept) == 0 {
		return nil, write && len(parts) > 0, nil
	}
	return append(bytes.Join(kept, []byte("\n---\n")), '\n'), write, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments splits a multi-document YAML file at its "---" lines,
// keeping each document's bytes; empty documents are dropped.
func splitDocuments(data []byte) [][]byte {
	var out [][]byte
	for _, d := range separator.Split(string(data), -1) {
		if t := bytes.TrimSpace([]byte(d)); len(t) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// objectHead is what identifies a Kubernetes object in a document.
type objectHead struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
}

func (o objectHead) identity() (string, bool) {
	if o.Kind == "" || o.Metadata.Name == "" {
		return "", false
	}
	return layout.Object{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Metadata.Name, Namespace: o.Metadata.Namespace}.Identity(), true
}

// identity is a document's object identity, when it is a Kubernetes object.
func identity(doc []byte) (string, bool) {
	var o objectHead
	if yaml.Unmarshal(doc, &o) != nil {
		return "", false
	}
	return o.identity()
}

// Identities lists, sorted, the object identities of a multi-document
// YAML file (an aggregated file), as layout.Object.Identity gives them.
func Identities(data []byte) []string {
	var out []string
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o objectHead
		if err := dec.Decode(&o); err != nil {
			break
		}
		if id, ok := o.identity(); ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
