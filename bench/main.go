// Command bench measures render side by side with the git CLI doing what
// today's state-store writers do, against real Gitea and MinIO servers, and
// prints a table of figures against their targets. It writes the same
// figures as JSON under .bench/.
//
// It needs the servers of scripts/testservers.sh (their RENDER_TEST_*
// variables); `make bench` (scripts/bench.sh) starts them, runs
//
//	go run ./bench
//
// and stops them. Flags: -runs N (samples per scenario, default 5), -only
// 1,3 (scenarios to run), -out DIR (default .bench), -quick (smaller sizes,
// for trying the program out; its figures are not the published ones),
// -sizes (the store sizes of scenarios 7 and 8, the N of scenario 5), -bin
// (a render binary to measure instead of building one, to compare two
// versions with the same benchmark).
//
// Scenarios (see docs/benchmarks.md):
//
//  1. fan-out: 50 documents to 20 destinations in one repository, against
//     the Kratix write sequence and the one-commit floor, both with the git CLI;
//  2. repository size: a one-file change into repositories holding 0, 2,000
//     and 20,000 files of other workloads, one-shot and in watch mode;
//  3. watch latency: `render --watch`, from a file write to the commit on Gitea;
//  4. S3: a first write of 1,000 objects, an unchanged re-render and a
//     one-object change, with requests counted;
//  5. concurrency: 16 renders at once on one branch and one bucket;
//  6. memory: peak RSS of a render of 10,000 documents;
//  7. store size: a cold render of one new request into Gitea stores of 0,
//     10,000 and 100,000 workloads, generated once and kept per machine,
//     against the server's floor (the git CLI's push of one file);
//  8. store size (S3): the same into MinIO stores, with requests counted;
//  9. OCI: scenario 4's three steps against an OCI registry (ocistore.Apply);
//  10. drain at scale: `render drain` of a destination holding 1,000
//     workloads in git stores of 10,000 and 100,000.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

type scenario struct {
	id   string
	name string
	run  func(ctx context.Context, b *bench) ([]*Row, error)
}

// bench carries the environment and the settings into every scenario.
type bench struct {
	*env
	runs  int
	quick bool
	// sizes, when set, replaces the store sizes of scenarios 7, 8 and 10
	// and the numbers of renders at once of scenario 5.
	sizes []int
	// stores, when set, are the only store kinds scenarios 5 and 10
	// measure ("git", "git-ssh", "s3", "oci").
	stores map[string]bool
	// noKratix leaves Kratix's write sequence out of scenario 1 (render
	// and the floor only: the lone render's figure, on a busy machine).
	noKratix bool
	log      func(format string, args ...any)
	// ssh is scenario 5's SSH git server, while it runs.
	ssh *testenv.SSHGitServer
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == rssWrapperArg {
		os.Exit(rssWrapper(os.Args[2:]))
	}
	runs := flag.Int("runs", 5, "samples per scenario")
	only := flag.String("only", "", "comma-separated scenario numbers to run (default all)")
	out := flag.String("out", ".bench", "folder for the JSON results")
	quick := flag.Bool("quick", false, "smaller sizes, to try the program out (figures not comparable)")
	keep := flag.Bool("keep", false, "keep the scratch folder")
	sizesFlag := flag.String("sizes", "", "comma-separated store sizes for scenarios 7, 8 and 10 (default 0,10000,100000), renders at once for scenario 5 (default 1,4,16,64)")
	binFlag := flag.String("bin", "", "a render binary to measure instead of building cmd/render")
	noKratix := flag.Bool("no-kratix", false, "scenario 1 without Kratix's write sequence (render against the floor only)")
	storesFlag := flag.String("stores", "", "comma-separated store kinds for scenarios 5 and 10 (git, git-ssh, s3, oci; default all)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}

	work, err := os.MkdirTemp("", "render-bench-")
	if err != nil {
		fatal(err)
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	e, err := loadEnv(work)
	if err != nil {
		fatal(err)
	}
	if *binFlag != "" {
		if e.bin, err = filepath.Abs(*binFlag); err != nil {
			fatal(err)
		}
		logf("measuring %s", e.bin)
	} else {
		logf("building render")
		if e.bin, err = buildRender(work); err != nil {
			fatal(err)
		}
	}
	b := &bench{env: e, runs: max(1, *runs), quick: *quick, noKratix: *noKratix, log: logf}
	for _, k := range strings.Split(*storesFlag, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if b.stores == nil {
				b.stores = map[string]bool{}
			}
			b.stores[k] = true
		}
	}
	for _, f := range strings.Split(*sizesFlag, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			fatal(fmt.Errorf("-sizes: %q is not a store size", f))
		}
		b.sizes = append(b.sizes, n)
	}

	all := []scenario{
		{"1", "fan-out", fanout},
		{"2", "repository size", repoSize},
		{"3", "watch latency", watchLatency},
		{"4", "S3", s3Scenario},
		{"5", "concurrency", concurrency},
		{"6", "memory", memory},
		{"7", "store size", storeSize},
		{"8", "store size (S3)", storeSizeS3},
		{"9", "OCI", ociScenario},
		{"10", "drain at scale", drainScale},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	res := &Results{Started: time.Now(), Runs: b.runs, Host: hostInfo()}
	res.Host["go"] = runtime.Version()
	res.Host["gitea"] = e.giteaURL
	res.Host["minio"] = e.minioEndpoint
	for _, s := range all {
		if len(want) > 0 && !want[s.id] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		logf("scenario %s: %s", s.id, s.name)
		rows, err := s.run(ctx, b)
		for _, r := range rows {
			r.Scenario = s.id + " " + s.name
		}
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			msg := fmt.Sprintf("scenario %s (%s): %s", s.id, s.name, e.redact(err.Error()))
			res.Errors = append(res.Errors, msg)
			logf("%s", msg)
		}
		logf("scenario %s took %s", s.id, time.Since(t0).Round(time.Second))
	}
	res.Duration = time.Since(res.Started).Round(time.Second).String()
	res.Host["waited for idle servers"] = e.quiesced.Round(time.Second).String()
	fmt.Println()
	printTable(os.Stdout, res)
	if *quick {
		fmt.Println("(-quick: reduced sizes; these figures are not the published ones)")
	}
	file, err := writeJSON(*out, res)
	if err != nil {
		fatal(err)
	}
	fmt.Printf("\nresults: %s (and %s/latest.json); took %s\n", file, *out, res.Duration)
	if len(res.Errors) > 0 {
		os.Exit(1)
	}
}

// wantStore reports whether scenarios 5 and 10 measure store kind k.
func (b *bench) wantStore(k string) bool { return b.stores == nil || b.stores[k] }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
