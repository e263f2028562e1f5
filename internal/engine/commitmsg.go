package engine

import (
	"fmt"
	"net/mail"
	"text/template"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// commitSettings gives a git store's update its message composer and its
// author, from the store's spec.commit or --commit-template. The template
// is run once here, on the destinations the update writes with zero
// counts, so that a template that fails is bad input (exit 2, naming the
// store and field or the flag) before anything is written.
func (e *Engine) commitSettings(p *inputs.Platform, ref renderer.StoreRef, wf renderer.Workflow, obj *inputs.Object, u *statestore.Update) error {
	if ref.Kind != "GitStateStore" {
		return nil
	}
	gs := p.GitStores[ref.Name]
	where := "GitStateStore " + ref.Name
	spec := gs.Commit
	if spec == nil {
		spec = &inputs.Commit{}
	}
	if spec.AuthorAnnotation != "" && obj != nil {
		if v, ok := obj.Annotations[spec.AuthorAnnotation]; ok {
			a, err := mail.ParseAddress(v)
			if err != nil || a.Name == "" {
				return &renderer.InputError{File: obj.File, Msg: fmt.Sprintf("annotation %s (spec.commit.authorAnnotation of %s): %q is not an author as \"Name <email>\"", spec.AuthorAnnotation, where, v)}
			}
			u.Author = &statestore.Author{Name: a.Name, Email: a.Address}
		}
	}
	text, field, file := spec.Template, "spec.commit.template", gs.File
	if e.opts.CommitTemplate != "" {
		text, field, file = e.opts.CommitTemplate, "--commit-template", e.opts.CommitTemplateFile
	}
	if text == "" {
		return nil
	}
	bad := func(err error) error {
		if field == "--commit-template" {
			return &renderer.InputError{File: file, Where: "--commit-template", Msg: fmt.Sprintf("for %s: %v", where, err)}
		}
		return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("%s: %v", field, err)}
	}
	t, err := inputs.ParseCommitTemplate(text)
	if err != nil {
		return bad(err)
	}
	annotations := map[string]string{}
	for _, k := range spec.Annotations {
		annotations[k] = ""
		if obj != nil {
			annotations[k] = obj.Annotations[k]
		}
	}
	base := u.Message
	dests := u.Destinations
	compose := func(d statestore.Diff) (statestore.Message, error) {
		return e.composeMessage(t, p, ref, wf, base, annotations, dests, d)
	}
	if _, err := compose(statestore.Diff{}); err != nil {
		return bad(err)
	}
	u.Compose = compose
	return nil
}

// composeMessage runs the template on one planned diff; render's trailers
// follow the template's text.
func (e *Engine) composeMessage(t *template.Template, p *inputs.Platform, ref renderer.StoreRef, wf renderer.Workflow, base statestore.Message, annotations map[string]string, dests []string, d statestore.Diff) (statestore.Message, error) {
	data := inputs.CommitData{
		Workflow: inputs.CommitWorkflow{Type: string(wf.Type), Action: string(wf.Action), Promise: wf.Promise, Pipeline: wf.Pipeline, Name: wf.Name, Namespace: wf.Namespace},
		Store:    ref.String(), Subject: base.Subject, Annotations: annotations, Version: e.opts.Version,
		Added: len(d.Added), Changed: len(d.Changed), Deleted: len(d.Deleted),
	}
	seen := map[string]bool{}
	for _, dd := range splitByDestination(p, ref, d) {
		seen[dd.Path] = true
		data.Destinations = append(data.Destinations, inputs.DestinationCount{Name: dd.Destination, Path: dd.Path, Added: len(dd.Added), Changed: len(dd.Changed), Deleted: len(dd.Deleted)})
	}
	// Destinations the update writes without changes there count zero.
	for _, dest := range p.Destinations {
		for _, path := range dests {
			if dest.Store == ref && dest.Path == path && !seen[path] {
				seen[path] = true
				data.Destinations = append(data.Destinations, inputs.DestinationCount{Name: dest.Name, Path: path})
			}
		}
	}
	subject, body, err := inputs.ExecCommitTemplate(t, data, e.opts.Getenv)
	if err != nil {
		return statestore.Message{}, err
	}
	return statestore.Message{Subject: subject, Body: body, Trailers: base.Trailers}, nil
}
