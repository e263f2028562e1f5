//go:build linux

package inputs_test

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
)

// exchange swaps two paths atomically (renameat2 RENAME_EXCHANGE).
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// A folder inside the output swapped for a link to an outside folder, and
// back, again and again while the output is read: no read may ever return a
// file from outside. Before the output was read through an os.Root, a
// folder listed as a folder and then read as a link gave the outside files.
func TestScanOutputNeverReadsOutsideWhileTheTreeChanges(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "output")
	outside := filepath.Join(dir, "outside")
	const files = 50
	for i := range files {
		name := "f" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".yaml"
		write(t, filepath.Join(out, "sub", name), "kind: Inside\n")
		write(t, filepath.Join(outside, name), "kind: OUTSIDE\n")
	}
	write(t, filepath.Join(out, "root.yaml"), "kind: Inside\n")
	// Parked outside the output: the link, exchanged with output/sub.
	parkedLink := filepath.Join(dir, "parked-link")
	symlink(t, outside, parkedLink)

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		sub := filepath.Join(out, "sub")
		for {
			select {
			case <-stop:
				return
			default:
			}
			// sub: folder <-> link to outside, atomically: sub is always
			// one or the other, never missing.
			if err := exchange(sub, parkedLink); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
		}
	})

	var ok, refused int
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; (i < 400 || swaps.Load() < 200 || ok < 3) && time.Now().Before(deadline); i++ {
		o, err := inputs.ScanOutput(out)
		if err != nil {
			var ie *renderer.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("a refusal that is not an InputError: %T %v", err, err)
			}
			refused++
			continue
		}
		ok++
		for _, f := range o.Files {
			if strings.Contains(string(f.Data), "OUTSIDE") {
				close(stop)
				wg.Wait()
				t.Fatalf("scan %d read %s from outside the output folder", i, f.Path)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d scans read the output, %d were refused, %d swaps", ok, refused, swaps.Load())
	if swaps.Load() == 0 || ok == 0 {
		t.Fatalf("within 20s, %d scans read the output while the folder was swapped %d times: the test proved nothing", ok, swaps.Load())
	}
}
