package storekind

import (
	"fmt"

	"github.com/render-dev/render/statestore/gitstore"
)

// gitSigner reads a GitStateStore's signing key (spec.signing) from its
// secret: signingKey, and signingKeyPassphrase when the key is encrypted.
// Every problem is an InputError naming the store and the field, known
// before anything is written; no key material is ever in a message. It
// also returns a digest of the secret, so a kept client notices a rotated
// key.
func gitSigner(v env, gs *GitStateStore) (gitstore.Signer, string, error) {
	sg := gs.Signing
	if sg == nil {
		return nil, "", nil
	}
	ref, field := sg.SecretRef, "spec.signing.secretRef"
	if ref == nil {
		ref, field = gs.SecretRef, "spec.secretRef"
	}
	secret, err := v.secret(ref, true)
	if err != nil {
		return nil, "", err
	}
	bad := func(format string, args ...any) error {
		return v.bad(fmt.Sprintf("spec.signing: secret %s (%s) "+format, append([]any{ref.Name, field}, args...)...))
	}
	key := secret["signingKey"]
	if len(key) == 0 {
		return nil, "", bad("has no key \"signingKey\"")
	}
	s, err := gitstore.NewSigner(sg.Format, key, secret["signingKeyPassphrase"])
	if err != nil {
		return nil, "", bad("signingKey (format %s): %v", sg.Format, err)
	}
	return s, "|sign:" + sg.Format + ":" + secretDigest(secret), nil
}
