package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// selfCPU is this process's user + system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverTicks is the CPU time (clock ticks) the test servers have used so
// far, read from /proc through their pid files.
func serverTicks() (int64, bool) {
	var total int64
	for _, v := range []string{"RENDER_TEST_GITEA_PIDFILE", "RENDER_TEST_MINIO_PIDFILE"} {
		pid, err := os.ReadFile(os.Getenv(v))
		if err != nil {
			return 0, false
		}
		stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
		if err != nil {
			return 0, false
		}
		// The fields after the command name (which may hold spaces):
		// utime is the 12th, stime the 13th.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 13 {
			return 0, false
		}
		var u, s int64
		fmt.Sscan(f[11], &u)
		fmt.Sscan(f[12], &s)
		total += u + s
	}
	return total, true
}

// quiesce waits, at most 20s, until Gitea and MinIO are idle: less than 3
// clock ticks (30ms of CPU) in 300ms. After a push, Gitea does work of its
// own that grows with the repository (measured: about 1.5 CPU-seconds in
// the 4s after a push into a repository of 20,000 files, none for a small
// one). On this one machine that work would be taken from the next render
// measured; on a real installation the server has its own CPUs. It
// returns how long it waited, and adds it to e.quiesced.
func (e *env) quiesce() time.Duration {
	t0 := time.Now()
	prev, ok := serverTicks()
	if !ok {
		return 0
	}
	for time.Since(t0) < 20*time.Second {
		time.Sleep(300 * time.Millisecond)
		cur, ok := serverTicks()
		if !ok || cur-prev < 3 {
			break
		}
		prev = cur
	}
	d := time.Since(t0)
	e.quiesced += d
	return d
}
