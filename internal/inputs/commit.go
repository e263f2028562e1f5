package inputs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"
)

// CommitData is what a commit message template (spec.commit.template or
// --commit-template) reads.
type CommitData struct {
	// Workflow is the workflow identity: .Workflow.Type, .Action, .Promise,
	// .Pipeline, .Name, .Namespace.
	Workflow CommitWorkflow
	// Store names the store ("GitStateStore/default").
	Store string
	// Subject is render's own subject line, for templates that extend it.
	Subject string
	// Destinations are the destinations the write touches, with their
	// share of the diff; Added, Changed and Deleted are the totals.
	Destinations            []DestinationCount
	Added, Changed, Deleted int
	// Annotations are object.yaml's annotations named in
	// spec.commit.annotations ("" when the request lacks one); any other
	// key is an error.
	Annotations map[string]string
	// Version is render's version.
	Version string
}

// CommitWorkflow is the workflow identity a template reads.
type CommitWorkflow struct {
	Type, Action, Promise, Pipeline, Name, Namespace string
}

// DestinationCount is one destination's share of a write's diff.
type DestinationCount struct {
	Name, Path              string
	Added, Changed, Deleted int
}

// ParseCommitTemplate parses a commit message template. Besides the data
// above it has two functions: env reads a KRATIX_* variable, and
// annotation one of the annotations spec.commit.annotations names.
func ParseCommitTemplate(text string) (*template.Template, error) {
	t, err := template.New("commit").Option("missingkey=error").Funcs(template.FuncMap{
		"env":        func(string) (string, error) { return "", nil },
		"annotation": func(string) (string, error) { return "", nil },
	}).Parse(text)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, nil
}

// ExecCommitTemplate runs t on d and splits its text into the subject
// (the first line) and the body (the rest); both are trimmed, and an empty
// subject is an error. getenv serves env, for KRATIX_* names only.
func ExecCommitTemplate(t *template.Template, d CommitData, getenv func(string) string) (subject, body string, err error) {
	t, err = t.Clone()
	if err != nil {
		return "", "", err
	}
	t.Funcs(template.FuncMap{"env": func(name string) (string, error) {
		if !strings.HasPrefix(name, "KRATIX_") {
			return "", fmt.Errorf("env %q: a template reads only KRATIX_* variables", name)
		}
		return getenv(name), nil
	}, "annotation": func(name string) (string, error) {
		v, ok := d.Annotations[name]
		if !ok {
			return "", fmt.Errorf("annotation %q is not named in spec.commit.annotations", name)
		}
		return v, nil
	}})
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", "", errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	text := strings.TrimSpace(b.String())
	subject, body, _ = strings.Cut(text, "\n")
	subject, body = strings.TrimSpace(subject), strings.TrimSpace(body)
	if subject == "" {
		return "", "", errors.New("the template's first line, the commit subject, is empty")
	}
	return subject, body, nil
}
