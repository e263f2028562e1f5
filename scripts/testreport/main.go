// Command testreport reads `go test -json` on its standard input, prints
// what plain `go test` prints (each package's result line, and the output
// of the tests that failed), and at the end writes where the time went: the
// packages by duration and the slowest tests, to standard error and, with
// -out, as JSON to a file. scripts/test.sh pipes every `go test` through
// it, so each run of `make test` leaves its timing table behind.
//
//	go test -json ./... | go run ./scripts/testreport -out times.json
//
// Its exit code is 0; the caller takes `go test`'s own (set -o pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// Timing is one package's or test's duration.
type Timing struct {
	Package string  `json:"package"`
	Test    string  `json:"test,omitempty"`
	Seconds float64 `json:"seconds"`
	Result  string  `json:"result"`
}

// Report is what -out writes.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Packages []Timing  `json:"packages"`
	Tests    []Timing  `json:"tests"`
	// Subtests are the tests' direct subtests (TestX/case), for finding
	// which case of a long test takes the time.
	Subtests []Timing `json:"subtests,omitempty"`
}

func main() {
	out := flag.String("out", "", "write the timings as JSON to this file")
	top := flag.Int("top", 25, "how many of the slowest tests to print")
	flag.Parse()
	rep, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
	}
	summary(os.Stderr, rep, *top)
	if *out != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
		}
	}
}

// run copies what plain `go test` would print to w and collects the
// timings.
func run(r io.Reader, w io.Writer) (*Report, error) {
	rep := &Report{}
	buf := map[string][]string{} // package + "\x00" + test -> its output
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, string(line)) // a build error, or anything not JSON
			continue
		}
		if rep.Started.IsZero() || e.Time.Before(rep.Started) && !e.Time.IsZero() {
			rep.Started = e.Time
		}
		if e.Time.After(rep.Finished) {
			rep.Finished = e.Time
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				if o := strings.TrimSpace(e.Output); o != "PASS" && !strings.HasPrefix(o, "=== ") {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			if !strings.HasPrefix(e.Output, "=== ") {
				buf[key] = append(buf[key], e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				rep.Packages = append(rep.Packages, Timing{Package: e.Package, Seconds: e.Elapsed, Result: e.Action})
				continue
			}
			if e.Action == "fail" && !strings.Contains(e.Test, "/") {
				// A failed test's output, subtests' included, as go test prints it.
				printTree(w, buf, e.Package, e.Test)
			}
			if !strings.Contains(e.Test, "/") {
				rep.Tests = append(rep.Tests, Timing{Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Result: e.Action})
				dropTree(buf, e.Package, e.Test)
			} else if strings.Count(e.Test, "/") == 1 {
				rep.Subtests = append(rep.Subtests, Timing{Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Result: e.Action})
			}
		}
	}
	return rep, sc.Err()
}

// printTree prints a failed test's output and its subtests', in the
// order they ran (by name, which is how they were started).
func printTree(w io.Writer, buf map[string][]string, pkg, test string) {
	var keys []string
	for k := range buf {
		if p, t, _ := strings.Cut(k, "\x00"); p == pkg && (t == test || strings.HasPrefix(t, test+"/")) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, l := range buf[k] {
			fmt.Fprint(w, l)
		}
	}
}

func dropTree(buf map[string][]string, pkg, test string) {
	for k := range buf {
		if p, t, _ := strings.Cut(k, "\x00"); p == pkg && (t == test || strings.HasPrefix(t, test+"/")) {
			delete(buf, k)
		}
	}
}

// summary prints the packages by duration and the slowest tests.
func summary(w io.Writer, rep *Report, top int) {
	if rep == nil || len(rep.Packages) == 0 {
		return
	}
	pkgs := append([]Timing(nil), rep.Packages...)
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Seconds > pkgs[j].Seconds })
	var sum float64
	for _, p := range pkgs {
		sum += p.Seconds
	}
	fmt.Fprintf(w, "\n== where the time went: %d packages, %.0fs of package time, %s wall ==\n",
		len(pkgs), sum, rep.Finished.Sub(rep.Started).Round(time.Second))
	for _, p := range pkgs {
		if p.Seconds < 1 {
			break
		}
		fmt.Fprintf(w, "%8.1fs  %-4s  %s\n", p.Seconds, p.Result, p.Package)
	}
	tests := append([]Timing(nil), rep.Tests...)
	sort.Slice(tests, func(i, j int) bool { return tests[i].Seconds > tests[j].Seconds })
	fmt.Fprintf(w, "-- the %d slowest tests --\n", min(top, len(tests)))
	for i, t := range tests {
		if i == top {
			break
		}
		fmt.Fprintf(w, "%8.1fs  %-4s  %s %s\n", t.Seconds, t.Result, short(t.Package), t.Test)
	}
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/render-dev/render/")
}
