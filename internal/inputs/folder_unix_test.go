//go:build unix

package inputs_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/render-dev/render/internal/inputs"
)

// A named pipe, or a link to one, is refused at once: reading it would wait
// for a writer forever.
func TestScanOutputRefusesNamedPipes(t *testing.T) {
	t.Run("a pipe", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "output")
		write(t, filepath.Join(out, "a.yaml"), "kind: A\n")
		fifo := filepath.Join(out, "pipe.yaml")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := inputs.ScanOutput(out)
		inputErr(t, err, fifo, "not a regular file")
	})
	t.Run("a link to a pipe", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "output")
		write(t, filepath.Join(out, "sub", "a.yaml"), "kind: A\n")
		if err := syscall.Mkfifo(filepath.Join(out, "sub", "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(out, "0-link.yaml") // walked before sub/pipe
		symlink(t, "sub/pipe", link)
		_, err := inputs.ScanOutput(out)
		inputErr(t, err, link, "not a regular file")
	})
}
