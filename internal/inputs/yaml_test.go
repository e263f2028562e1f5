package inputs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
)

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The alias bomb, in every folder render reads YAML from, is exit 2 naming
// the file, found with a few MiB of memory at most.
func TestAliasBombIsRefusedEverywhereWithinAMemoryBound(t *testing.T) {
	const bound = 8 << 20
	bombDoc := func(kind string) string { // the bomb as one of our kinds
		return strings.Replace(inputs.AliasBomb, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:", kind, 1)
	}
	for _, tc := range []struct {
		name string
		file string
		data string
		load func(dir string) error
	}{
		{"output", "output/x/bomb.yaml", inputs.AliasBomb, func(dir string) error {
			_, err := inputs.ScanOutput(filepath.Join(dir, "output"))
			return err
		}},
		{"metadata", "metadata/" + inputs.SelectorsFileName, inputs.ListBomb, func(dir string) error {
			_, _, err := inputs.LoadSelectors(filepath.Join(dir, "metadata"))
			return err
		}},
		{"input", "input/object.yaml", inputs.AliasBomb, func(dir string) error {
			_, err := inputs.LoadObject(filepath.Join(dir, "input"))
			return err
		}},
		{"platform", "platform/p.yaml", bombDoc("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata: {name: p}\nspec:"), func(dir string) error {
			_, err := inputs.LoadPlatform(kinds, []string{filepath.Join(dir, "platform")}, "")
			return err
		}},
		{"platform, a kind render ignores", "platform/other.yaml", inputs.AliasBomb, func(dir string) error {
			_, err := inputs.LoadPlatform(kinds, []string{filepath.Join(dir, "platform")}, "")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"output", "metadata", "input", "platform"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			file := write(t, filepath.Join(dir, tc.file), tc.data)
			var err error
			n := allocated(func() { err = tc.load(dir) })
			inputErr(t, err, file+": ", fmt.Sprintf("aliases expand to more than %d nodes", inputs.MaxAliasNodes))
			if n > bound {
				t.Errorf("refusing the bomb allocated %d MiB, want at most %d MiB", n>>20, bound>>20)
			}
		})
	}
}

// Below the bound, aliases work, and what Flux's kustomize then makes of
// the file stays within a few tens of MiB: the bound is what keeps the
// render's memory bounded.
func TestAliasesBelowTheBoundAreAcceptedAndCheap(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared}\ndata:\n  a: &a [x,x,x,x,x,x,x,x,x,x]\n")
	b.WriteString("  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n")
	b.WriteString("  d: [" + strings.Repeat("*c,", 61) + "*c]\n") // about 77,000 nodes in all
	out := filepath.Join(t.TempDir(), "output")
	write(t, filepath.Join(out, "resources.yaml"), b.String())
	o, err := inputs.ScanOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	var ferr error
	n := allocated(func() { _, ferr = fluxcheck.CheckDestination(map[string][]byte{"resources/x.yaml": o.Files[0].Data}) })
	if ferr != nil {
		t.Fatal(ferr)
	}
	if n > 64<<20 {
		t.Errorf("kustomize allocated %d MiB for a file within the bound", n>>20)
	}
	t.Logf("kustomize allocated %d MiB", n>>20)
	// One more level is refused.
	write(t, filepath.Join(out, "resources.yaml"), b.String()+"  e: ["+strings.Repeat("*c,", 19)+"*c]\n")
	_, err = inputs.ScanOutput(out)
	inputErr(t, err, "aliases expand to more than")
}

// A YAML file past MaxYAMLBytes is refused without being read whole.
func TestYAMLFileSizeBound(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "output")
	big := filepath.Join(out, "big.yaml")
	write(t, big, "")
	if err := os.Truncate(big, inputs.MaxYAMLBytes+1); err != nil {
		t.Fatal(err)
	}
	var err error
	n := allocated(func() { _, err = inputs.ScanOutput(out) })
	inputErr(t, err, big, "is larger than 32 MiB")
	if n > 2*inputs.MaxYAMLBytes {
		t.Errorf("allocated %d MiB", n>>20)
	}
	// A file that is not YAML has no limit.
	if err := os.Rename(big, filepath.Join(out, "big.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := inputs.ScanOutput(out); err != nil {
		t.Fatal(err)
	}
}
