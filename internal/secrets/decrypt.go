package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"gopkg.in/yaml.v3"
)

// Decrypt decrypts every SOPS-encrypted document of a file render wrote,
// with an age identity (AGE-SECRET-KEY-1...), checks each document's MAC,
// and returns the file's documents in plaintext, "---"-separated. render
// never holds a private key, so it never calls this: it is for tests and
// for a person checking a store, and does what kustomize-controller does
// on the worker (through SOPS's library, one document at a time).
func Decrypt(file []byte, identity string) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(file))
	var out bytes.Buffer
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(n.Content) == 0 {
			continue
		}
		b, err := encodeNode(n.Content[0])
		if err != nil {
			return nil, err
		}
		if s := field(n.Content[0], "sops"); s != nil {
			if b, err = decryptDocument(b, identity); err != nil {
				return nil, fmt.Errorf("document %d: %w", i, err)
			}
		}
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
	}
}

// decryptDocument decrypts one SOPS document with an age identity.
func decryptDocument(doc []byte, identity string) ([]byte, error) {
	store := yamlStore()
	tree, err := store.LoadEncryptedFile(doc)
	if err != nil {
		return nil, err
	}
	var ids sopsage.ParsedIdentities
	if err := ids.Import(identity); err != nil {
		return nil, errors.New("the age identity is not valid")
	}
	var dataKey []byte
	for _, g := range tree.Metadata.KeyGroups {
		for _, k := range g {
			ak, ok := k.(*sopsage.MasterKey)
			if !ok {
				continue
			}
			ids.ApplyToMasterKey(ak)
			if dk, err := ak.Decrypt(); err == nil {
				dataKey = dk
			}
		}
	}
	if dataKey == nil {
		return nil, errors.New("none of its age recipients is the identity's")
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(dataKey, cipher)
	if err != nil {
		return nil, err
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("MAC: %w", err)
	}
	if stored != mac {
		return nil, errors.New("the MAC does not match: the document was changed after it was encrypted")
	}
	return store.EmitPlainFile(tree.Branches)
}
