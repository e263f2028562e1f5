package inputs

import (
	"github.com/render-dev/render/internal/redact"
)

// publicKeys are Secret keys whose values are not secret: identifiers that
// also name things (a user name, which is often also an organisation or a
// repository's owner; an S3 access key ID, often a bucket's user name), and
// public material (known hosts, a CA certificate). Masking them would
// mangle every message that names the thing. Every other value a Secret
// holds (a password, a token, a secret access key, a private key and its
// passphrase, and any key render does not read) is registered with package
// redact as it is loaded, so it is never printed in a message.
var publicKeys = map[string]bool{"username": true, "accessKeyID": true, "knownHosts": true, "known_hosts": true, "ca.crt": true}

// registerSecret hands a secret's values to package redact.
func registerSecret(values map[string][]byte) {
	for k, v := range values {
		if !publicKeys[k] {
			redact.Add(string(v))
		}
	}
}
