package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// s3WatchLatency is scenario 3 on S3, part of scenario 4: `render --watch`
// (the built binary, default quiet period) on a workflow of 50 documents
// to one destination in a MinIO bucket. Each sample rewrites one document
// and measures until the workload's record is committed again (a new
// version with no write under way in it, s3Pending), reading the record
// every 5ms.
func s3WatchLatency(ctx context.Context, b *bench) ([]*Row, error) {
	samples := 60
	if b.quick {
		samples = 15
	}
	bucket, err := b.createBucket(ctx, "s3watch")
	if err != nil {
		return nil, err
	}
	plat := b.bucketStore("minio", bucket) + destinations(1, bucketRef("minio"))
	w, err := newWorkflow(filepath.Join(b.work, "s3watch"), "s3watchbench", 50, plat)
	if err != nil {
		return nil, err
	}
	rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
	// committed returns the record's ETag when no write is under way in it.
	committed := func() (string, error) {
		o, err := b.minio.GetObject(ctx, bucket, rec, minio.GetObjectOptions{})
		if err != nil {
			return "", err
		}
		defer o.Close()
		data, err := io.ReadAll(o)
		if err != nil {
			return "", err
		}
		info, err := o.Stat()
		if err != nil {
			return "", err
		}
		var probe struct {
			Pending []string `json:"s3Pending"`
		}
		if err := json.Unmarshal(data, &probe); err != nil || len(probe.Pending) > 0 {
			return "", err
		}
		return info.ETag, nil
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
	waitMove := func(prev string, limit time.Duration) (string, error) {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			h, err := committed()
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
	head, err := waitMove("", 60*time.Second)
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
		time.Sleep(200 * time.Millisecond) // let the render finish its bookkeeping (the marker)
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
	row := newRow("", "watch latency on S3: file write -> record committed in MinIO (render --watch)", "ms", lat)
	row.Note = fmt.Sprintf("%d changes, one document each, 50 documents to one destination; built binary with --watch, default --quiet-period 150ms; p99 is by nearest rank (with fewer than 100 samples, the largest)", len(lat))
	return []*Row{row}, nil
}
