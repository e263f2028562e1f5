package inputs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"text/template"
	"time"
)

func execTemplate(t *testing.T, text string, d CommitData) (string, string, error) {
	t.Helper()
	tmpl, err := ParseCommitTemplate(text)
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	return ExecCommitTemplate(tmpl, d, func(string) string { return "" })
}

// TestCommitTemplateBounds: a template that would take the machine's
// memory or time stops at a bound, with an error saying which.
func TestCommitTemplateBounds(t *testing.T) {
	// The running-time bound has its own test, on a clock of its own:
	// here it must not fire first on a machine busy enough to make
	// 100,000 steps take a second.
	defer func(old time.Duration) { commitLimits.time = old }(commitLimits.time)
	commitLimits.time = time.Hour
	for _, tc := range []struct{ name, tmpl, want string }{
		// Each of these ran to the end (or out of memory, with bigger
		// numbers) before the bounds.
		{"range over a number", `{{range 200000}}{{end}}x`, "more than 100000 steps"},
		{"nested ranges", `{{range 1000}}{{range 1000}}{{end}}{{end}}x`, "more than 100000 steps"},
		{"templates calling each other twice", fanOut(18), "more than 100000 steps"},
		{"doubling with printf", `x{{$x := "ab"}}{{range 20}}{{$x = printf "%s%s" $x $x}}{{end}}{{len $x}}`, "printf builds a string longer than 64 KiB"},
		{"doubling with print", `x{{$x := "ab"}}{{range 20}}{{$x = print $x $x}}{{end}}{{len $x}}`, "print builds a string longer than 64 KiB"},
		{"doubling with println", `x{{$x := "ab"}}{{range 20}}{{$x = println $x $x}}{{end}}{{len $x}}`, "println builds a string longer than 64 KiB"},
		{"growing with html", `x{{$x := "&&"}}{{range 10}}{{$x = html $x $x}}{{end}}{{len $x}}`, "html builds a string longer than 64 KiB"},
		{"growing with js", `x{{$x := "<<"}}{{range 10}}{{$x = js $x $x}}{{end}}{{len $x}}`, "js builds a string longer than 64 KiB"},
		{"growing with urlquery", `x{{$x := "//"}}{{range 12}}{{$x = urlquery $x $x}}{{end}}{{len $x}}`, "urlquery builds a string longer than 64 KiB"},
		{"wide printf verbs", `x{{printf "%1000000d" 1 | len}}`, "printf builds a string longer than 64 KiB"},
		{"many printf verbs", `x{{$x := printf "%60000s" "a"}}{{printf "%s%s" $x $x | len}}`, "printf builds a string longer than 64 KiB"},
		{"a long message", `x{{range 2000}}{{printf "%50s" "y"}}{{end}}`, "the commit message is longer than 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := execTemplate(t, tc.tmpl, CommitData{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one with %q", err, tc.want)
			}
		})
	}
}

// fanOut is n templates each calling the next twice: 2^n calls, no range.
func fanOut(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{{define "t%d"}}{{template "t%d"}}{{template "t%d"}}{{end}}`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `{{define "t%d"}}{{end}}x{{template "t0"}}`, n)
	return b.String()
}

func TestCommitTemplateRunningTimeIsBounded(t *testing.T) {
	defer func(old func() time.Time) { commitLimits.now = old }(commitLimits.now)
	clock := time.Unix(0, 0)
	commitLimits.now = func() time.Time { clock = clock.Add(100 * time.Millisecond); return clock }
	_, _, err := execTemplate(t, `{{range 100}}{{end}}x`, CommitData{})
	if err == nil || !strings.Contains(err.Error(), "runs longer than 1s") {
		t.Errorf("error = %v, want the time bound", err)
	}
}

func TestCommitTemplateParseBounds(t *testing.T) {
	if _, err := ParseCommitTemplate(strings.Repeat("x", MaxCommitTemplateBytes+1)); err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") {
		t.Errorf("a template over the size bound: %v", err)
	}
	for _, tmpl := range []string{
		`{{define "a"}}{{template "a"}}{{end}}x`,
		`{{define "a"}}{{if .Added}}{{template "b"}}{{end}}{{end}}{{define "b"}}{{range .Destinations}}{{template "a"}}{{end}}{{end}}x`,
	} {
		if _, err := ParseCommitTemplate(tmpl); err == nil || !strings.Contains(err.Error(), "may not recurse") {
			t.Errorf("%s: error = %v, want recursion refused", tmpl, err)
		}
	}
	if _, err := ParseCommitTemplate(`{{define "a"}}a{{end}}{{define "b"}}{{template "a"}}{{template "a"}}{{end}}{{template "b"}}`); err != nil {
		t.Errorf("a template called twice is not recursion: %v", err)
	}
}

// TestCommitTemplateFunctionsKeepTheirMeaning: the bounded print, printf,
// println, html, js and urlquery give what text/template's own do.
func TestCommitTemplateFunctionsKeepTheirMeaning(t *testing.T) {
	d := CommitData{Subject: "s", Added: 3, Destinations: []DestinationCount{{Name: "dev", Added: 1}}}
	body := `{{print "a" 1 2 "b" .Added nil}}|{{println "a" 1}}|{{printf "%-5s|%05d|%x|%q|%+v|%[1]s|%6.2f|%%" "ab" .Added "hi" "q\"" (index .Destinations 0) 3.14159}}|{{printf "%d"}}|{{printf "%d" 1 2}}|{{html "<a&b>" 1}}|{{js "'x'<"}}|{{urlquery "a b&c"}}`
	_, got, err := execTemplate(t, "subject\n"+body, d)
	if err != nil {
		t.Fatal(err)
	}
	std, err := template.New("std").Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := std.Execute(&want, d); err != nil {
		t.Fatal(err)
	}
	// An extra argument is reported with the type render wraps it in.
	w := strings.Replace(want.String(), "%!(EXTRA int=2)", "%!(EXTRA inputs.boundedArg=2)", 1)
	if got != w {
		t.Errorf("got\n%s\nwant\n%s", got, w)
	}
}

func TestBadLines(t *testing.T) {
	for line, bad := range map[string]bool{
		"---":                       true,
		"--- x":                     true,
		"---\tx":                    true,
		"---\r":                     true,
		"----":                      false,
		"-- -":                      false,
		" ---":                      false,
		"Render-Promise: x":         true,
		"render-promise:x":          true,
		"Render-Store-Size : large": true,
		"  Render-X: y":             true,
		"Render-X = y":              true,
		"Rendered: x":               false,
		"Render: x":                 false,
		"Fixes: OPS-1":              false,
		"dev: +1 ~0 -0":             false,
		"Signed-off-by: a <b@c>":    false,
		"# ------------------------ >8 ------------------------": true,
		"; ------------------------ >8 ------------------------": true,
		"tab\tis fine":        false,
		"an \x1b[31mescape":   true,
		"a nul \x00":          true,
		"a C1 \u0085 control": true,
	} {
		if _, p := badLine("subject\n" + line); (p != "") != bad {
			t.Errorf("%q: problem %q, want bad=%v", line, p, bad)
		}
	}
}

// TestAnnotationsAreBlamed: the error names the annotation whose value
// makes a line bad, and the template when its own text does.
func TestAnnotationsAreBlamed(t *testing.T) {
	tmpl := "{{.Subject}}\n{{annotation \"a\"}}-{{annotation \"b\"}}\n{{annotation \"c\"}}"
	for _, tc := range []struct {
		a, b, c string
		names   []string
		msg     string
	}{
		{a: "Render-Promise: x", b: "y", c: "ok", names: []string{"a"}, msg: "line 2"},
		{a: "-", b: "- x", c: "ok", names: []string{"a", "b"}, msg: "begins with \"---\""},
		{a: "ok", b: "ok", c: "Render-Resource: r2", names: []string{"c"}, msg: "line 3"},
		{a: strings.Repeat("x", MaxCommitMessageBytes+1), names: []string{"a"}, msg: "longer than 64 KiB"},
		{c: "x\ny", names: []string{"c"}, msg: "U+000A at byte 1"},
		{c: "x\u2028y", names: []string{"c"}, msg: "U+2028"},
	} {
		_, _, err := execTemplate(t, tmpl, CommitData{Subject: "s", Annotations: map[string]string{"a": tc.a, "b": tc.b, "c": tc.c}})
		var ae *AnnotationError
		if !errors.As(err, &ae) || strings.Join(ae.Names, ",") != strings.Join(tc.names, ",") || !strings.Contains(ae.Msg, tc.msg) {
			t.Errorf("%+v: error %v, want annotations %v and %q", tc, err, tc.names, tc.msg)
		}
	}
	_, _, err := execTemplate(t, "{{.Subject}}\n---\n{{annotation \"a\"}}", CommitData{Subject: "s", Annotations: map[string]string{"a": "fine"}})
	var ae *AnnotationError
	if err == nil || errors.As(err, &ae) || !strings.Contains(err.Error(), "line 2 of the commit message is refused") {
		t.Errorf("the template's own patch start: %v", err)
	}
}

func TestParseAuthor(t *testing.T) {
	for v, ok := range map[string]bool{
		"Ada Lovelace <ada@example.com>":                  true,
		"=?utf-8?q?Ad=C3=A1?= <ada@example.com>":          true,
		"=?utf-8?q?Eve=0Acommitter_M?= <eve@example.com>": false,
		"=?utf-8?q?Eve=0D?= <eve@example.com>":            false,
		"=?utf-8?b?RXZlAA==?= <eve@example.com>":          false,
		`"Eve <x>" <eve@example.com>`:                     false,
		`Eve <"a>b"@example.com>`:                         false,
		"eve@example.com":                                 false,
	} {
		name, email, err := ParseAuthor(v)
		if (err == nil) != ok {
			t.Errorf("%q: %q <%q>, %v; want ok=%v", v, name, email, err, ok)
		}
	}
}
