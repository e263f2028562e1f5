package inputs

import (
	"fmt"
	"sort"
	"strings"
)

// How a store's secretRef finds its Secret.
//
// A Secret document of the platform configuration is found by its
// namespace and name, exactly: a reference {name: creds, namespace: team-b}
// is never served by team-a/creds. A document without metadata.namespace
// is in namespace "default", and so is a reference without a namespace, as
// Kubernetes reads both. Two Secret documents with one namespace and name
// are refused (exit 2, naming both files): which one render would use
// would depend on the order it read the files in.
//
// A Secret mounted with --secrets-dir (DIR/<name>/<key>, as a pod mounts
// one) carries no namespace: a pod can mount Secrets of its own namespace
// only, and which of them it mounts is the operator's choice. So a mounted
// Secret answers a reference by name, whatever namespace the reference
// names, and only when no Secret document has that namespace and name:
// a document that matches exactly wins.

// DefaultSecretNamespace is the namespace of a Secret document, or of a
// secretRef, that names none.
const DefaultSecretNamespace = "default"

// String is the reference as namespace/name, its namespace defaulted.
func (r *SecretRef) String() string {
	if r == nil {
		return "<none>"
	}
	return r.namespace() + "/" + r.Name
}

func (r *SecretRef) namespace() string {
	if r.Namespace == "" {
		return DefaultSecretNamespace
	}
	return r.Namespace
}

// secretOrigin is where a Secret document was read: a file and the
// document in it.
type secretOrigin struct{ file, where string }

func (o secretOrigin) String() string { return o.file + ": " + o.where }

// addSecret keeps a Secret document's values under namespace/name, and
// refuses a second document with the same namespace and name.
func (p *Platform) addSecret(file, where, namespace, name string, values map[string][]byte) error {
	if namespace == "" {
		namespace = DefaultSecretNamespace
	}
	key := namespace + "/" + name
	if first, dup := p.secretFrom[key]; dup {
		return fmt.Errorf("Secret %s is defined twice: here and in %s; keep one (which one render used would depend on the order it reads the files in)", key, first)
	}
	p.secretFrom[key] = secretOrigin{file, where}
	p.Secrets[key] = values
	return nil
}

// addMounted keeps a Secret mounted as DIR/<name>/<key>.
func (p *Platform) addMounted(name string, values map[string][]byte) {
	p.mounted[name] = values
}

// Secret resolves a store's secretRef: the Secret document with its
// namespace and name, or else a Secret mounted under its name (see the
// rules above). ok is false when neither exists.
func (p *Platform) Secret(ref *SecretRef) (map[string][]byte, bool) {
	if ref == nil {
		return nil, false
	}
	if s, ok := p.Secrets[ref.String()]; ok {
		return s, true
	}
	s, ok := p.mounted[ref.Name]
	return s, ok
}

// SecretNotFound says why ref resolves to nothing, for the message that
// names the store: what was looked for, and Secrets of that name in other
// namespaces, which a reference never falls back to.
func (p *Platform) SecretNotFound(ref *SecretRef) string {
	msg := fmt.Sprintf("no Secret %s in the platform configuration", ref)
	var others []string
	for key, o := range p.secretFrom {
		if ns, name, _ := strings.Cut(key, "/"); name == ref.Name && ns != ref.namespace() {
			others = append(others, fmt.Sprintf("%s (%s)", key, o))
		}
	}
	sort.Strings(others)
	if len(others) > 0 {
		msg += fmt.Sprintf("; %s is in another namespace, and a reference is resolved by its namespace and name exactly: fix spec.secretRef.namespace, or define the Secret in namespace %s", strings.Join(others, " and "), ref.namespace())
	}
	if p.secretsDir == "" {
		msg += ", and no --secrets-dir was given"
	} else {
		msg += fmt.Sprintf(", and none mounted as %s/%s/<key>", p.secretsDir, ref.Name)
	}
	return msg
}
