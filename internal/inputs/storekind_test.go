package inputs_test

// Each store a platform defines is checked by its kind, from the registry
// of package storekind, which installs itself when it is linked in. This
// import links it into the tests of this package (the package's own test
// files share the test binary).
import _ "github.com/render-dev/render/internal/storekind"
