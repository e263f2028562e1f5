package secrets

import (
	"context"
	"fmt"
	"sort"

	"github.com/render-dev/render/renderer"
)

// Check refuses, before anything is written, what the policies of the
// destinations forbid in plan, whose files come from files (the
// workflow's output, or a Promise's dependencies, by path): for every
// group placed on a destination that encrypts or refuses, a plaintext
// Secret (refuse), a Secret that cannot be encrypted as Flux decrypts it
// (encrypt: no data, a value that is not base64, more than a Secret holds,
// a field outside data and stringData, a file Flux reads that is not
// .yaml), and, under both, a kind Secret of another apiVersion, a Secret
// inside a List and a kustomization's secretGenerator. Every Secret's
// values are registered with package redact, whatever the policy. source
// names what the files are for messages ("" for the workflow's output).
// Its errors are *renderer.InputError naming the file, the document and
// the field.
func Check(ctx context.Context, plan *renderer.Plan, files []renderer.File, dests Destinations, source string) error {
	scans := map[string]*scanned{}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, err := scan(f.Path, f.Data)
		if err != nil {
			return &renderer.InputError{File: name(source, f.Path), Msg: err.Error()}
		}
		if s.secrets {
			scans[f.Path] = s
		}
	}
	if len(scans) == 0 {
		return nil
	}
	for _, g := range plan.Groups {
		names := append([]string(nil), g.Destinations...)
		sort.Strings(names)
		for _, dn := range names {
			d, ok := dests[dn]
			if !ok || d.Policy.Mode == Allow {
				continue
			}
			for _, f := range g.Files {
				s := scans[f]
				if s == nil {
					continue
				}
				if err := checkFile(name(source, f), f, s, d); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// name is how messages name file f.
func name(source, f string) string {
	if source != "" {
		return source
	}
	return f
}

// checkFile checks one scanned file bound for d (whose policy is encrypt
// or refuse).
func checkFile(file, rel string, s *scanned, d Destination) error {
	for _, doc := range s.docs {
		bad := func(msg string, args ...any) error {
			return &renderer.InputError{File: file, Where: doc.where(), Msg: fmt.Sprintf(msg, args...)}
		}
		if doc.bad != "" {
			return bad("%s (destination %s's spec.secrets.policy is %s)", doc.bad, d.Name, d.Policy.Mode)
		}
		if doc.kind != plainSecret {
			continue
		}
		switch {
		case d.Policy.Mode == Refuse:
			return bad("a plaintext Secret goes to destination %s, whose spec.secrets.policy is refuse (%s): set policy: encrypt with the worker's age public key, so that render encrypts it with SOPS, or policy: allow to write it as it is", d.Name, d.Set)
		case doc.invalid != "":
			return bad("%s (destination %s encrypts its Secrets with SOPS)", doc.invalid, d.Name)
		case !isYAML(rel):
			return bad("a Secret in a file whose name does not end in .yaml or .yml goes to destination %s, which encrypts its Secrets: render encrypts Secrets in .yaml and .yml files only (those Flux reads as manifests); rename the file", d.Name)
		}
	}
	return nil
}

// HoldsSecret reports whether a file holds a Secret (plaintext or
// encrypted) or something every policy but allow refuses: what a move
// between destinations with different policies must not carry as it is.
func HoldsSecret(path string, data []byte) bool {
	s, err := scan(path, data)
	return err != nil || s.secrets
}
