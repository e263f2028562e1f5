package inputs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	yamlv2 "go.yaml.in/yaml/v2"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/render-dev/render/renderer"
)

// promiseWorkflows is the part of a Promise's spec.workflows render reads.
type promiseWorkflows struct {
	Config struct {
		PipelineNamespace string `yaml:"pipelineNamespace"`
	} `yaml:"config"`
	Promise  workflowTriggers `yaml:"promise"`
	Resource workflowTriggers `yaml:"resource"`
}

type workflowTriggers struct {
	Configure []struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	} `yaml:"configure"`
}

// readPromiseExtras reads what render takes from the parts of a Promise
// that are Kratix's: spec.workflows' pipeline namespace and configure
// pipeline names, and spec.dependencies, rendered as Kratix writes them.
func readPromiseExtras(pr *renderer.Promise, spec *promiseSpec) error {
	if spec.Workflows.Kind != 0 {
		var wf promiseWorkflows
		if err := spec.Workflows.Decode(&wf); err != nil {
			return fmt.Errorf("spec.workflows: %s", yamlMsg(err))
		}
		if ns := wf.Config.PipelineNamespace; ns != "" {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("spec.workflows.config.pipelineNamespace %q is not a valid namespace", ns)
			}
			pr.PipelineNamespace = ns
		}
		for typ, t := range map[renderer.WorkflowType]workflowTriggers{renderer.PromiseWorkflow: wf.Promise, renderer.ResourceWorkflow: wf.Resource} {
			for _, c := range t.Configure {
				if c.Metadata.Name == "" {
					continue
				}
				if pr.ConfigurePipelines == nil {
					pr.ConfigurePipelines = map[renderer.WorkflowType][]string{}
				}
				pr.ConfigurePipelines[typ] = append(pr.ConfigurePipelines[typ], c.Metadata.Name)
			}
		}
	}
	if spec.Dependencies.Kind != 0 {
		deps, err := kratixDependencies(&spec.Dependencies)
		if err != nil {
			return fmt.Errorf("spec.dependencies: %v", err)
		}
		pr.Dependencies = deps
	}
	return nil
}

// kratixDependencies renders a Promise's spec.dependencies as Kratix does
// (its promise controller encodes each object, as the API server returns
// it, with yaml.v2: keys sorted, one document each), so the static
// dependencies file render writes is byte for byte Kratix's.
func kratixDependencies(n *yaml.Node) ([]byte, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, errors.New("want a list of Kubernetes objects")
	}
	var buf bytes.Buffer
	enc := yamlv2.NewEncoder(&buf)
	for i, item := range n.Content {
		src, err := yaml.Marshal(item)
		if err != nil {
			return nil, fmt.Errorf("item %d: %s", i+1, yamlMsg(err))
		}
		js, err := sigsyaml.YAMLToJSON(src)
		if err != nil {
			return nil, fmt.Errorf("item %d: %v", i+1, err)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.UseNumber()
		var obj any
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("item %d: %v", i+1, err)
		}
		m, ok := obj.(map[string]any)
		if !ok || m["kind"] == nil || m["apiVersion"] == nil {
			return nil, fmt.Errorf("item %d: not a Kubernetes object (a mapping with apiVersion and kind)", i+1)
		}
		if err := enc.Encode(unstructuredNumbers(obj)); err != nil {
			return nil, fmt.Errorf("item %d: %v", i+1, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return nil, nil
	}
	return buf.Bytes(), nil
}

// unstructuredNumbers turns JSON numbers into what Kubernetes' unstructured
// objects hold: int64 when integral, float64 otherwise.
func unstructuredNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = unstructuredNumbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = unstructuredNumbers(x)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// WorkflowControlFileName is the metadata file with which a workflow asks
// Kratix to suspend it or retry it later.
const WorkflowControlFileName = "workflow-control.yaml"

// WorkflowControl is workflow-control.yaml, as Kratix reads it.
type WorkflowControl struct {
	Suspend    bool   `json:"suspend"`
	Message    string `json:"message"`
	RetryAfter string `json:"retryAfter"`
}

// Skip says why Kratix would write nothing for this workflow ("" when it
// would write): a suspend, or a retryAfter.
func (c *WorkflowControl) Skip() string {
	switch {
	case c == nil:
		return ""
	case c.Suspend && c.Message != "":
		return fmt.Sprintf("%s asks to suspend the workflow (%s)", WorkflowControlFileName, c.Message)
	case c.Suspend:
		return WorkflowControlFileName + " asks to suspend the workflow"
	case c.RetryAfter != "":
		return fmt.Sprintf("%s asks to retry the workflow after %s", WorkflowControlFileName, c.RetryAfter)
	}
	return ""
}

// LoadWorkflowControl reads <metadata>/workflow-control.yaml; nil when it
// is absent.
func LoadWorkflowControl(metadataDir string) (*WorkflowControl, error) {
	f, err := openFolder(metadataDir, "metadata folder")
	if err != nil {
		return nil, nil // LoadSelectors reports a missing or unreadable folder
	}
	defer f.Close()
	data, err := f.readFile(WorkflowControlFileName, MaxYAMLBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	file := filepath.Join(metadataDir, WorkflowControlFileName)
	if err := CheckYAML(data); err != nil {
		return nil, &renderer.InputError{File: file, Msg: err.Error()}
	}
	var c WorkflowControl
	if err := sigsyaml.Unmarshal(data, &c); err != nil {
		return nil, &renderer.InputError{File: file, Msg: "invalid: " + err.Error()}
	}
	return &c, nil
}
