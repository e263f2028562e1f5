//go:build linux

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/sys/unix"

	"github.com/render-dev/render/renderer"
)

// Issue 11.1: a folder of the output swapped for a link to an outside
// folder, and back, while renders run in a loop. Before the output was read
// through an os.Root, renders committed the outside files. Now no commit on
// the branch ever holds one: a render reads the folder, or is refused.
func TestRendersNeverCommitFilesFromOutsideTheOutput(t *testing.T) {
	f := newFixture(t, dests("d1"))
	outside := filepath.Join(f.dir, "outside")
	for i := range 2 {
		writeT(t, filepath.Join(f.output, "sub", fmt.Sprintf("cm-%d.yaml", i)), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inside-%d}\n", i))
		writeT(t, filepath.Join(outside, fmt.Sprintf("cm-%d.yaml", i)), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: outside-%d}\n", i))
	}
	writeT(t, filepath.Join(f.output, "root.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: root}\n")
	parkedLink := filepath.Join(f.dir, "parked-link")
	if err := os.Symlink(outside, parkedLink); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		sub := filepath.Join(f.output, "sub")
		for {
			select {
			case <-stop:
				return
			default:
			}
			// sub: folder <-> link to outside, atomically (renameat2
			// RENAME_EXCHANGE): sub is always one or the other.
			if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, parkedLink, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
		}
	})
	var written, refused int
	deadline := time.Now().Add(30 * time.Second)
	// At least 100 renders, and 3 that read the folder whole while it was
	// being swapped.
	for i := 0; (i < 100 || written < 3) && time.Now().Before(deadline); i++ {
		e := f.engine(map[string]string{"workflow-type": "promise", "promise": "pg", "pipeline": "x"}, false)
		rep, err := e.Render(context.Background())
		e.Close()
		var ie *renderer.InputError
		switch {
		case errors.As(err, &ie):
			refused++
		case err != nil:
			t.Fatalf("render %d: %v", i, err)
		case len(rep.Failed()) > 0:
			t.Fatalf("render %d: store failed: %v", i, rep.Failed()[0].Err)
		default:
			written++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d renders written, %d refused, %d swaps", written, refused, swaps.Load())
	if swaps.Load() == 0 || written == 0 {
		t.Fatalf("within 30s, %d renders were written while the folder was swapped %d times: the test proved nothing", written, swaps.Load())
	}

	repo, err := git.PlainOpen(filepath.Join(f.dir, "state.git"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := repo.Log(&git.LogOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	err = log.ForEach(func(c *object.Commit) error {
		commits++
		tree, err := c.Tree()
		if err != nil {
			return err
		}
		return tree.Files().ForEach(func(file *object.File) error {
			s, err := file.Contents()
			if err == nil && strings.Contains(s, "outside-") {
				return fmt.Errorf("commit %s holds %s from outside the output", c.Hash, file.Name)
			}
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits checked", commits)
}
