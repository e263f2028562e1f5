package inputs_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
)

const prStore = `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: s}
spec:
  url: https://git.example.com/org/repo
  authMethod: basicAuth
  secretRef: {name: creds}
`

// TestFieldTypesAreNamed: a value of the wrong type is refused naming the
// field, and a value yaml.v3 would quietly change (0.5 into 0, "yes" into
// true) is refused, not taken.
func TestFieldTypesAreNamed(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"massDeletion: {maxDestinationPercent: 0.5}", "line 8: spec.massDeletion.maxDestinationPercent is a number with a fraction: want a whole number"},
		{"massDeletion: {maxStorePercent: \"20\"}", "spec.massDeletion.maxStorePercent is a string: want a whole number"},
		{"massDeletion: {maxStorePercent: 9223372036854775808}", "spec.massDeletion.maxStorePercent is a number out of range"},
		{"massDeletion: {allow: \"yes\"}", "spec.massDeletion.allow is a string: want true or false"},
		{"massDeletion: {allow: yes}", "spec.massDeletion.allow is the string yes (YAML 1.2 has no yes or no: its booleans are true and false): want true or false"},
		{"massDeletion: {allow: 1}", "spec.massDeletion.allow is a whole number: want true or false"},
		{"massDeletion: 50", "spec.massDeletion is a whole number: want a mapping"},
		{"massDeletion: [50]", "spec.massDeletion is a list: want a mapping"},
		{"pullRequest: {wait: ten}", "spec.pullRequest.wait is a string: want a duration such as 90s, 10m or 1h30m"},
		{"pullRequest: {wait: 600}", "spec.pullRequest.wait is a whole number: want a duration"},
		{"pullRequest: {wait: {m: 10}}", "spec.pullRequest.wait is a mapping: want a duration"},
		{"pullRequest: {autoMerge: \"true\"}", "spec.pullRequest.autoMerge is a string: want true or false"},
		{"commit: {annotations: example.com/ticket}", "spec.commit.annotations is a string: want a list"},
		{"commit: {template: {a: b}}", "spec.commit.template is a mapping: want a string"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "s.yaml"), prStore+"  "+tc.spec+"\n")
			_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
			inputErr(t, err, "s.yaml: document 1 (GitStateStore s): ", tc.want)
		})
	}
	// The same settings, well typed, load.
	dir := t.TempDir()
	write(t, filepath.Join(dir, "s.yaml"), prStore+"  massDeletion: {allow: true, maxDestinationPercent: 50, maxStorePercent: null}\n  pullRequest: {wait: 1h30m, autoMerge: false}\n  commit: {annotations: [a], template: \"x\"}\n")
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := inputs.StoresOf[*storekind.GitStateStore](p)["s"]; !s.MassDeletion.Allow || s.MassDeletion.MaxDestinationPercent != 50 || s.PullRequest.Wait != 90*time.Minute || !strings.HasPrefix(s.Commit.Template, "x") {
		t.Errorf("read as %+v, %+v, %+v", s.MassDeletion, s.PullRequest, s.Commit)
	}
}

// TestGitAuthorCannotBreakTheCommit: the store's own author and committer
// cannot hold what would write a line of its own into a commit object.
func TestGitAuthorCannotBreakTheCommit(t *testing.T) {
	for _, tc := range []struct{ author, want string }{
		{`{name: "render\ncommitter x <x@y> 1 +0000", email: r@example.com}`, "spec.gitAuthor.name holds a line break"},
		{`{name: render, email: "r@example.com>"}`, "spec.gitAuthor.email holds a line break, another control character or an angle bracket"},
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "s.yaml"), prStore+"  gitAuthor: "+tc.author+"\n")
		_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
		inputErr(t, err, "(GitStateStore s): ", tc.want)
	}
}
