package secrets

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keys"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"gopkg.in/yaml.v3"
)

// EncryptedRegex is the SOPS encrypted_regex render encrypts with: only
// data and stringData, so that a Secret's kind, name, namespace and labels
// stay readable in diffs and to kustomize, as Flux's guide has it.
const EncryptedRegex = "^(data|stringData)$"

// sopsModule is SOPS's module path, whose version goes in the metadata.
const sopsModule = "github.com/getsops/sops/v3"

// sopsVersion is the version of SOPS linked in, as SOPS writes it in its
// metadata (without the v). SOPS's own version package would bring an
// HTTP client and a CLI library along, so it is read from the build.
var sopsVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == sopsModule && len(m.Version) > 1 {
				return m.Version[1:]
			}
		}
	}
	return "3.13.3"
})

// yamlStore is SOPS's YAML format, with Kubernetes' two-space indent.
func yamlStore() *sopsyaml.Store {
	return sopsyaml.NewStore(&config.YAMLStoreConfig{Indent: 2})
}

// encryptDocument encrypts one YAML document (a Secret) with SOPS to the
// age recipients: a fresh data key, encrypted to each recipient, and
// data and stringData encrypted with it (AES256-GCM), as `sops --encrypt
// --age ... --encrypted-regex '^(data|stringData)$'` does. The result is
// one YAML document with its own sops metadata, which kustomize-controller
// decrypts on its own.
func encryptDocument(plain []byte, recipients []string) ([]byte, error) {
	store := yamlStore()
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	if len(branches) != 1 {
		return nil, fmt.Errorf("sops: %d documents, want one", len(branches))
	}
	group := make(sops.KeyGroup, 0, len(recipients))
	for _, r := range recipients {
		k, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("age recipient %d: %w", len(group)+1, err)
		}
		group = append(group, keys.MasterKey(k))
	}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		return nil, err
	}
	// Each key encrypts the data key itself: no key service (gRPC) is
	// needed for age.
	for _, k := range group {
		if err := k.Encrypt(dataKey); err != nil {
			return nil, fmt.Errorf("sops: encrypt the data key: %w", err)
		}
	}
	tree := sops.Tree{
		Branches: branches,
		Metadata: sops.Metadata{
			KeyGroups:      []sops.KeyGroup{group},
			EncryptedRegex: EncryptedRegex,
			Version:        sopsVersion(),
		},
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	tree.Metadata.LastModified = time.Now().UTC().Truncate(time.Second)
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("sops: encrypt the MAC: %w", err)
	}
	out, err := store.EmitEncryptedFile(tree)
	if err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	return out, nil
}

// sealFile returns data, a file of YAML documents, with every plaintext
// Secret encrypted (each on its own: Flux decrypts each object it builds
// by itself, with that object's sops metadata). The file is written again
// from its documents, each ending "---"-separated, without comments in
// the Secrets (a comment could quote a value, and would not be encrypted);
// empty documents are left out.
func sealFile(s *scanned, recipients []string) ([]byte, error) {
	var out bytes.Buffer
	n := 0
	for _, d := range s.docs {
		if d.node == nil {
			continue
		}
		var b []byte
		var err error
		switch d.kind {
		case plainSecret:
			stripComments(d.node)
			plain, err := encodeNode(d.node)
			if err != nil {
				return nil, err
			}
			if b, err = encryptDocument(plain, recipients); err != nil {
				return nil, fmt.Errorf("%s: %w", d.where(), err)
			}
		default:
			if b, err = encodeNode(d.node); err != nil {
				return nil, err
			}
		}
		if n > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
		n++
	}
	return out.Bytes(), nil
}

// encodeNode writes one document, with Kubernetes' two-space indent.
func encodeNode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// stripComments removes every comment of n's tree.
func stripComments(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		stripComments(c)
	}
}
