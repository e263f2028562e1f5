package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// secretDestinations is every destination's policy for the Secrets a
// workflow writes (internal/secrets), with the digest key of each one
// that encrypts, read from the platform Secret its
// spec.secrets.sops.digestKeyRef names: a missing Secret or key, or a key
// shorter than inputs.MinDigestKeyBytes, is bad input.
func secretDestinations(p *inputs.Platform) (secrets.Destinations, error) {
	out := secrets.Destinations{}
	for _, d := range p.Destinations {
		pol := p.SecretsPolicy(d.Name)
		sd := secrets.Destination{Name: d.Name, Path: d.Path, Store: d.Store,
			Policy: secrets.Policy{Mode: secrets.Mode(pol.Policy), Recipients: pol.Recipients},
			Set:    "the Destination's spec.secrets.policy"}
		if !p.SecretsPolicySet(d.Name) {
			sd.Set = "the default when a Destination has no spec.secrets"
		}
		if pol.Encrypts() {
			bad := func(msg string, args ...any) error {
				return &renderer.InputError{File: p.DestinationFile(d.Name), Where: "Destination " + d.Name, Msg: fmt.Sprintf(msg, args...)}
			}
			values, ok := p.Secret(pol.DigestKeyRef)
			if !ok {
				return nil, bad("spec.secrets.sops.digestKeyRef: secret %q was not found: add it to the platform configuration (a Secret document, or a folder in --secrets-dir) with key %s, %d or more random bytes (openssl rand -base64 48)", pol.DigestKeyRef.Name, inputs.DigestKeyField, inputs.MinDigestKeyBytes)
			}
			key, ok := values[inputs.DigestKeyField]
			if !ok {
				return nil, bad("spec.secrets.sops.digestKeyRef: secret %q has no key %s", pol.DigestKeyRef.Name, inputs.DigestKeyField)
			}
			if len(key) < inputs.MinDigestKeyBytes {
				return nil, bad("spec.secrets.sops.digestKeyRef: %s of secret %q is %d bytes: use %d or more random bytes (openssl rand -base64 48), which nobody could guess", inputs.DigestKeyField, pol.DigestKeyRef.Name, len(key), inputs.MinDigestKeyBytes)
			}
			sd.Policy.DigestKey = key
		}
		out[d.Name] = sd
	}
	return out, nil
}

// checkSecrets refuses what the destinations' policies (dests) forbid of
// the Secrets in files, as plan places them (see secrets.Check): the
// workflow's output (source "") or other files, named source in
// messages. A delete writes nothing: no policy to apply.
func checkSecrets(ctx context.Context, wf renderer.Workflow, dests secrets.Destinations, plan *renderer.Plan, files []renderer.File, source string) error {
	if wf.Action == renderer.Delete {
		return nil
	}
	return secrets.Check(ctx, plan, files, dests, source)
}

// sealSecrets encrypts the Secrets plan sends to destinations that
// encrypt them, keeping the ciphertext of those that did not change in
// the stores the pass read (see secrets.Seal), after checking plan
// against every destination's policy again (it may keep earlier
// placements preflight did not know of).
func (r *rendering) sealSecrets(ctx context.Context, rd *passRead, plan *renderer.Plan) (*secrets.Sealed, error) {
	if plan != r.early.plan {
		if err := checkSecrets(ctx, r.wf, r.early.dests, plan, rd.in.Output, ""); err != nil {
			return nil, err
		}
	}
	return r.seal(ctx, rd, plan, r.key)
}

// seal runs secrets.Seal on plan, for workload key, with what the stores
// the pass read (rd) hold of it.
func (r *rendering) seal(ctx context.Context, rd *passRead, plan *renderer.Plan, key string) (*secrets.Sealed, error) {
	prev := map[renderer.StoreRef]secrets.Previous{}
	for ref, v := range rd.views {
		for _, rec := range rd.recs[ref] {
			if rec.Workload != key {
				continue
			}
			rec := rec
			prev[ref] = secrets.Previous{Record: &rec, Snap: v.snap}
			// The files it may keep, read in one go.
			var h statestore.Hint
			for p := range rec.Sealed {
				h.Reads = append(h.Reads, p)
			}
			statestore.Prefetch(v.snap, h)
		}
	}
	return secrets.Seal(ctx, plan, key, r.early.dests, func(ref renderer.StoreRef) secrets.Previous { return prev[ref] })
}

// sealStatic checks and seals a Promise's static dependencies (workload
// skey, planned as static), which may hold Secrets too.
func (r *rendering) sealStatic(ctx context.Context, rd *passRead, static *renderer.Plan, skey string) (*secrets.Sealed, error) {
	if pr := rd.in.Promise; pr != nil && len(pr.Dependencies) > 0 {
		files := []renderer.File{{Path: renderer.StaticDependenciesFile(pr.Name), Data: pr.Dependencies}}
		if err := checkSecrets(ctx, r.wf, r.early.dests, static, files, fmt.Sprintf("Promise %s (spec.dependencies)", pr.Name)); err != nil {
			return nil, err
		}
	}
	return r.seal(ctx, rd, static, skey)
}

// setSealed gives the records of workload key's updates the entries of
// the files it holds encrypted, per store (statestore.Record.Sealed).
func (s storeUpdates) setSealed(key string, sealed map[renderer.StoreRef]map[string]statestore.SealedFile) {
	for ref, us := range s {
		for i := range us {
			if us[i].Workload != key || us[i].Record == nil {
				continue
			}
			rc := *us[i].Record
			rc.Sealed = sealed[ref]
			us[i].Record = &rc
		}
	}
}

// secretsBlockMove says why a drain must not move group files (those of
// record rec below prefix, in store ref) from destination from to
// destination to: they hold Secrets, and the two destinations' spec.secrets
// differ, so copied as they are they would be ciphertext the new worker
// cannot decrypt, or plaintext where the policy forbids it. A render of the
// workload writes them for the new destination. "" when the move may go.
func (d *drain) secretsBlockMove(from, to *renderer.Destination, rec statestore.Record, ref renderer.StoreRef, prefix string) (string, error) {
	a, b := d.plat.SecretsPolicy(from.Name), d.plat.SecretsPolicy(to.Name)
	if a.Policy == b.Policy && slices.Equal(a.Recipients, b.Recipients) {
		return "", nil
	}
	snap, err := d.snapshot(ref)
	if err != nil {
		return "", err
	}
	for _, f := range rec.Files {
		if !strings.HasPrefix(f, prefix) {
			continue
		}
		data, err := snap.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", f, err)
		}
		if secrets.HoldsSecret(f, data) {
			return fmt.Sprintf("its file %s holds a Secret, and destinations %s and %s have different spec.secrets (%s, %s): copied as it is, it would be ciphertext the new worker cannot decrypt or plaintext its policy forbids; re-run the workflow to write it for %s",
				strings.TrimPrefix(f, prefix), from.Name, to.Name, a.Policy, b.Policy, to.Name), nil
		}
	}
	return "", nil
}
