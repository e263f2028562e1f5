package inputs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
)

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
	// Parked outside the output: the real folder and the link, swapped in
	// and out of output/sub by renames.
	parkedDir, parkedLink := filepath.Join(dir, "parked-dir"), filepath.Join(dir, "parked-link")
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
			// sub: folder -> link to outside -> folder.
			for _, mv := range [][2]string{{sub, parkedDir}, {parkedLink, sub}, {sub, parkedLink}, {parkedDir, sub}} {
				if err := os.Rename(mv[0], mv[1]); err != nil {
					t.Errorf("rename %s: %v", mv[0], err)
					return
				}
			}
			swaps.Add(1)
		}
	})

	var ok, refused int
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; (i < 400 || swaps.Load() < 200) && time.Now().Before(deadline); i++ {
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
	if swaps.Load() == 0 {
		t.Fatal("the folder was never swapped: the test proved nothing")
	}
}

// Links that stay inside a folder keep working, however they are spelled;
// those leading out are refused naming the link, in every folder render
// reads.
func TestLinksInEveryFolder(t *testing.T) {
	dir := t.TempDir()
	secret := write(t, filepath.Join(dir, "secret.yaml"), "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata: {name: stolen}\n")

	t.Run("metadata", func(t *testing.T) {
		md := filepath.Join(dir, "metadata")
		write(t, filepath.Join(md, "real", "sel.yaml"), "- matchLabels: {env: dev}\n")
		symlink(t, "real/sel.yaml", filepath.Join(md, inputs.SelectorsFileName))
		e, _, err := inputs.LoadSelectors(md)
		if err != nil || len(e) != 1 {
			t.Fatalf("a link inside: %v %v", e, err)
		}
		os.Remove(filepath.Join(md, inputs.SelectorsFileName))
		symlink(t, filepath.Join(dir, "metadata-outside.yaml"), filepath.Join(md, inputs.SelectorsFileName))
		write(t, filepath.Join(dir, "metadata-outside.yaml"), "- matchLabels: {env: prod}\n")
		_, _, err = inputs.LoadSelectors(md)
		inputErr(t, err, filepath.Join(md, inputs.SelectorsFileName), "link leads outside the metadata folder")
	})
	t.Run("input", func(t *testing.T) {
		in := filepath.Join(dir, "input")
		symlink(t, secret, filepath.Join(in, "object.yaml"))
		_, err := inputs.LoadObject(in)
		inputErr(t, err, filepath.Join(in, "object.yaml"), "link leads outside the input folder")
	})
	t.Run("platform", func(t *testing.T) {
		plat := filepath.Join(dir, "platform")
		write(t, filepath.Join(plat, "store.yaml"), storeDoc)
		symlink(t, secret, filepath.Join(plat, "leak.yaml"))
		_, err := inputs.LoadPlatform([]string{plat}, "")
		inputErr(t, err, filepath.Join(plat, "leak.yaml"), "link leads outside the platform folder")
	})
	t.Run("secrets", func(t *testing.T) {
		sec := filepath.Join(dir, "secrets")
		symlink(t, secret, filepath.Join(sec, "creds", "password"))
		_, err := inputs.LoadPlatform([]string{write(t, filepath.Join(dir, "p.yaml"), storeDoc)}, sec)
		inputErr(t, err, filepath.Join(sec, "creds", "password"), "link leads outside the secrets folder")
	})
	t.Run("output: chains and absolute links", func(t *testing.T) {
		out := filepath.Join(dir, "output")
		write(t, filepath.Join(out, "real", "a.yaml"), "kind: A\n")
		symlink(t, filepath.Join(out, "real", "a.yaml"), filepath.Join(out, "abs.yaml")) // absolute, inside
		symlink(t, "abs.yaml", filepath.Join(out, "through-abs.yaml"))                   // relative, to an absolute link
		symlink(t, filepath.Join(out, "through-abs.yaml"), filepath.Join(out, "z.yaml")) // absolute, to a link
		o, err := inputs.ScanOutput(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range o.Files {
			if string(f.Data) != "kind: A\n" {
				t.Errorf("%s: %q", f.Path, f.Data)
			}
		}
		if got := strings.Join(paths(o), " "); got != "abs.yaml real/a.yaml through-abs.yaml z.yaml" {
			t.Errorf("files %s", got)
		}
		// A chain whose last link leads out is refused naming the first.
		symlink(t, secret, filepath.Join(out, "real", "b.yaml"))
		symlink(t, "real/b.yaml", filepath.Join(out, "chain.yaml"))
		_, err = inputs.ScanOutput(out)
		inputErr(t, err, filepath.Join(out, "chain.yaml"), "link leads outside the output folder")
	})
}
