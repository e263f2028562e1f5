// Package renderer is render's pure core: it takes a workflow's output, its
// destination selectors, the platform's Destinations and Promise, and what
// the stores remember (earlier placements), and returns where every file
// goes, per state store, with the reasons. It does no I/O, so every
// scheduling rule is tested as plain values in, plain values out.
package renderer

import (
	"fmt"
	"path"
	"strings"

	"github.com/render-dev/render/internal/layout"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkflowType is "promise" (dependencies, to every match) or "resource"
// (one match per group).
type WorkflowType string

// Workflow types.
const (
	PromiseWorkflow  WorkflowType = "promise"
	ResourceWorkflow WorkflowType = "resource"
)

// Action is what the workflow does: configure writes, delete removes.
type Action string

// Actions.
const (
	Configure Action = "configure"
	Delete    Action = "delete"
)

// Workflow identifies whose output this is.
type Workflow struct {
	Type      WorkflowType
	Action    Action
	Promise   string
	Pipeline  string
	Name      string // resource name (resource workflows)
	Namespace string // resource namespace (resource workflows)
	// FolderNamespace, when set, is the namespace segment of a resource's
	// nestedByMetadata folder instead of Namespace: Kratix puts every
	// resource of a Promise with spec.workflows.config.pipelineNamespace
	// under that namespace.
	FolderNamespace string
}

// ClusterScopedNamespace is the namespace Kratix files a cluster-scoped
// resource under (its Work's namespace, the platform's own).
const ClusterScopedNamespace = "kratix-platform-system"

// folderNamespace is the namespace segment of w's nestedByMetadata folder.
func (w Workflow) folderNamespace() string {
	if w.FolderNamespace != "" {
		return w.FolderNamespace
	}
	return w.Namespace
}

// NestedPrefix is Kratix's nestedByMetadata folder for w's group with id
// id, relative to the destination:
// dependencies/<promise>/<pipeline>/<id> for a promise workflow,
// resources/<namespace>/<promise>/<name>/<pipeline>/<id> for a resource.
func NestedPrefix(w Workflow, id string) string {
	if w.Type == PromiseWorkflow {
		return path.Join("dependencies", w.Promise, w.Pipeline, id)
	}
	return path.Join("resources", w.folderNamespace(), w.Promise, w.Name, w.Pipeline, id)
}

// String is a short human name of the workflow.
func (w Workflow) String() string {
	if w.Type == PromiseWorkflow {
		return fmt.Sprintf("promise %s (pipeline %s)", w.Promise, w.Pipeline)
	}
	return fmt.Sprintf("resource %s/%s of promise %s (pipeline %s)", w.Namespace, w.Name, w.Promise, w.Pipeline)
}

// File is one file of the workflow output, by its slash path relative to
// the output folder.
type File struct {
	Path string
	Data []byte
}

// Selector is a Kubernetes label selector: equality matchLabels and, beyond
// Kratix, set-based matchExpressions.
type Selector struct {
	MatchLabels      map[string]string                 `json:"matchLabels,omitempty" yaml:"matchLabels,omitempty"`
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty" yaml:"matchExpressions,omitempty"`
}

// Empty reports whether the selector constrains nothing.
func (s Selector) Empty() bool { return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 }

// String renders the selector the way kubectl does ("env=dev,zone in (eu)").
func (s Selector) String() string {
	if s.Empty() {
		return "<none>"
	}
	sel, err := asSelector(s)
	if err != nil {
		return fmt.Sprintf("<invalid: %v>", err)
	}
	return sel.String()
}

// SelectorEntry is one entry of destination-selectors.yaml.
type SelectorEntry struct {
	Directory string `json:"directory,omitempty" yaml:"directory,omitempty"`
	Selector  `json:",inline" yaml:",inline"`
}

// FilepathMode is how a destination lays files out.
type FilepathMode string

// Filepath modes, as in Kratix.
const (
	NestedByMetadata FilepathMode = "nestedByMetadata"
	AggregatedYAML   FilepathMode = "aggregatedYAML"
	NoNesting        FilepathMode = "none"
)

// StoreRef names a state store.
type StoreRef struct {
	Kind string // the kind of its document: GitStateStore, BucketStateStore, OCIStateStore (see internal/storekind)
	Name string
}

func (r StoreRef) String() string { return r.Kind + "/" + r.Name }

// Destination is a place workloads go: a folder in a state store.
type Destination struct {
	Name              string
	Labels            map[string]string
	Path              string // inside the store; defaults to Name
	Store             StoreRef
	StrictMatchLabels bool
	Mode              FilepathMode
	Filename          string // aggregatedYAML file name
	// Unschedulable (cordoned) destinations take no new placements; what
	// is already there stays.
	Unschedulable bool
	// NoInitWorkloads is Kratix's spec.initWorkloads.enabled: false: no
	// canary files are written to the destination.
	NoInitWorkloads bool
}

// DryRunLabel marks Kratix's dry-run destination: Kratix never schedules
// an ordinary workload there, and neither does render.
const DryRunLabel = "kratix.io/dry-run"

// Promise is the part of a Promise that render reads.
type Promise struct {
	Name                 string     `yaml:"name"`
	DestinationSelectors []Selector `yaml:"destinationSelectors"`
	// PipelineNamespace is spec.workflows.config.pipelineNamespace.
	PipelineNamespace string `yaml:"-"`
	// Dependencies is spec.dependencies rendered as Kratix renders it (one
	// YAML document per object), nil when the Promise has none.
	Dependencies []byte `yaml:"-"`
	// ConfigurePipelines names the configure pipelines of the Promise's
	// promise and resource workflows (spec.workflows.<type>.configure), so
	// a delete finds every folder they wrote.
	ConfigurePipelines map[WorkflowType][]string `yaml:"-"`
}

// Strategy chooses among the destinations that match a resource's group.
type Strategy string

// Strategies.
const (
	// Spread scores candidates by how many resources (of the same flavour,
	// when the resource has one) they already hold and takes the fewest,
	// breaking ties with a stable hash of the workload's identity.
	Spread Strategy = "spread"
	// Random is Kratix's behaviour: any matching destination.
	Random Strategy = "random"
)

// Input is everything a render reads, as values.
type Input struct {
	Workflow   Workflow
	Output     []File
	OutputDirs []string // top-level folders of the output, even empty ones
	Selectors  []SelectorEntry
	// SelectorsFile names destination-selectors.yaml in messages.
	SelectorsFile string
	Destinations  []Destination
	Promise       *Promise // nil when the platform defines none
	// PromiseWorkflowSelector is the promise workflow's root selector, read
	// from the stores: resource workflows inherit it below the Promise's
	// own selectors and above their own.
	PromiseWorkflowSelector map[string]string
	// Previous placements of this workload: group directory -> destinations.
	Previous map[string][]string
	// PreviousByKratix says Previous was read from what Kratix wrote (a
	// store render has no record of the workload in), not from a record.
	PreviousByKratix bool
	// Load counts resources already placed, for spreading.
	Load Load
	// Weigh, when set, is asked once for the load of the destinations a
	// spread choice weighs that it has not been asked for yet (only a
	// resource group's candidates, when it has more than one and keeps
	// no earlier placement), and what it returns is added to Load for
	// this render. So a caller that reads the load from its stores reads
	// it for those destinations only, during the one render that needs
	// it, instead of rendering, reading, and rendering again. Its error
	// ends the render. Without it, Load is all there is.
	Weigh func(dests []string) (Load, error)
	// Flavour is the resource's flavour label value ("" when none).
	Flavour  string
	Strategy Strategy
	// Seed makes the random strategy repeatable in tests (0: time-based by the caller).
	Seed uint64
}

// Load is what the stores say is already placed where.
type Load struct {
	// Total resources per destination, across every promise and namespace.
	Total map[string]int
	// ByFlavour[flavour][destination] counts resources of that flavour.
	ByFlavour map[string]map[string]int
}

// Placement is where one workload group went, and the selector it was
// scheduled with (the stores keep it, so that later renders keep the
// placement and a drain can move it without the workflow's output).
type Placement struct {
	Group            string
	Destinations     []string
	MatchLabels      map[string]string
	MatchExpressions []metav1.LabelSelectorRequirement
}

// Aggregate is one workload's part of a multi-document file that several
// workloads share (an aggregatedYAML destination's).
type Aggregate struct {
	Target       string // path of the aggregated file, relative to the store
	Contribution []byte // this workload's documents
}

// InputError is bad input: it names the file, the document or entry, and
// the problem. The CLI exits 2 on it and writes nothing.
type InputError struct {
	File  string // the file at fault ("" when the input is a flag or variable)
	Where string // document, entry or field within the file
	Msg   string
}

// Error is one line: the file (quoted as git quotes paths, when its name
// needs it: see layout.Quote), where in it, and the problem.
func (e *InputError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(layout.Quote(e.File))
		b.WriteString(": ")
	}
	if e.Where != "" {
		b.WriteString(e.Where)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
