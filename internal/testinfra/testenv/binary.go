package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var renderBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// EnvRenderBinary names a render binary already built the way RenderBinary
// builds it; scripts/test.sh builds one for the whole run, so that each
// package does not link its own.
const EnvRenderBinary = "RENDER_TEST_RENDER_BINARY"

// RenderBinary builds cmd/render once per test binary, the way the
// Dockerfile does (static, -trimpath), and returns its path; or returns
// the binary EnvRenderBinary names. A package that uses it calls
// RemoveRenderBinary from its TestMain.
func RenderBinary(t testing.TB) string {
	t.Helper()
	b := &renderBuild
	b.once.Do(func() {
		if bin := os.Getenv(EnvRenderBinary); bin != "" {
			if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				b.err = fmt.Errorf("%s=%s: not an executable file (%v)", EnvRenderBinary, bin, err)
			}
			b.bin = bin
			return
		}
		b.dir, b.err = os.MkdirTemp("", "render-test-bin-")
		if b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "render")
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.bin, "github.com/render-dev/render/cmd/render")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/render: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// RemoveRenderBinary removes what RenderBinary built, if anything.
func RemoveRenderBinary() {
	if renderBuild.dir != "" {
		os.RemoveAll(renderBuild.dir)
	}
}
