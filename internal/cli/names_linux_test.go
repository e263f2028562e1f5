package cli_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A path longer than the system allows is said to be too long, naming the
// path and the limit it passed: a whole path over PATH_MAX, or one name
// over NAME_MAX (the kernel says "file name too long" for both).
func TestPathTooLongIsSaid(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	long := filepath.Join(w.root, strings.Repeat(strings.Repeat("d", 200)+"/", 25)) // over 5000 bytes
	name := filepath.Join(w.root, strings.Repeat("n", 300))
	for _, c := range []struct {
		flag, value, want string
	}{
		{"--output", long, long + ": cannot read the output folder: the path is " + strconv.Itoa(len(long)) + " bytes long; this system allows at most 4095 bytes in a path"},
		{"--metadata", name, name + ": cannot read the metadata folder: a name in the path is 300 bytes long; this system allows at most 255 bytes in a name"},
		{"--platform", long, long + ": cannot read platform configuration: the path is " + strconv.Itoa(len(long)) + " bytes long"},
	} {
		r := run(t, promiseEnv("p", "pipe"), append(wf.args(), c.flag, c.value)...)
		if r.code != 2 || strings.Count(r.errout, "\n") != 1 || !strings.HasPrefix(r.errout, "render: "+c.want) {
			t.Errorf("%s: want exit 2 and the one line %q..., got %s", c.flag, c.want, r)
		}
	}
	// A local repository whose path is too long is not a missing folder.
	store := w.file("platform/store.yaml", gitStore("default", "file://"+filepath.Join(long, "state.git")))
	r := wf.run(promiseEnv("p", "pipe"))
	want := store + ": GitStateStore default: spec.url file://" + filepath.Join(long, "state.git") + ": the path is " + strconv.Itoa(len(filepath.Join(long, "state.git"))) + " bytes long; this system allows at most 4095 bytes in a path"
	if r.code != 2 || !strings.HasPrefix(r.errout, "render: "+want) {
		t.Errorf("a local store's path too long: want exit 2 and %q..., got %s", want, r)
	}
}
