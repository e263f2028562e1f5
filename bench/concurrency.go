package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// Scenario 5: N render processes started at once, each a different
// workload (a promise workflow of 20 documents), all writing one Gitea
// branch (or, separately, one MinIO bucket), for N = 1, 4, 16 and 64 (or
// the N of -sizes). Every process must exit 0, and afterwards the branch or
// bucket must hold every workload's files and record. The figure is the
// time from the first start to the last exit, against the same N renders
// run one after another into a fresh branch or bucket; the target is at
// most 0.7x that serial time. Both runs go through a counting proxy
// (countingProxy): git's pushes must stay within N + 2 (one per writer,
// plus a little for lost races), S3's requests per render no higher than
// the serial run's. Each run also says how many of the machine's cores
// were busy on average (/proc/stat, every process on the machine, the
// servers included), and the load average when it started: on a machine
// whose cores the serial run already keeps busy, concurrency cannot gain
// much. A failed run is reported, and the scenario goes on with the next.
//
// Every N runs twice: quiet, and under load, with a busy-loop process per
// core beside the renders (both the renders at once and the serial run),
// as on a busy node or a CI runner (issue 34). On git, each run also
// measures "landing to exit": for each render, the time from the moment
// the push that put its commit on the branch was answered (seen by the
// counting proxy, which reads each push's commands) to the moment its
// process exited; a render whose update was carried by another writer's
// push must see it and exit at once (target: at most 1s).
func concurrency(ctx context.Context, b *bench) ([]*Row, error) {
	gitAddr, gitc, pushes, stopGit, err := gitCountingProxy(strings.TrimPrefix(strings.TrimPrefix(b.giteaURL, "http://"), "https://"))
	if err != nil {
		return nil, err
	}
	defer stopGit()
	s3Addr, s3c, stopS3, err := countingProxy(b.minioEndpoint)
	if err != nil {
		return nil, err
	}
	defer stopS3()
	counters := map[string]*counter{"git": gitc, "s3": s3c}
	addrs := map[string]string{"git": gitAddr, "s3": s3Addr}
	logs := map[string]*pushLog{"git": pushes}
	if b.wantStore("git-ssh") {
		sshc, sshPushes, stop, err := b.startSSHGit()
		if err != nil {
			return nil, err
		}
		defer stop()
		counters["git-ssh"], logs["git-ssh"] = sshc, sshPushes
	}
	sizes := []int{1, 4, 16, 64}
	if b.quick {
		sizes = []int{1, 4, 16}
	}
	if len(b.sizes) > 0 {
		sizes = b.sizes
	}
	var rows []*Row
	var failures []error
	for _, kind := range []string{"git", "git-ssh", "s3"} {
		if !b.wantStore(kind) {
			continue
		}
		if kind == "s3" {
			r, err := b.s3Concurrency(ctx, sizes, b.s3FreshTarget(s3Addr, s3c))
			rows = append(rows, r...)
			if err != nil {
				failures = append(failures, err)
			}
			continue
		}
		for _, n := range sizes {
			for _, busy := range loads() {
				var rs []concurrencyRun
				for run := range min(b.runs, 2) {
					r, err := b.concurrencyRun(ctx, kind, n, run, busy, addrs[kind], counters[kind], logs[kind])
					if err != nil {
						err = fmt.Errorf("%s, N=%d%s, run %d: %w", kind, n, loadName(busy), run+1, err)
						b.log("concurrency %v", err)
						failures = append(failures, err)
						break
					}
					rs = append(rs, r)
				}
				if len(rs) > 0 {
					rows = append(rows, concurrencyRows(kind, n, busy, rs)...)
				}
				if ctx.Err() != nil {
					return rows, errors.Join(append(failures, ctx.Err())...)
				}
			}
		}
	}
	return rows, errors.Join(failures...)
}

// loadName says, in a row's name, whether the run was under load.
// loads are the runs of each N: quiet and busy, or only the busy one with
// RENDER_BENCH_BUSY_ONLY=1 (to measure again the figure a change fixed).
func loads() []bool {
	if os.Getenv("RENDER_BENCH_BUSY_ONLY") == "1" {
		return []bool{true}
	}
	return []bool{false, true}
}

func loadName(busy bool) string {
	if busy {
		return " (busy)"
	}
	return ""
}

// busyLoad starts a busy-loop process per core and returns what stops
// them: the load of issue 34's scenarios, other work on the node.
func busyLoad() (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// concurrencyRun is one run of scenario 5: N renders at once, then the
// same N one after another.
type concurrencyRun struct {
	together, serial time.Duration
	// busyTogether and busySerial are the cores busy on average meanwhile,
	// loadTogether and loadSerial the 1-minute load average at the start.
	busyTogether, busySerial float64
	loadTogether, loadSerial string
	attempts                 []int // per render, sorted
	reqTogether, reqSerial   map[string]int
	// landToExit is, per render (git), the time from its commit's landing
	// to its exit.
	landToExit []time.Duration
}

func (b *bench) concurrencyRun(ctx context.Context, kind string, n, run int, busy bool, via string, cnt *counter, pushes *pushLog) (concurrencyRun, error) {
	const docs = 20
	var r concurrencyRun
	plat, check, target, err := b.concurrencyTarget(ctx, kind, "concurrency", via)
	if err != nil {
		return r, err
	}
	dir := filepath.Join(b.work, "conc", fmt.Sprintf("%s-%d-%d-%t", kind, n, run, busy))
	var ws []*workflow
	for i := range n {
		w, err := newWorkflow(dir, fmt.Sprintf("conc-%02d", i), docs, plat)
		if err != nil {
			return r, err
		}
		ws = append(ws, w)
	}
	cnt.take()
	pushes.take()
	var cpu cpuMeter
	var exits []time.Time
	r.together, r.attempts, exits, err = b.together(ctx, ws, &cpu, busy)
	r.busyTogether, r.loadTogether = cpu.busy, cpu.load
	r.reqTogether = cnt.take()
	if err != nil {
		return r, err
	}
	if err := check(ws, filepath.Join(dir, "check")); err != nil {
		return r, err
	}
	if isGit(kind) {
		if r.landToExit, err = b.landingToExit(ctx, target, ws, exits, pushes.take(), filepath.Join(dir, "history")); err != nil {
			return r, err
		}
	}
	// The same N renders one after another, into a new branch or bucket.
	splat, scheck, _, err := b.concurrencyTarget(ctx, kind, "serial", via)
	if err != nil {
		return r, err
	}
	cnt.take()
	cpu = cpuMeter{}
	r.serial, err = b.serialBaseline(ctx, ws, splat, &cpu, busy)
	r.busySerial, r.loadSerial = cpu.busy, cpu.load
	r.reqSerial = cnt.take()
	if err != nil {
		return r, err
	}
	if err := scheck(ws, filepath.Join(dir, "check-serial")); err != nil {
		return r, err
	}
	slices.Sort(r.attempts)
	if len(r.landToExit) > 0 {
		slices.Sort(r.landToExit)
		b.log("concurrency %s N=%d%s run %d: landing to exit p50 %v, max %v", kind, n, loadName(busy), run+1,
			r.landToExit[len(r.landToExit)/2].Round(time.Millisecond), r.landToExit[len(r.landToExit)-1].Round(time.Millisecond))
	}
	b.log("concurrency %s N=%d%s run %d: together %v (%.2f cores busy, load %s), one after another %v (%.2f cores busy, load %s): %.2fx; attempts p50 %d, max %d; requests together %v (%.1f per render), one after another %v (%.1f per render)",
		kind, n, loadName(busy), run+1, r.together.Round(time.Millisecond), r.busyTogether, r.loadTogether,
		r.serial.Round(time.Millisecond), r.busySerial, r.loadSerial, ms(r.together)/ms(r.serial),
		r.attempts[len(r.attempts)/2], r.attempts[len(r.attempts)-1],
		describeCounts(r.reqTogether), float64(total(r.reqTogether))/float64(n),
		describeCounts(r.reqSerial), float64(total(r.reqSerial))/float64(n))
	return r, nil
}

// concurrencyRows are the table's rows for runs rs of kind at N = n.
func concurrencyRows(kind string, n int, busy bool, rs []concurrencyRun) []*Row {
	var ratios, together, serial, busyT, busyS, p50s, maxes, pushT, pushS, reqT, reqS, refsT, refsS, landP50, landMax []float64
	for _, r := range rs {
		refsT = append(refsT, float64(r.reqTogether["refs"])/float64(n))
		refsS = append(refsS, float64(r.reqSerial["refs"])/float64(n))
		if len(r.landToExit) > 0 {
			landP50 = append(landP50, ms(r.landToExit[len(r.landToExit)/2]))
			landMax = append(landMax, ms(r.landToExit[len(r.landToExit)-1]))
		}
		ratios = append(ratios, ms(r.together)/ms(r.serial))
		together, serial = append(together, ms(r.together)), append(serial, ms(r.serial))
		busyT, busyS = append(busyT, r.busyTogether), append(busyS, r.busySerial)
		p50s = append(p50s, float64(r.attempts[len(r.attempts)/2]))
		maxes = append(maxes, float64(r.attempts[len(r.attempts)-1]))
		pushT, pushS = append(pushT, float64(r.reqTogether["push"])), append(pushS, float64(r.reqSerial["push"]))
		reqT = append(reqT, float64(total(r.reqTogether))/float64(n))
		reqS = append(reqS, float64(total(r.reqSerial))/float64(n))
	}
	what := "one Gitea branch"
	switch kind {
	case "git-ssh":
		what = "one branch over SSH (git's own receive-pack, which runs no hook)"
	case "s3":
		what = "one MinIO bucket"
	}
	at := fmt.Sprintf("N=%d%s", n, loadName(busy))
	ratio := newRow("", fmt.Sprintf("%s: %d renders at once / one after another%s", kind, n, loadName(busy)), "x", ratios)
	ratio.Note = fmt.Sprintf("%d processes, each a workload of 20 documents, into %s; every workload checked", n, what)
	if busy {
		ratio.Note += "; a busy-loop process per core beside both runs"
	}
	if n > 1 {
		ratio.target("<= 0.7", ratio.Median <= 0.7)
	}
	rows := []*Row{ratio,
		newRow("", fmt.Sprintf("%s: %d renders at once, all landed%s", kind, n, loadName(busy)), "ms", together),
		newRow("", fmt.Sprintf("%s: the same %d one after another%s", kind, n, loadName(busy)), "ms", serial),
		newRow("", fmt.Sprintf("%s: cores busy at %s, all at once", kind, at), "n", busyT),
		newRow("", fmt.Sprintf("%s: cores busy at %s, one after another", kind, at), "n", busyS),
		newRow("", fmt.Sprintf("%s: attempts per render at %s, p50", kind, at), "n", p50s),
		newRow("", fmt.Sprintf("%s: attempts per render at %s, max", kind, at), "n", maxes),
	}
	if isGit(kind) {
		p := newRow("", fmt.Sprintf("%s: pushes at %s, all at once", kind, at), "n", pushT)
		rs := newRow("", fmt.Sprintf("%s: ref listings per render at %s, one after another", kind, at), "n", refsS)
		rt := newRow("", fmt.Sprintf("%s: ref listings per render at %s, all at once", kind, at), "n", refsT)
		lp := newRow("", fmt.Sprintf("%s: landing to exit at %s, p50", kind, at), "ms", landP50)
		lm := newRow("", fmt.Sprintf("%s: landing to exit at %s, max", kind, at), "ms", landMax)
		rows = append(rows, p.target(fmt.Sprintf("<= %d", n+2), p.Median <= float64(n+2)),
			newRow("", fmt.Sprintf("%s: pushes at %s, one after another", kind, at), "n", pushS),
			rt.target(fmt.Sprintf("<= 2 x serial (%.1f)", 2*rs.Median), rt.Median <= 2*rs.Median), rs,
			lp, lm.target("<= 1000ms", lm.Median <= 1000))
	} else {
		s := newRow("", fmt.Sprintf("%s: requests per render at %s, one after another", kind, at), "n", reqS)
		t := newRow("", fmt.Sprintf("%s: requests per render at %s, all at once", kind, at), "n", reqT)
		rows = append(rows, t.target(fmt.Sprintf("<= serial (%.1f)", s.Median), t.Median <= s.Median), s)
	}
	return rows
}

// cpuMeter measures how many cores the whole machine kept busy between
// start and stop, from /proc/stat (Linux; zero elsewhere), and notes the
// 1-minute load average at the start.
type cpuMeter struct {
	t0         time.Time
	busy0      int64
	busy, secs float64
	load       string
}

func (m *cpuMeter) start() {
	m.t0, m.busy0 = time.Now(), busyTicks()
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.load, _, _ = strings.Cut(string(data), " ")
	}
}

func (m *cpuMeter) stop() {
	m.secs = time.Since(m.t0).Seconds()
	if m.secs > 0 {
		m.busy = float64(busyTicks()-m.busy0) / clockTicks / m.secs
	}
}

// clockTicks is USER_HZ, the unit of /proc/stat's times: 100 on Linux.
const clockTicks = 100

// busyTicks is the time every core of the machine spent busy since boot
// (all of /proc/stat's cpu line but idle and iowait), in clock ticks.
func busyTicks() int64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy
}

// concurrencyTarget makes a fresh branch (kind "git") or bucket ("s3") and
// returns a platform config with one destination on it, and a check that
// every workload landed there.
// via is the address (host:port) of the counting proxy render talks to.
func (b *bench) concurrencyTarget(ctx context.Context, kind, prefix, via string) (string, func([]*workflow, string) error, repo, error) {
	if kind == "git-ssh" {
		u, err := b.ssh.NewRepo(prefix)
		if err != nil {
			return "", nil, repo{}, err
		}
		r := repo{Name: prefix, CloneURL: strings.TrimPrefix(u, "ssh://git@"+b.ssh.Addr)}
		plat := sshGitStore("ssh", u, b.ssh) + `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-git, labels: {env: bench}}
spec: {stateStoreRef: {kind: GitStateStore, name: ssh}}
`
		return plat, func(ws []*workflow, dir string) error { return b.checkGitLanded(ctx, r, ws, dir) }, r, nil
	}
	if kind == "git" {
		r, err := b.createRepo(prefix, true)
		if err != nil {
			return "", nil, repo{}, err
		}
		u, err := url.Parse(r.CloneURL)
		if err != nil {
			return "", nil, repo{}, err
		}
		u.Host = via
		plat := b.gitStore("gitea", u.String()) + fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-git, labels: {env: bench}}
spec: {stateStoreRef: %s}
`, gitRef("gitea"))
		return plat, func(ws []*workflow, dir string) error { return b.checkGitLanded(ctx, r, ws, dir) }, r, nil
	}
	bucket, err := b.createBucket(ctx, prefix)
	if err != nil {
		return "", nil, repo{}, err
	}
	plat := b.bucketStoreAt("minio", via, bucket) + fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-s3, labels: {env: bench}}
spec: {stateStoreRef: %s}
`, bucketRef("minio"))
	return plat, func(ws []*workflow, _ string) error { return b.checkS3Landed(ctx, bucket, ws) }, repo{}, nil
}

// together starts every workflow's render at once and waits for all of
// them; it returns the wall time, each render's store attempts and when
// each exited, and measures the cores busy meanwhile with cpu. With busy,
// a busy loop runs on every core meanwhile (started once the servers are
// idle).
func (b *bench) together(ctx context.Context, ws []*workflow, cpu *cpuMeter, busy bool) (time.Duration, []int, []time.Time, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	procs := make([]proc, len(ws))
	exits := make([]time.Time, len(ws))
	start := make(chan struct{})
	// RENDER_BENCH_LOGS=DIR keeps each render's debug log, as
	// DIR/<n>-<run>/<workload>.log (the renders at once only).
	logs := os.Getenv("RENDER_BENCH_LOGS")
	if logs != "" {
		logs = filepath.Join(logs, fmt.Sprintf("%d-%s", len(ws), time.Now().UTC().Format("150405")))
		if err := os.MkdirAll(logs, 0o755); err != nil {
			return 0, nil, nil, err
		}
	}
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			args := []string{"-o", "json"}
			if logs != "" {
				args = append(args, "--log-level", "debug")
			}
			procs[i], errs[i] = b.render(ctx, w, args...)
			exits[i] = time.Now()
			if logs != "" {
				os.WriteFile(filepath.Join(logs, w.promise+".log"), []byte(procs[i].Stderr), 0o644)
			}
		}()
	}
	b.quiesce()
	if busy {
		stop, err := busyLoad()
		if err != nil {
			close(start)
			wg.Wait()
			return 0, nil, nil, err
		}
		defer stop()
	}
	cpu.start()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	cpu.stop()
	var attempts []int
	for i, err := range errs {
		if err != nil {
			return 0, nil, nil, fmt.Errorf("writer %d: %w", i, err)
		}
		var rep struct {
			Stores []struct {
				Attempts int `json:"attempts"`
			} `json:"stores"`
		}
		if err := json.Unmarshal([]byte(procs[i].Stdout), &rep); err != nil {
			return 0, nil, nil, fmt.Errorf("writer %d: report: %v", i, err)
		}
		for _, s := range rep.Stores {
			attempts = append(attempts, s.Attempts)
		}
	}
	if len(attempts) == 0 {
		return 0, nil, nil, fmt.Errorf("no store in any report")
	}
	return elapsed, attempts, exits, nil
}

// isGit says whether kind is one of scenario 5's git stores.
func isGit(kind string) bool { return kind == "git" || kind == "git-ssh" }

// startSSHGit starts scenario 5's SSH git server (testenv's, in this
// process: git's own upload-pack and receive-pack behind an SSH server on
// loopback, no hooks, filters allowed as on Gitea or GitHub). It counts
// every session as a listing of the refs (each opens with one), an
// upload-pack session that asked for objects as a fetch, and a
// receive-pack session that sent commands as a push, whose branch tip it
// notes when the answer ended.
func (b *bench) startSSHGit() (*counter, *pushLog, func(), error) {
	s, err := testenv.NewSSHGit(filepath.Join(b.work, "ssh-git"))
	if err != nil {
		return nil, nil, nil, err
	}
	c := &counter{n: map[string]int{}, settle: func() { s.WaitIdle(time.Minute) }}
	pushes := &pushLog{branch: "refs/heads/main", at: map[string]time.Time{}}
	s.Partial = true
	s.Served = func(prog string, head []byte, answered time.Time) {
		kinds := []string{"refs"}
		switch {
		case prog == "git-upload-pack" && bytes.Contains(head, []byte("want ")):
			kinds = append(kinds, "fetch")
		case prog == "git-receive-pack" && len(head) >= 4 && string(head[:4]) != "0000":
			kinds = append(kinds, "push")
			if tip := branchTip(head, pushes.branch); tip != "" {
				pushes.note(tip, answered)
			}
		}
		for _, k := range kinds {
			c.count(k)
		}
	}
	b.ssh = s
	return c, pushes, s.Close, nil
}

// sshGitStore is a GitStateStore named name at url on the SSH server s.
func sshGitStore(name, url string, s *testenv.SSHGitServer) string {
	return gitStoreDocs(name, url, "ssh", "sshPrivateKey", string(s.ClientKeyPEM), "knownHosts", strings.TrimSpace(string(s.KnownHosts)))
}

// checkGitLanded checks that the branch holds every workflow's documents
// and record.
func (b *bench) checkGitLanded(ctx context.Context, r repo, ws []*workflow, dir string) error {
	tree, err := b.readTree(ctx, r, dir)
	if err != nil {
		return err
	}
	for _, w := range ws {
		rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
		if _, ok := tree[rec]; !ok {
			return fmt.Errorf("git: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if string(tree["clusters/worker-git/"+f]) != string(doc(w.promise, i, "v1")) {
				return fmt.Errorf("git: clusters/worker-git/%s is missing or wrong", f)
			}
		}
	}
	return nil
}

// checkS3Landed checks that the bucket holds every workflow's documents and
// record.
func (b *bench) checkS3Landed(ctx context.Context, bucket string, ws []*workflow) error {
	objs := map[string]bool{}
	for o := range b.minio.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		objs[o.Key] = true
	}
	for _, w := range ws {
		rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
		if !objs[rec] {
			return fmt.Errorf("S3: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if !objs["clusters/worker-s3/"+f] {
				return fmt.Errorf("S3: clusters/worker-s3/%s is missing", f)
			}
		}
	}
	return nil
}

// serialBaseline runs the workflows one after another with platform plat
// (a fresh branch or bucket), measuring the cores busy meanwhile with cpu.
func (b *bench) serialBaseline(ctx context.Context, ws []*workflow, plat string, cpu *cpuMeter, busy bool) (time.Duration, error) {
	b.quiesce()
	if busy {
		stop, err := busyLoad()
		if err != nil {
			return 0, err
		}
		defer stop()
	}
	cpu.start()
	defer cpu.stop()
	t0 := time.Now()
	for _, w := range ws {
		if err := writeAtomic(w.platform, []byte(plat)); err != nil {
			return 0, err
		}
		if _, err := b.render(ctx, w); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}
