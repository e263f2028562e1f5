package statestore

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/kyaml/resid"

	"github.com/render-dev/render/internal/layout"
)

// The types a Record and an Update are made of.

// Placement is where one workload group went, and the selector it was
// scheduled with, so a drain can find it another home without the
// workflow's output.
type Placement struct {
	Group            string                            `json:"group"`
	Destinations     []string                          `json:"destinations"`
	MatchLabels      map[string]string                 `json:"matchLabels,omitempty"`
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
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
	if g := layout.Group(o.APIVersion); g != "" {
		k += "." + g
	}
	if o.Namespace != "" {
		return k + " " + o.Namespace + "/" + o.Name
	}
	return k + " " + o.Name
}

// Identity is what makes two objects the same object in a cluster, as
// kustomize has it: group, kind, namespace and name. The version does not
// count, and a namespaced object without a namespace is in "default".
func (o Object) Identity() string {
	g, v := resid.ParseGroupVersion(o.APIVersion)
	id := resid.ResId{Gvk: resid.NewGvk(g, v, o.Kind), Name: o.Name, Namespace: o.Namespace}
	return g + "|" + o.Kind + "|" + id.EffectiveNamespace() + "|" + o.Name
}
