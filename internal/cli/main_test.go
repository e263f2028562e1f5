package cli

import (
	"os"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}
