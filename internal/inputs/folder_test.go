package inputs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
)

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
		_, err := inputs.LoadPlatform(kinds, []string{plat}, "")
		inputErr(t, err, filepath.Join(plat, "leak.yaml"), "link leads outside the platform folder")
	})
	t.Run("secrets", func(t *testing.T) {
		sec := filepath.Join(dir, "secrets")
		symlink(t, secret, filepath.Join(sec, "creds", "password"))
		_, err := inputs.LoadPlatform(kinds, []string{write(t, filepath.Join(dir, "p.yaml"), storeDoc)}, sec)
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
