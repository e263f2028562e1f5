package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Scenario 3: `render --watch` (the built binary, default quiet period)
// on the fan-out workflow (50 documents, 20 destinations) into Gitea. Each
// sample rewrites one document (write to a temporary file and rename) and
// measures until Gitea's branch moves, polling Gitea's API every 5ms.
func watchLatency(ctx context.Context, b *bench) ([]*Row, error) {
	samples := 60
	if b.quick {
		samples = 15
	}
	r, err := b.createRepo("watch", true)
	if err != nil {
		return nil, err
	}
	plat := b.gitStore("gitea", r.CloneURL) + destinations(20, gitRef("gitea"))
	w, err := newWorkflow(filepath.Join(b.work, "watch"), "watchbench", 50, plat)
	if err != nil {
		return nil, err
	}
	initial, err := b.head(r)
	if err != nil {
		return nil, err
	}
	logs := &syncBuffer{}
	cmd := exec.Command(b.bin, append(w.args(), "--watch")...)
	cmd.Dir, cmd.Env = w.dir, renderEnv(w.promise)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}()
	fail := func(err error) ([]*Row, error) {
		return nil, fmt.Errorf("%w; render --watch logs (last lines):\n%s", err, lastLines(logs.String(), 15))
	}
	// waitMove waits for the branch to leave prev and returns the new head.
	waitMove := func(prev string, limit time.Duration) (string, error) {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			h, err := b.head(r)
			if err == nil && h != "" && h != prev {
				return h, nil
			}
			select {
			case err := <-exited:
				exited <- err
				return "", fmt.Errorf("render --watch exited: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return "", fmt.Errorf("no commit within %v", limit)
	}
	head, err := waitMove(initial, 60*time.Second)
	if err != nil {
		return fail(fmt.Errorf("first render: %w", err))
	}
	time.Sleep(500 * time.Millisecond)
	var lat []float64
	for i := range samples {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b.quiesce()
		t0 := time.Now()
		if err := w.writeDoc(i%w.docs, fmt.Sprintf("w%d", i)); err != nil {
			return nil, err
		}
		if head, err = waitMove(head, 60*time.Second); err != nil {
			return fail(fmt.Errorf("change %d: %w", i, err))
		}
		lat = append(lat, ms(time.Since(t0)))
		time.Sleep(200 * time.Millisecond) // let the render finish its bookkeeping
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			return fail(fmt.Errorf("render --watch after SIGTERM: %v", err))
		}
	case <-time.After(60 * time.Second):
		return fail(fmt.Errorf("render --watch did not exit within 60s of SIGTERM"))
	}
	row := newRow("", "file write -> commit on Gitea (render --watch)", "ms", lat)
	row.Note = fmt.Sprintf("%d changes, one document each; built binary with --watch, default --quiet-period 150ms; p99 is by nearest rank (with fewer than 100 samples, the largest)", len(lat))
	return []*Row{row}, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
