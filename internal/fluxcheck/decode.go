package fluxcheck

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resource"
)

// factory is kustomize's resource factory, the one Flux's generator decodes
// files with.
var factory *resource.Factory = provider.NewDefaultDepProvider().GetResourceFactory()

// decoded remembers what files decoded to, by the SHA-256 of their
// content: a promise's documents are the same in each of its destinations,
// a render checks its plan twice, and watch mode renders the same files
// again and again. Only successes are kept; the map is emptied when full.
var decoded = struct {
	sync.Mutex
	m map[[sha256.Size]byte][]Object
}{m: map[[sha256.Size]byte][]Object{}}

const decodedLimit = 50000

// decodeFile decodes one plain file the way Flux's generated kustomization
// reads it. Section and File are left to the caller, on a copy it owns.
func decodeFile(data []byte) ([]Object, *checkError) {
	key := sha256.Sum256(data)
	decoded.Lock()
	objs, ok := decoded.m[key]
	decoded.Unlock()
	if ok {
		return append([]Object(nil), objs...), nil
	}
	objs, err := decodeUncached(data)
	if err != nil {
		return nil, err
	}
	decoded.Lock()
	if len(decoded.m) >= decodedLimit {
		clear(decoded.m)
	}
	decoded.m[key] = append([]Object(nil), objs...)
	decoded.Unlock()
	return objs, nil
}

func decodeUncached(data []byte) ([]Object, *checkError) {
	nodes, err := factory.RNodesFromBytes(data)
	if err != nil {
		return nil, locate(data, err)
	}
	objs := make([]Object, 0, len(nodes))
	for _, n := range nodes {
		o := Object{APIVersion: n.GetApiVersion(), Kind: n.GetKind(), Namespace: n.GetNamespace(), Name: n.GetName()}
		if o.APIVersion == "" {
			return nil, locate(data, errors.New("missing apiVersion"))
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// locate finds the document of data that kustomize (or server-side apply)
// refuses, and says what is wrong with it in plain words. whole is the
// error for the whole file, used when no single document is at fault.
// Documents are read one by one with the YAML decoder kyaml builds on, so
// they are numbered as kustomize numbers them.
func locate(data []byte, whole error) *checkError {
	dec := yaml.NewDecoder(bytes.NewReader(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))))
	var docs []*yaml.Node
	var bad error // a document the decoder refuses: the last one read
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			bad = err
			break
		}
		docs = append(docs, &n)
	}
	where := func(i int) string {
		if len(docs) == 1 && bad == nil || len(docs) == 0 {
			return ""
		}
		return fmt.Sprintf("document %d", i+1)
	}
	for i, n := range docs {
		if msg := problem(n); msg != "" {
			return &checkError{where: where(i), msg: msg}
		}
		doc, err := yaml.Marshal(n)
		if err != nil {
			continue
		}
		if _, err := factory.RNodesFromBytes(doc); err != nil {
			return &checkError{where: where(i), msg: "Flux cannot decode it: " + cleanKustomizeErr(err)}
		}
	}
	// kustomize's own complaint about a separator line ("--- junk") is
	// clearer than where the decoder stumbled over it.
	if bad != nil && !strings.Contains(whole.Error(), "separator") {
		return &checkError{where: where(len(docs)), msg: "invalid YAML: " + strings.TrimPrefix(bad.Error(), "yaml: ")}
	}
	msg := cleanKustomizeErr(whole)
	if strings.Contains(msg, "separator") {
		msg = "invalid YAML: " + msg
	}
	return &checkError{msg: "Flux cannot decode it: " + msg}
}

// problem says why one document is not a Kubernetes object, or "".
func problem(n *yaml.Node) string {
	root := n
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return ""
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return ""
	}
	return objectProblem(root, "")
}

const notObject = " (every .yaml and .yml file under a Flux Kustomization's path must hold Kubernetes objects)"

// objectProblem checks one node as a Kubernetes object; in names it for
// list items ("item 3: ").
func objectProblem(n *yaml.Node, in string) string {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return in + "not a Kubernetes object: a mapping with apiVersion, kind and metadata is expected, not " + nodeKind(n) + notObject
	}
	apiVersion, kind := scalar(n, "apiVersion"), scalar(n, "kind")
	var missing []string
	if apiVersion == "" {
		missing = append(missing, "apiVersion")
	}
	if kind == "" {
		missing = append(missing, "kind")
	}
	items := field(n, "items")
	isList := strings.HasSuffix(kind, "List") && items != nil
	if !isList {
		md := field(n, "metadata")
		switch {
		case md != nil && md.Kind != yaml.MappingNode && !(md.Kind == yaml.ScalarNode && md.Tag == "!!null"):
			return in + "not a Kubernetes object: metadata is " + nodeKind(md) + ", not a mapping" + notObject
		case md == nil || scalar(md, "name") == "":
			missing = append(missing, "metadata.name")
		}
	}
	if len(missing) > 0 {
		return in + "not a Kubernetes object: missing " + joinAnd(missing) + notObject
	}
	if isList && items.Kind == yaml.SequenceNode {
		for i, it := range items.Content {
			if msg := objectProblem(it, fmt.Sprintf("%s item %d: ", kind, i+1)); msg != "" {
				return in + msg
			}
		}
	}
	return ""
}

func field(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

func scalar(n *yaml.Node, key string) string {
	v := field(n, key)
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return ""
	}
	return v.Value
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the scalar %q", truncate(n.Value, 40))
	}
	return "something else"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func joinAnd(s []string) string {
	switch len(s) {
	case 1:
		return s[0]
	case 2:
		return s[0] + " and " + s[1]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// cleanKustomizeErr drops kyaml's stack-carrying wrappers and Go struct dumps.
func cleanKustomizeErr(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, " in object {"); i > 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(msg, "MalformedYAMLError: ")
	return strings.TrimSpace(string(bytes.TrimSpace([]byte(msg))))
}
