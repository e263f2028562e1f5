package bootstrap

import (
	"fmt"
	"strings"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
)

// fluxDecryption is what a Kustomization of destination t needs to apply
// the Secrets render encrypts for it with SOPS (spec.secrets.policy
// encrypt): kustomize-controller's decryption block, naming the worker's
// Secret that holds the age private key, and a note saying so. Nothing
// for a destination that does not encrypt.
func fluxDecryption(p *inputs.Platform, t *target, namespace string) (*kv, string) {
	pol := p.SecretsPolicy(t.dest.Name)
	if !pol.Encrypts() {
		return nil, ""
	}
	dec := &kv{"decryption", mapping{
		{"provider", "sops"},
		{"secretRef", mapping{{"name", pol.DecryptionSecret}}},
	}}
	note := fmt.Sprintf("Destination %s's Secrets are encrypted with SOPS for age (recipients %s): create Secret %s in namespace %s on the worker first, with key %s holding the worker's age private key (age-keygen writes one; its public key is one of those recipients). kustomize-controller decrypts with it; render never sees it.",
		t.dest.Name, strings.Join(pol.Recipients, ", "), pol.DecryptionSecret, namespace, inputs.AgeKeyFile)
	return dec, note
}

// argoSOPS refuses to print Argo CD Applications for a destination whose
// Secrets render encrypts with SOPS, unless plugin names the config
// management plugin that decrypts them: Argo CD has no SOPS support of its
// own, and would apply the encrypted values as they are. With a plugin it
// returns the note to print.
func argoSOPS(p *inputs.Platform, t *target, plugin string) (string, error) {
	pol := p.SecretsPolicy(t.dest.Name)
	if !pol.Encrypts() {
		return "", nil
	}
	if plugin == "" {
		return "", &renderer.InputError{File: p.DestinationFile(t.dest.Name), Where: "Destination " + t.dest.Name,
			Msg: "its spec.secrets.policy is encrypt: render writes its Secrets encrypted with SOPS, and Argo CD cannot decrypt them by itself (it would apply the encrypted values). Install a config management plugin on the repo server that decrypts SOPS with the worker's age key (for example one running sops --decrypt or ksops) and pass its name with --sops-plugin NAME, or reconcile this destination with Flux (render bootstrap flux), whose kustomize-controller decrypts SOPS"}
	}
	return fmt.Sprintf("Destination %s's Secrets are encrypted with SOPS for age (recipients %s): the Applications use config management plugin %s instead of directory.recurse; it must decrypt them with the worker's age private key and print every manifest below the Application's path, folders included. Argo CD alone would apply the encrypted values.",
		t.dest.Name, strings.Join(pol.Recipients, ", "), plugin), nil
}

// usePlugin makes Application d read its source through config
// management plugin name instead of directory.recurse.
func usePlugin(d *doc, name string) {
	for i, e := range d.spec {
		if e.key != "source" {
			continue
		}
		src, _ := e.value.(mapping)
		var out mapping
		for _, f := range src {
			if f.key == "directory" {
				f = kv{"plugin", mapping{{"name", name}}}
			}
			out = append(out, f)
		}
		d.spec[i].value = out
	}
}
