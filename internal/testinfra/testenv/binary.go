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

// RenderBinary builds cmd/render once per test binary, the way the
// Dockerfile does (static, -trimpath), and returns its path. A package that
// uses it calls RemoveRenderBinary from its TestMain.
func RenderBinary(t testing.TB) string {
	t.Helper()
	b := &renderBuild
	b.once.Do(func() {
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
