package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/redact"
)

// MaxSecretBytes is the most a Secret's data and stringData may hold:
// Kubernetes refuses a larger Secret (1 MiB).
const MaxSecretBytes = 1 << 20

// lastApplied is the annotation kubectl apply leaves on an object: a copy
// of the whole object, a Secret's data included, in plaintext.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// secretFields are the top-level fields of a v1 Secret; anything else in a
// Secret would be written unencrypted.
var secretFields = map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "type": true, "immutable": true, "data": true, "stringData": true}

// docKind is what a document is, for this package.
type docKind int

const (
	other       docKind = iota
	plainSecret         // a v1 Secret in plaintext
	sopsSecret          // a v1 Secret the workflow encrypted with SOPS
)

// doc is one document of a file.
type doc struct {
	index int        // 1-based, counting every document of the file
	node  *yaml.Node // the document's content; nil for an empty document
	kind  docKind
	// name is "Secret namespace/name" for Secrets.
	name string
	// bad is a problem that every policy but allow refuses (a Secret of
	// another apiVersion, a Secret in a List, a secretGenerator).
	bad string
	// invalid is what keeps a plaintext Secret from being encrypted, as
	// "field: problem" (a field that is not base64, no data, too large).
	invalid string
}

// where names the document in messages: "document 2 (Secret team/db)".
func (d doc) where() string {
	if d.name != "" {
		return fmt.Sprintf("document %d (%s)", d.index, d.name)
	}
	return fmt.Sprintf("document %d", d.index)
}

// scanned is one file, scanned.
type scanned struct {
	docs []doc
	// secrets says whether any document is a Secret or bad.
	secrets bool
}

func (s *scanned) plain() bool {
	for _, d := range s.docs {
		if d.kind == plainSecret {
			return true
		}
	}
	return false
}

// isKustomization says whether a file name is one kustomize reads as a
// kustomization.
func isKustomization(p string) bool {
	switch path.Base(p) {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// isYAML says whether Flux reads a file as manifests by its name.
func isYAML(p string) bool {
	ext := path.Ext(p)
	return ext == ".yaml" || ext == ".yml"
}

// scan finds the Secrets in a file's documents, registers their values
// with package redact, and says what is wrong with each. A file that
// names no Secret (most files) is not parsed. A file that is not YAML is
// no manifest: it holds no Secret for this package.
func scan(p string, data []byte) (*scanned, error) {
	kust := isKustomization(p) && bytes.Contains(data, []byte("secretGenerator"))
	if !kust && !bytes.Contains(data, []byte("Secret")) {
		return &scanned{}, nil
	}
	if !utf8.Valid(data) {
		return &scanned{}, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	out := &scanned{}
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if isYAML(p) || isKustomization(p) {
				return nil, fmt.Errorf("document %d: invalid YAML: %v", i, err)
			}
			return &scanned{}, nil // not YAML: not a manifest
		}
		d := doc{index: i}
		if len(n.Content) > 0 {
			d.node = n.Content[0]
		}
		classify(p, &d)
		if d.kind != other || d.bad != "" {
			out.secrets = true
		}
		out.docs = append(out.docs, d)
	}
	return out, nil
}

// field returns the value of key in mapping m, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(n *yaml.Node) string {
	if n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

// classify fills d's kind, name and problems.
func classify(p string, d *doc) {
	m := d.node
	if m == nil || m.Kind != yaml.MappingNode {
		return
	}
	kind, apiVersion := scalar(field(m, "kind")), scalar(field(m, "apiVersion"))
	if isKustomization(p) {
		if g := field(m, "secretGenerator"); g != nil && len(g.Content) > 0 {
			d.bad = "secretGenerator: the Secrets kustomize generates from it would be written in plaintext, and render cannot encrypt what it does not see: write each Secret as a document of its own (or run render with --hydrate, which builds the kustomization first)"
		}
		return
	}
	if kind != "Secret" {
		if items := field(m, "items"); strings.HasSuffix(kind, "List") && items != nil {
			for j, it := range items.Content {
				if scalar(field(it, "kind")) == "Secret" {
					d.bad = fmt.Sprintf("items[%d] is a Secret inside a %s: render encrypts Secrets that are documents of their own; write it as one", j, kind)
					return
				}
			}
		}
		return
	}
	md := field(m, "metadata")
	d.name = "Secret " + scalar(field(md, "name"))
	if ns := scalar(field(md, "namespace")); ns != "" {
		d.name = "Secret " + ns + "/" + scalar(field(md, "name"))
	}
	if apiVersion != "v1" {
		d.bad = fmt.Sprintf("apiVersion %q with kind Secret: a Kubernetes Secret is apiVersion v1; render does not know what this document is, and will not write it in plaintext", apiVersion)
		return
	}
	if s := field(m, "sops"); s != nil && scalar(field(s, "mac")) != "" {
		d.kind = sopsSecret
		d.invalid = checkEncrypted(m)
		if d.invalid != "" {
			d.bad = d.invalid
		}
		return
	}
	d.kind = plainSecret
	d.invalid = checkPlain(m)
}

// checkEncrypted says what is not encrypted in a Secret the workflow
// encrypted with SOPS ("" when every value is).
func checkEncrypted(m *yaml.Node) string {
	for _, f := range []string{"data", "stringData"} {
		v := field(m, f)
		if v == nil || v.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			if s := v.Content[i+1]; s.Kind != yaml.ScalarNode || !strings.HasPrefix(s.Value, "ENC[") {
				return fmt.Sprintf("%s.%s is not encrypted although the Secret carries SOPS metadata: encrypt it with sops --encrypted-regex '^(data|stringData)$', or give render the plaintext Secret to encrypt", f, v.Content[i].Value)
			}
		}
	}
	return ""
}

// checkPlain says what keeps a plaintext Secret from being encrypted as
// Flux decrypts it ("" when nothing does), as "field: problem", and
// registers its values with package redact. It never quotes a value.
func checkPlain(m *yaml.Node) string {
	var problem string
	note := func(msg string, args ...any) {
		if problem == "" {
			problem = fmt.Sprintf(msg, args...)
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i].Value; !secretFields[k] {
			note("%s is not a field of a Secret: it would be written unencrypted (only data and stringData are encrypted)", k)
		}
	}
	if a := field(field(m, "metadata"), "annotations"); field(a, lastApplied) != nil {
		note("metadata.annotations.%s holds a copy of the Secret, in plaintext: leave the annotation out", lastApplied)
	}
	size, keys := 0, 0
	for _, f := range []string{"data", "stringData"} {
		v := field(m, f)
		if v == nil || v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.MappingNode {
			note("%s is not a mapping of keys to values", f)
			continue
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i].Value, v.Content[i+1]
			keys++
			if val.Kind != yaml.ScalarNode || (val.Tag != "!!str" && val.Tag != "!!binary") {
				note("%s.%s is not a string: quote it", f, k)
				continue
			}
			value := []byte(val.Value)
			if f == "data" {
				b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val.Value))
				if err != nil {
					note("data.%s is not valid base64 (put plain text in stringData instead)", k)
					continue
				}
				value = b
			}
			redact.Add(string(value))
			size += len(value)
		}
	}
	if keys == 0 {
		note("data: the Secret has no data or stringData: there is nothing to encrypt; leave the empty Secret out, or give it its keys")
	}
	if size > MaxSecretBytes {
		note("data: its data and stringData hold %d bytes, more than the %d (1 MiB) a Kubernetes Secret can hold", size, MaxSecretBytes)
	}
	return problem
}
