package inputs_test

import (
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
)

// Each store a platform defines is checked by its kind, from the registry
// of package storekind, which a program passes to LoadPlatform. The tests
// of this package pass kinds; the package's own test files (which cannot
// import storekind: it imports this package) pass inputs.Kinds.
var kinds = storekind.Default

func init() { inputs.Kinds = kinds }

// A program that passes no store kinds gets an error, not a panic, and no
// platform.
func TestLoadPlatformWithoutKinds(t *testing.T) {
	p, err := inputs.LoadPlatform(nil, []string{"../../fixtures/platform"}, "")
	if err == nil || p != nil || !strings.Contains(err.Error(), "store kinds") {
		t.Fatalf("LoadPlatform(nil, ...) = %v, %v; want an error about the store kinds", p, err)
	}
	if _, err := inputs.LoadPlatform(kinds, []string{"../../fixtures/platform"}, ""); err != nil {
		t.Fatalf("the fixture platform: %v", err)
	}
}
