package inputs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/mail"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"text/template"
	"text/template/parse"
	"time"
	"unicode"
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

// ReadCommitTemplate reads the file --commit-template names, as the
// output folder's files are read: only a regular file (a named pipe is
// opened without waiting for a writer, and refused; a device such as
// /dev/zero is refused), and at most MaxCommitTemplateBytes of it.
func ReadCommitTemplate(file string) (string, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("cannot be read: %s", cleanErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("cannot be read: %s", cleanErr(err))
	}
	if !fi.Mode().IsRegular() {
		return "", errors.New("is not a regular file")
	}
	tooLarge := fmt.Errorf("is larger than %d KiB, the limit for a commit message template", MaxCommitTemplateBytes>>10)
	if fi.Size() > MaxCommitTemplateBytes {
		return "", tooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxCommitTemplateBytes+1)) // it may grow while it is read
	if err != nil {
		return "", fmt.Errorf("cannot be read: %s", cleanErr(err))
	}
	if len(data) > MaxCommitTemplateBytes {
		return "", tooLarge
	}
	return string(data), nil
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

// The bounds of a commit message template. A commit's subject and body are
// small, and a template is written by the platform team but reads values
// from a resource request: without bounds a range over a huge number, or a
// string doubled in a loop, takes the machine's memory or time.
const (
	// MaxCommitTemplateBytes bounds a template's text (spec.commit.template,
	// or the file --commit-template names).
	MaxCommitTemplateBytes = 64 << 10
	// MaxCommitMessageBytes bounds what a template writes, every string it
	// builds on the way (print, printf, println, html, js, urlquery), and
	// each annotation value it may read.
	MaxCommitMessageBytes = 64 << 10
)

// commitLimits are the bounds of one run of a template: steps counts range
// iterations and template calls; the run also stops after time. Tests
// lower them.
var commitLimits = struct {
	steps int
	time  time.Duration
	now   func() time.Time
}{steps: 100_000, time: time.Second, now: time.Now}

// stepFunc is the function render calls at the start of every range
// iteration and every template (defined or not), to count steps.
const stepFunc = "_renderStep"

// ParseCommitTemplate parses a commit message template. Besides the data
// above it has two functions: env reads a KRATIX_* variable, and
// annotation one of the annotations spec.commit.annotations names. A
// template over MaxCommitTemplateBytes, or one that calls itself (through
// {{template}}), is an error.
func ParseCommitTemplate(text string) (*template.Template, error) {
	if len(text) > MaxCommitTemplateBytes {
		return nil, fmt.Errorf("the template is larger than %d KiB, the limit for a commit message template", MaxCommitTemplateBytes>>10)
	}
	t, err := template.New("commit").Option("missingkey=error").Funcs(template.FuncMap{
		"env":        func(string) (string, error) { return "", nil },
		"annotation": func(string) (string, error) { return "", nil },
		stepFunc:     func() (string, error) { return "", nil },
	}).Parse(text)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	if err := noRecursion(t); err != nil {
		return nil, err
	}
	step, err := template.New("step").Funcs(template.FuncMap{stepFunc: func() string { return "" }}).Parse("{{" + stepFunc + "}}")
	if err != nil {
		return nil, err
	}
	counted := step.Tree.Root.Nodes[0]
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Tree.Root == nil {
			continue
		}
		countSteps(tt.Tree.Root, counted)
		tt.Tree.Root.Nodes = append([]parse.Node{counted}, tt.Tree.Root.Nodes...)
	}
	return t, nil
}

// countSteps puts a call of stepFunc at the start of every range body
// below n.
func countSteps(n parse.Node, step parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			countSteps(c, step)
		}
	case *parse.IfNode:
		countSteps(n.List, step)
		countSteps(n.ElseList, step)
	case *parse.WithNode:
		countSteps(n.List, step)
		countSteps(n.ElseList, step)
	case *parse.RangeNode:
		countSteps(n.List, step)
		countSteps(n.ElseList, step)
		if n.List != nil {
			n.List.Nodes = append([]parse.Node{step}, n.List.Nodes...)
		}
	}
}

// calls collects the names of the templates n calls.
func calls(n parse.Node, into map[string]bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			calls(c, into)
		}
	case *parse.IfNode:
		calls(n.List, into)
		calls(n.ElseList, into)
	case *parse.WithNode:
		calls(n.List, into)
		calls(n.ElseList, into)
	case *parse.RangeNode:
		calls(n.List, into)
		calls(n.ElseList, into)
	case *parse.TemplateNode:
		into[n.Name] = true
	}
}

// noRecursion refuses a template that calls itself, directly or through
// others: a commit message needs no recursion, and without it the depth of
// calls is bounded by the number of templates.
func noRecursion(t *template.Template) error {
	graph := map[string][]string{}
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		called := map[string]bool{}
		calls(tt.Tree.Root, called)
		graph[tt.Name()] = slices.Sorted(maps.Keys(called))
	}
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case visiting:
			return fmt.Errorf("template %q calls itself (%s): a commit message template may not recurse", name, strings.Join(append(path, name), " -> "))
		case done:
			return nil
		}
		state[name] = visiting
		for _, c := range graph[name] {
			if err := visit(c, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = done
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(graph)) {
		if err := visit(name, nil); err != nil {
			return err
		}
	}
	return nil
}

// AnnotationError is a request's annotation that a commit message may not
// take: a value with a control character, one too long, or one that would
// make a line of the message spoil render's trailers. It names the
// annotations, never their values (they come from the request, which is
// less trusted than the platform).
type AnnotationError struct {
	Names []string
	Msg   string
}

func (e *AnnotationError) Error() string {
	return "annotation " + strings.Join(e.Names, ", ") + ": " + e.Msg
}

// checkAnnotations refuses annotation values a template may not read.
func checkAnnotations(a map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(a)) {
		v := a[k]
		if len(v) > MaxCommitMessageBytes {
			return &AnnotationError{Names: []string{k}, Msg: fmt.Sprintf("its value is longer than %d KiB, the limit for a commit message", MaxCommitMessageBytes>>10)}
		}
		if i := strings.IndexFunc(v, lineBreaking); i >= 0 {
			return &AnnotationError{Names: []string{k}, Msg: fmt.Sprintf("its value holds a line break or another control character (%U at byte %d), which a commit message template may not write", []rune(v[i:])[0], i)}
		}
	}
	return nil
}

// lineBreaking is a control character (C0, DEL, C1: line breaks among
// them) or Unicode's line and paragraph separators.
func lineBreaking(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// execState is one run of a template: its step count, its deadline, and
// the first bound it went past.
type execState struct {
	steps    int
	deadline time.Time
	err      error
}

func (s *execState) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// step counts a range iteration or a template call, and checks the time.
func (s *execState) step() (string, error) {
	if s.err != nil {
		return "", s.err
	}
	s.steps++
	if s.steps > commitLimits.steps {
		return "", s.fail(fmt.Errorf("the template runs more than %d steps (range iterations and template calls), the limit for a commit message template", commitLimits.steps))
	}
	return "", s.checkTime()
}

func (s *execState) checkTime() error {
	if commitLimits.now().After(s.deadline) {
		return s.fail(fmt.Errorf("the template runs longer than %s, the limit for a commit message template", commitLimits.time))
	}
	return nil
}

// sized checks a string a function built.
func (s *execState) sized(fn string, n int) error {
	if n > MaxCommitMessageBytes {
		return s.fail(fmt.Errorf("%s builds a string longer than %d KiB, the limit for a commit message", fn, MaxCommitMessageBytes>>10))
	}
	return s.checkTime()
}

// print is fmt.Sprint (text/template's print), bounded.
func (s *execState) print(fn string, args []any, spaces, newline bool) (string, error) {
	var b strings.Builder
	prevString := false
	for i, a := range args {
		isString := a != nil && reflect.TypeOf(a).Kind() == reflect.String
		if i > 0 && (spaces || (!isString && !prevString)) {
			b.WriteByte(' ')
		}
		piece := fmt.Sprint(a)
		if err := s.sized(fn, b.Len()+len(piece)); err != nil {
			return "", err
		}
		b.WriteString(piece)
		prevString = isString
	}
	if newline {
		b.WriteByte('\n')
	}
	return b.String(), s.sized(fn, b.Len())
}

// printf is fmt.Sprintf (text/template's printf), bounded: each argument
// formats itself and stops adding once the result would be too long, so
// a format of many wide verbs never builds a large string.
func (s *execState) printf(format string, args ...any) (string, error) {
	acc := &printfBudget{}
	wrapped := make([]any, len(args))
	for i, a := range args {
		wrapped[i] = boundedArg{v: a, acc: acc}
	}
	out := fmt.Sprintf(format, wrapped...)
	if acc.over {
		return "", s.sized("printf", MaxCommitMessageBytes+1)
	}
	return out, s.sized("printf", len(out))
}

type printfBudget struct {
	n    int
	over bool
}

// boundedArg formats its value as the verb asks, within the budget.
type boundedArg struct {
	v   any
	acc *printfBudget
}

func (a boundedArg) Format(f fmt.State, verb rune) {
	if a.acc.over {
		return
	}
	spec := "%"
	for _, flag := range "+-# 0" {
		if f.Flag(int(flag)) {
			spec += string(flag)
		}
	}
	if w, ok := f.Width(); ok {
		spec += fmt.Sprint(w)
	}
	if p, ok := f.Precision(); ok {
		spec += "." + fmt.Sprint(p)
	}
	piece := fmt.Sprintf(spec+string(verb), a.v)
	if a.acc.n+len(piece) > MaxCommitMessageBytes {
		a.acc.over = true
		return
	}
	a.acc.n += len(piece)
	io.WriteString(f, piece)
}

// limitedWriter takes up to MaxCommitMessageBytes.
type limitedWriter struct {
	b    bytes.Buffer
	over bool
}

var errTooLong = fmt.Errorf("the commit message is longer than %d KiB, the limit for a commit message", MaxCommitMessageBytes>>10)

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > MaxCommitMessageBytes {
		w.over = true
		return 0, errTooLong
	}
	return w.b.Write(p)
}

// ExecCommitTemplate runs t on d and splits its text into the subject
// (the first line) and the body (the rest); both are trimmed, and an empty
// subject is an error. getenv serves env, for KRATIX_* names only.
//
// The run is bounded (MaxCommitMessageBytes, and a number of steps and a
// time), and the message it makes must leave render's trailers for git to
// read: a line git would take for the start of a patch (---) or its
// scissors line, where git stops reading a message, or one that reads as a
// Render-* trailer, is an error. An annotation value is checked before the
// run (no control characters); when one makes a line bad, the error is an
// *AnnotationError naming it.
func ExecCommitTemplate(t *template.Template, d CommitData, getenv func(string) string) (subject, body string, err error) {
	if err := checkAnnotations(d.Annotations); err != nil {
		return "", "", err
	}
	text, err := runCommitTemplate(t, d, getenv)
	if err != nil {
		return "", "", err
	}
	if line, problem := badLine(text); problem != "" {
		return "", "", blame(t, d, getenv, line, problem)
	}
	subject, body, _ = strings.Cut(text, "\n")
	subject, body = strings.TrimSpace(subject), strings.TrimSpace(body)
	if subject == "" {
		return "", "", errors.New("the template's first line, the commit subject, is empty")
	}
	return subject, body, nil
}

// runCommitTemplate runs t on d, within the bounds, and gives its text,
// trimmed.
func runCommitTemplate(t *template.Template, d CommitData, getenv func(string) string) (string, error) {
	t, err := t.Clone()
	if err != nil {
		return "", err
	}
	s := &execState{deadline: commitLimits.now().Add(commitLimits.time)}
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
	},
		stepFunc:   s.step,
		"print":    func(args ...any) (string, error) { return s.print("print", args, false, false) },
		"println":  func(args ...any) (string, error) { return s.print("println", args, true, true) },
		"printf":   s.printf,
		"html":     s.escaper("html", template.HTMLEscapeString),
		"js":       s.escaper("js", template.JSEscapeString),
		"urlquery": s.escaper("urlquery", url.QueryEscape),
	})
	w := &limitedWriter{}
	err = t.Execute(w, d)
	switch {
	case s.err != nil:
		return "", s.err
	case w.over:
		return "", errTooLong
	case err != nil:
		return "", errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	return strings.TrimSpace(w.b.String()), nil
}

// escaper is text/template's html, js or urlquery, bounded.
func (s *execState) escaper(fn string, escape func(string) string) func(args ...any) (string, error) {
	return func(args ...any) (string, error) {
		in, ok := "", false
		if len(args) == 1 {
			in, ok = args[0].(string)
		}
		if !ok {
			var err error
			if in, err = s.print(fn, args, false, false); err != nil {
				return "", err
			}
		}
		out := escape(in)
		return out, s.sized(fn, len(out))
	}
}

// renderTrailer is a line a trailer parser would read as one of render's
// trailers ("Render-Promise: x"; git's separator is ":", "=" where
// trailer.separators says so).
var renderTrailer = regexp.MustCompile(`(?i)^[ \t]*render-[a-z0-9-]*[ \t]*[:=]`)

// scissors is git's cut line ("# ------------------------ >8
// ------------------------"), below which git ignores a message.
const scissors = "------------------------ >8 ------------------------"

// badLine finds the first line of a message that would spoil render's
// trailers, and says why.
func badLine(text string) (int, string) {
	for i, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "---") && (len(l) == 3 || strings.ContainsRune(" \t\v\f\r", rune(l[3]))):
			return i + 1, `it begins with "---", where git stops reading a message (the start of a patch), which would hide render's trailers`
		case strings.Contains(l, scissors):
			return i + 1, "it is git's scissors line, below which git ignores a message, which would hide render's trailers"
		case renderTrailer.MatchString(l):
			return i + 1, "it reads as a Render-* trailer, which only render writes"
		case strings.IndexFunc(l, func(r rune) bool { return r != '\t' && lineBreaking(r) }) >= 0:
			return i + 1, "it holds a control character"
		}
	}
	return 0, ""
}

// blame makes the error for a bad line: an *AnnotationError when the
// line is bad because of annotation values (the same line is not bad
// with every value replaced by a plain word), naming those whose value
// alone makes it so; else the template's own.
func blame(t *template.Template, d CommitData, getenv func(string) string, line int, problem string) error {
	same := func(plain ...string) bool {
		d2 := d
		d2.Annotations = maps.Clone(d.Annotations)
		for _, k := range plain {
			d2.Annotations[k] = "x"
		}
		text, err := runCommitTemplate(t, d2, getenv)
		if err != nil {
			return false
		}
		l, p := badLine(text)
		return l == line && p == problem
	}
	var set []string
	for _, k := range slices.Sorted(maps.Keys(d.Annotations)) {
		if d.Annotations[k] != "" {
			set = append(set, k)
		}
	}
	if len(set) == 0 || same(set...) {
		return fmt.Errorf("line %d of the commit message is refused: %s", line, problem)
	}
	var names []string
	for _, k := range set {
		if !same(k) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		names = set // only together
	}
	return &AnnotationError{Names: names, Msg: fmt.Sprintf("its value makes line %d of the commit message one render refuses: %s", line, problem)}
}

// ParseAuthor reads a git author written "Name <email>" (RFC 5322, where a
// name may be an RFC 2047 encoded word). A value that is not one is
// errNotAuthor; a name or address that holds, once decoded, a control
// character (a line break would write a line of its own into the commit
// object, a forged committer say) or an angle bracket is refused too.
func ParseAuthor(v string) (name, email string, err error) {
	a, err := mail.ParseAddress(v)
	if err != nil || a.Name == "" {
		return "", "", ErrNotAuthor
	}
	for _, s := range []string{a.Name, a.Address} {
		if strings.IndexFunc(s, func(r rune) bool { return lineBreaking(r) || r == '<' || r == '>' }) >= 0 {
			return "", "", errors.New("its name or email, once decoded, holds a line break, another control character or an angle bracket, which git does not take in an author")
		}
	}
	return a.Name, a.Address, nil
}

// ErrNotAuthor is a value that is not "Name <email>".
var ErrNotAuthor = errors.New(`not an author as "Name <email>"`)
