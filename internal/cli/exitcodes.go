package cli

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// Exit codes. Each one is a row of exitCodes, the one table the help text
// (and the README's table, which a test compares) is made from.
const (
	ExitOK          = 0
	ExitStoreFailed = 1
	ExitBadInput    = 2
	ExitUnscheduled = 3
	// ExitMassDeletion: the mass-deletion breaker refused the write
	// (nothing written), or with --dry-run would refuse it.
	ExitMassDeletion = 4
	// ExitPullRequestOpen: a store in pull-request mode waited
	// (spec.pullRequest.wait) and its pull request was still open when the
	// wait ended.
	ExitPullRequestOpen = 5
	// After a signal: 128 + the signal's number, as shells report a
	// process a signal ended.
	ExitSIGINT  = 128 + int(syscall.SIGINT)  // 130
	ExitSIGTERM = 128 + int(syscall.SIGTERM) // 143
	// ExitInterrupted is watch mode's exit code after a second signal.
	ExitInterrupted = ExitSIGINT
)

// exitCode is one row of the table: the code, a short name, and what it
// means (Markdown, as the README shows it).
type exitCode struct {
	Code    int
	Name    string
	Meaning string
}

// exitCodes is every exit code render has. An error no command classified
// (one that is not an ExitError) is ExitStoreFailed: only the command
// line's own mistakes and the inputs are exit 2.
var exitCodes = []exitCode{
	{ExitOK, "ok", "written, or nothing to do; also when a group is kept on a destination that no longer matches it while another destination matches it (misscheduled: the report names where it is kept, what matches now, and the `render drain` or `render prune-misscheduled` that moves it), since it is placed, as Kratix keeps it"},
	{ExitStoreFailed, "failed", "a store failed (the message names it), or another error that is not the input's"},
	{ExitBadInput, "bad input", "bad input or usage: one line naming the file, the document or entry, and the problem; nothing is written anywhere"},
	{ExitUnscheduled, "unscheduled", "written, but some group is unscheduled: no destination that matches its selector can take it (the message names the group, its selector and why each destination was passed over, and where the group is kept if it was placed before: nothing is deleted); `render drain`: some resource could not move (nothing of it was moved); `render prune-misscheduled`: some group could not be pruned"},
	{ExitMassDeletion, "mass deletion", "refused by the mass-deletion breaker: nothing is written; the message names the store, each destination and its counts, and what allows it (with `--dry-run`: the render would be refused)"},
	{ExitPullRequestOpen, "pull request open", "pull-request mode: the pull request was still open when `spec.pullRequest.wait` ended (the message names it); a pull request closed without being merged is `1`"},
	{ExitSIGINT, "SIGINT", "stopped by SIGINT (Ctrl-C), or in watch mode by a second signal; the last line says whether anything was written"},
	{ExitSIGTERM, "SIGTERM", "stopped by SIGTERM (`timeout`, `kill`, a pod being deleted); the last line says whether anything was written"},
}

// exitCodesHelp is the exit-code part of a command's help: the rows of
// codes (every row when none are given), one per line, wrapped to about
// 100 columns.
func exitCodesHelp(codes ...int) string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, e := range exitCodes {
		if len(codes) > 0 && !slices.Contains(codes, e.Code) {
			continue
		}
		head := fmt.Sprintf("  %-4d%-19s", e.Code, e.Name)
		b.WriteString(wrap(head, strings.ReplaceAll(e.Meaning, "`", ""), 100))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// wrap prints text after head, breaking lines at spaces before width and
// indenting the following lines under the text.
func wrap(head, text string, width int) string {
	var b strings.Builder
	indent := strings.Repeat(" ", len(head))
	line := head
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}
