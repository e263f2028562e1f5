// Package secrets applies each destination's policy to the Kubernetes
// Secrets a workflow writes: encrypt them with SOPS to the destination's
// age recipients (as Flux's kustomize-controller decrypts them), refuse
// them as bad input, or allow them as they are. It runs between the
// renderer's plan and the stores: Check refuses what a policy forbids
// before any store is contacted, and Seal returns the plan with every
// Secret bound for an encrypting destination encrypted, each document on
// its own (in aggregated files too), keeping the ciphertext a store
// already holds for a Secret that did not change (a keyed digest in the
// workload's record says so; see Digest).
package secrets

import (
	"fmt"
	"io"
	"strings"

	"github.com/getsops/sops/v3/logging"

	"github.com/render-dev/render/renderer"
)

func init() {
	// SOPS logs through logrus to the process's stderr, around render's
	// redacting writers; render reports what it did itself.
	for _, l := range logging.Loggers {
		l.SetOutput(io.Discard)
	}
}

// Mode is what a destination does with Secrets.
type Mode string

// Modes: see inputs.SecretsEncrypt, SecretsRefuse and SecretsAllow.
const (
	Encrypt Mode = "encrypt"
	Refuse  Mode = "refuse"
	Allow   Mode = "allow"
)

// Policy is one destination's policy for Secrets.
type Policy struct {
	Mode Mode
	// Recipients are age public keys, sorted (Encrypt).
	Recipients []string
	// DigestKey keys the digests of what was encrypted (Encrypt): material
	// render holds and the store does not (see Digest).
	DigestKey []byte
}

// Destination is one destination as this package sees it: where its files
// go, and its policy.
type Destination struct {
	Name   string
	Path   string // in its store
	Store  renderer.StoreRef
	Policy Policy
	// Set names where the policy comes from, for messages: "the
	// Destination's spec.secrets.policy" or "the default".
	Set string
}

// Destinations are the platform's destinations, by name.
type Destinations map[string]Destination

// at returns the destination of store ref whose folder holds p (a path in
// the store), or false.
func (ds Destinations) at(ref renderer.StoreRef, p string) (Destination, bool) {
	for _, d := range ds {
		if d.Store == ref && strings.HasPrefix(p, d.Path+"/") {
			return d, true
		}
	}
	return Destination{}, false
}

// Action is what a render does with one Secret.
type Action string

// Actions, as the reports name them.
const (
	// Encrypted: encrypted now, to the destination's recipients.
	Encrypted Action = "encrypted"
	// Kept: unchanged since the last render (same value, same
	// recipients): the ciphertext the store holds is kept.
	Kept Action = "kept"
	// PreEncrypted: the workflow encrypted it with SOPS itself; written as
	// it is.
	PreEncrypted Action = "sops"
	// Plaintext: written as it is (policy allow).
	Plaintext Action = "plaintext"
)

// Note says what happened to one Secret, for the reports (--dry-run, -o
// json): never its value.
type Note struct {
	Store       renderer.StoreRef
	Destination string
	// File is the file it is written to, relative to the destination
	// folder (an aggregated file for aggregatedYAML destinations).
	File string
	// Secret is namespace/name (name alone without a namespace).
	Secret string
	Action Action
	// Recipients is how many age recipients it is encrypted to.
	Recipients int
}

// String is the note as one line of the text report.
func (n Note) String() string {
	what := "Secret " + n.Secret + " in " + n.File
	switch n.Action {
	case Encrypted:
		return fmt.Sprintf("%s: encrypted with SOPS for %d age recipient%s", what, n.Recipients, plural(n.Recipients))
	case Kept:
		return fmt.Sprintf("%s: encrypted with SOPS for %d age recipient%s (unchanged: the stored ciphertext is kept)", what, n.Recipients, plural(n.Recipients))
	case PreEncrypted:
		return what + ": encrypted with SOPS by the workflow, written as it is"
	default:
		return what + ": PLAINTEXT (spec.secrets.policy allow)"
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
