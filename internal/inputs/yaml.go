package inputs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds on every YAML file render reads (output, metadata, input and
// platform; render's own records are JSON). Without them a 14-line file of
// nested aliases (an "alias bomb") makes kustomize expand billions of nodes
// and the process dies out of memory; with them it is bad input, exit 2.
const (
	// MaxYAMLBytes is the largest YAML file render reads. Kubernetes keeps
	// objects below 1.5 MiB, so this leaves room for many in one file.
	MaxYAMLBytes = 32 << 20
	// MaxAliasNodes is how many nodes aliases may add to a file when they
	// are expanded, as kustomize and Flux expand them. Anchors reused for
	// shared settings add a few hundred; an alias bomb adds billions.
	MaxAliasNodes = 100_000
)

// parseYAML parses every document of a YAML file into nodes, within the
// bounds above: a file too large, or whose aliases would expand past
// MaxAliasNodes, is refused before anything expands them. Errors are one
// line, without "yaml: ", and name the document when there are several.
func parseYAML(data []byte) ([]*yaml.Node, error) {
	if len(data) > MaxYAMLBytes {
		return nil, fmt.Errorf("is larger than %s, the limit for a YAML file", mib(MaxYAMLBytes))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	c := aliasCounter{memo: map[*yaml.Node]int64{}}
	for i := 1; ; i++ {
		n := new(yaml.Node)
		err := dec.Decode(n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, &yamlError{doc: i, msg: "invalid YAML: " + yamlMsg(err)}
		}
		c.count(n)
		if c.extra > MaxAliasNodes {
			return nil, &yamlError{doc: i, msg: fmt.Sprintf("its aliases expand to more than %d nodes (an alias bomb?): write the values out instead", MaxAliasNodes)}
		}
		docs = append(docs, n)
	}
}

// yamlError is a problem with one document of a file.
type yamlError struct {
	doc int
	msg string
}

func (e *yamlError) Error() string { return fmt.Sprintf("document %d: %s", e.doc, e.msg) }

// oneDocument phrases a parseYAML error for a file that holds one
// document, without "document 1".
func oneDocument(err error) string {
	var ye *yamlError
	if errors.As(err, &ye) && ye.doc == 1 {
		return ye.msg
	}
	return err.Error()
}

// aliasCounter counts, for the nodes it is shown, how many nodes their
// aliases add when expanded. The expanded size of an anchored node is
// computed once, so counting is linear in the file however deep the
// aliases nest, and it stops growing once past the bound.
type aliasCounter struct {
	memo  map[*yaml.Node]int64
	extra int64
}

// count adds n's tree to the count and gives its expanded size.
func (c *aliasCounter) count(n *yaml.Node) int64 {
	size := int64(1)
	for _, k := range n.Content {
		size += c.count(k)
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		e := c.expanded(n.Alias, 0)
		c.extra = min(c.extra+e, MaxAliasNodes+1)
		size += e
	}
	return size
}

// expanded is the size of n with every alias in it expanded, capped just
// past the bound so that sums cannot overflow.
func (c *aliasCounter) expanded(n *yaml.Node, depth int) int64 {
	if v, ok := c.memo[n]; ok {
		return v
	}
	if depth > 10000 { // yaml.v3 refuses deeper documents; be safe anyway
		return MaxAliasNodes + 1
	}
	c.memo[n] = MaxAliasNodes + 1 // a node containing itself expands forever
	size := int64(1)
	for _, k := range n.Content {
		size = min(size+c.expanded(k, depth+1), MaxAliasNodes+1)
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		size = min(size+c.expanded(n.Alias, depth+1), MaxAliasNodes+1)
	}
	c.memo[n] = size
	return size
}

// yamlMsg is a YAML error as one line without the "yaml: " prefix: a
// decoding (type) error lists each of its problems on a line of its own,
// and a message is printed as one line. The value a type error quotes is
// left out: it may be a password (a Secret's stringData mistyped as a
// scalar), and the line number finds it.
func yamlMsg(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = quotedValue.ReplaceAllString(m, "cannot unmarshal $1 into ")
		}
		return strings.Join(msgs, "; ")
	}
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n", " ")
}

// quotedValue is the value yaml.v3 quotes in a type error, up to the last
// "into" of the line (the value itself may hold one).
var quotedValue = regexp.MustCompile("cannot unmarshal (\\S+) `.*` into ")

// CheckYAML reports the first document of data that is not valid YAML, or
// a file past the bounds above.
func CheckYAML(data []byte) error {
	_, err := parseYAML(data)
	return err
}

// content is a document's top node (inside the document node), or nil for
// an empty document.
func content(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		doc = doc.Content[0]
	}
	for doc.Kind == yaml.AliasNode && doc.Alias != nil {
		doc = doc.Alias
	}
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return nil
	}
	return doc
}
