package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// An error no command classified (not an ExitError) is exit 1 with its
// line and no usage hint: a raw store error is not bad input.
func TestUnclassifiedErrorExitsOne(t *testing.T) {
	var out, errb bytes.Buffer
	io := IO{Out: &out, Err: &errb, Getenv: func(string) string { return "" }}
	root := NewCommand(io)
	root.AddCommand(&cobra.Command{Use: "raw", RunE: func(*cobra.Command, []string) error {
		return errors.New("GitStateStore/default: push: connection reset by peer")
	}})
	code := execute(context.Background(), root, []string{"raw"}, io)
	if code != ExitStoreFailed {
		t.Errorf("exit %d, want %d", code, ExitStoreFailed)
	}
	if want := "render: GitStateStore/default: push: connection reset by peer\n"; errb.String() != want {
		t.Errorf("stderr = %q, want %q (one line, no usage hint)", errb.String(), want)
	}
	// The same command, mistyped, is still the command line's mistake.
	errb.Reset()
	root = NewCommand(io)
	root.AddCommand(&cobra.Command{Use: "raw", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
	if code := execute(context.Background(), root, []string{"raw", "extra"}, io); code != ExitBadInput || !strings.Contains(errb.String(), "Run 'render raw --help' for usage.") {
		t.Errorf("a wrong argument: exit %d, stderr %q; want 2 with a usage hint", code, errb.String())
	}
}

// The exit codes the help prints are the table's, every one of them, and
// the README's table is the same table.
func TestExitCodesOneTable(t *testing.T) {
	var out bytes.Buffer
	root := NewCommand(IO{Out: &out, Err: &out})
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, e := range exitCodes {
		if !regexp.MustCompile(`(?m)^  ` + strconv.Itoa(e.Code) + ` +` + regexp.QuoteMeta(e.Name) + ` `).MatchString(help) {
			t.Errorf("render --help lacks exit code %d (%s):\n%s", e.Code, e.Name, help)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, e := range exitCodes {
		rows = append(rows, "| `"+strconv.Itoa(e.Code)+"` | "+e.Name+" | "+e.Meaning+" |")
	}
	want := "| code | name | meaning |\n| --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md's exit-code table is not the table in exitcodes.go; want:\n%s", want)
	}
}
