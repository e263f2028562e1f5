package engine

import (
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// commitSettings gives a git store's update its message composer and its
// author, from the store's spec.commit or --commit-template. The template
// is run here, before anything is written, on the destinations the update
// writes with every combination of zero and non-zero counts (added,
// changed, deleted), so that a template failing on any branch those counts
// choose is bad input (exit 2, naming the store and field or the flag, or
// the annotation that makes it fail). A failure of the composer at write
// time, on counts no run here had, is an InputError too: the store writes
// nothing and the render exits 2.
func (e *Engine) commitSettings(p *inputs.Platform, ref renderer.StoreRef, wf renderer.Workflow, obj *inputs.Object, u *statestore.Update) error {
	st := p.Store(ref)
	if st == nil {
		return nil
	}
	spec, ok := e.opts.Kinds.Commit(st)
	if !ok {
		return nil
	}
	where := ref.Kind + " " + ref.Name
	if spec == nil {
		spec = &inputs.Commit{}
	}
	if spec.AuthorAnnotation != "" && obj != nil {
		if v, ok := obj.Annotations[spec.AuthorAnnotation]; ok {
			name, email, err := inputs.ParseAuthor(v)
			if errors.Is(err, inputs.ErrNotAuthor) {
				return &renderer.InputError{File: obj.File, Msg: fmt.Sprintf("annotation %s (spec.commit.authorAnnotation of %s): %q is not an author as \"Name <email>\"", spec.AuthorAnnotation, where, v)}
			}
			if err != nil {
				return &renderer.InputError{File: obj.File, Msg: fmt.Sprintf("annotation %s (spec.commit.authorAnnotation of %s): %v", spec.AuthorAnnotation, where, err)}
			}
			u.Author = &statestore.Author{Name: name, Email: email}
		}
	}
	text, field, file := spec.Template, "spec.commit.template", st.Meta().File
	if e.opts.CommitTemplate != "" {
		text, field, file = e.opts.CommitTemplate, "--commit-template", e.opts.CommitTemplateFile
	}
	if text == "" {
		return nil
	}
	bad := func(err error) error {
		var ae *inputs.AnnotationError
		if errors.As(err, &ae) && obj != nil {
			reader := field + " of " + where
			if field == "--commit-template" {
				reader = "--commit-template for " + where
			}
			return &renderer.InputError{File: obj.File, Msg: fmt.Sprintf("annotation %s (read by %s): %s", strings.Join(ae.Names, ", "), reader, ae.Msg)}
		}
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
	data := func(d statestore.Diff) inputs.CommitData {
		return e.commitData(p, ref, wf, base, annotations, dests, d)
	}
	for _, d := range countBranches(data(statestore.Diff{})) {
		if _, err := e.composeMessage(t, base, d); err != nil {
			return bad(err)
		}
	}
	u.Compose = func(d statestore.Diff) (statestore.Message, error) {
		m, err := e.composeMessage(t, base, data(d))
		if err != nil {
			return m, bad(err)
		}
		return m, nil
	}
	return nil
}

// countBranches is d (every count zero) and d with each combination of
// added, changed and deleted counts made non-zero in every destination,
// with the totals to match: the runs of a template that validation makes.
func countBranches(d inputs.CommitData) []inputs.CommitData {
	out := []inputs.CommitData{d}
	for mask := 1; mask < 8; mask++ {
		v := d
		v.Destinations = append([]inputs.DestinationCount(nil), d.Destinations...)
		n := max(len(v.Destinations), 1)
		set := func(bit int) int {
			if mask&bit != 0 {
				return 1
			}
			return 0
		}
		for i := range v.Destinations {
			v.Destinations[i].Added, v.Destinations[i].Changed, v.Destinations[i].Deleted = set(1), set(2), set(4)
		}
		v.Added, v.Changed, v.Deleted = n*set(1), n*set(2), n*set(4)
		out = append(out, v)
	}
	return out
}

// commitData is what the template reads for one planned diff.
func (e *Engine) commitData(p *inputs.Platform, ref renderer.StoreRef, wf renderer.Workflow, base statestore.Message, annotations map[string]string, dests []string, d statestore.Diff) inputs.CommitData {
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
	return data
}

// composeMessage runs the template on one diff's data; render's trailers
// follow the template's text.
func (e *Engine) composeMessage(t *template.Template, base statestore.Message, data inputs.CommitData) (statestore.Message, error) {
	subject, body, err := inputs.ExecCommitTemplate(t, data, e.opts.Getenv)
	if err != nil {
		return statestore.Message{}, err
	}
	return statestore.Message{Subject: subject, Body: body, Trailers: base.Trailers}, nil
}
