// Package layout is the vocabulary the renderer and the state stores share:
// which paths a store may hold, which names render keeps for itself, and the
// small value types that travel from a render into a store's records
// (placements, aggregated-file contributions, object identities).
//
// It does no I/O and imports neither the renderer nor the stores, so the pure
// renderer knows nothing of stores, and every rule about names lives here
// once and is checked before any store is contacted.
package layout

import (
	"fmt"
	"path"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetaDir is the folder, relative to a store's path, where render keeps what
// it needs for itself (records, indexes, aggregate parts). Nothing in it is
// YAML, and no destination may use it as its path, so Flux and Argo CD never
// read it as manifests.
const MetaDir = ".render"

// MarkerName is the completeness marker a store may keep at the root of each
// destination (the S3 store does). No workload file may take this name in any
// folder, so the rule is the same for every store and every filepath mode.
const MarkerName = ".render-complete.json"

// IsMeta reports whether the store-relative path p is one of render's own.
func IsMeta(p string) bool { return p == MetaDir || strings.HasPrefix(p, MetaDir+"/") }

// ValidPath reports whether p is a clean, relative, slash-separated path that
// stays inside the store.
func ValidPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case strings.Contains(p, "\\"):
		return fmt.Errorf("path %q contains a backslash", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean", p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q leaves the store", p)
	}
	return nil
}

// CheckWorkloadPath is the one rule for a path a workload's file takes inside
// a destination folder (p is relative to the destination): it must be a valid
// path, and it must not take a name render reserves.
func CheckWorkloadPath(p string) error {
	if err := ValidPath(p); err != nil {
		return err
	}
	if path.Base(p) == MarkerName {
		return fmt.Errorf("the name %s is reserved for render's completeness markers", MarkerName)
	}
	return nil
}

// Requirement is one set-based selector term (In, NotIn, Exists,
// DoesNotExist), exactly Kubernetes' own type.
type Requirement = metav1.LabelSelectorRequirement

// Placement is where one workload group went, and the selector it was
// scheduled with, so a drain can find it another home without the
// workflow's output.
type Placement struct {
	Group            string            `json:"group"`
	Destinations     []string          `json:"destinations"`
	MatchLabels      map[string]string `json:"matchLabels,omitempty"`
	MatchExpressions []Requirement     `json:"matchExpressions,omitempty"`
}

// Aggregate is one workload's part of a shared multi-document file
// (aggregatedYAML destinations).
type Aggregate struct {
	Target       string // path of the aggregated file, relative to the store
	Contribution []byte // this workload's documents; empty withdraws them
}

// Object identifies one Kubernetes object a workload writes, and where: a
// Flux build of a destination produces it, and a store's record keeps it so
// later renders of other workloads can refuse a duplicate.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Section is the Flux Kustomization that applies it: "dependencies",
	// "resources" or "." (the destination's root).
	Section string `json:"section"`
	// File is the file it comes from, relative to the destination folder.
	// For an object a kustomization builds, it is that kustomization file.
	File string `json:"file"`
	// Store is the store ("GitStateStore/default"), Destination the
	// destination's path in it, and Source the file of the workflow's
	// output it comes from ("" when not known, e.g. an aggregated file).
	Store       string `json:"store,omitempty"`
	Destination string `json:"destination,omitempty"`
	Source      string `json:"source,omitempty"`
}

// String names the object the way kubectl does: Kind[.group] [namespace/]name.
func (o Object) String() string {
	k := o.Kind
	if g := Group(o.APIVersion); g != "" {
		k += "." + g
	}
	if o.Namespace != "" {
		return k + " " + o.Namespace + "/" + o.Name
	}
	return k + " " + o.Name
}

// Group is the API group of an apiVersion ("" for the core group).
func Group(apiVersion string) string {
	if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}
