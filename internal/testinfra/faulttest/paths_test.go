package faulttest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// pathCase is one attempt to write outside a destination's folder or to
// read outside the output folder.
type pathCase struct {
	name string
	// setup changes the workflow (its platform is a local repository
	// stores/state.git with one destination, dev-1) and may return more
	// flags.
	setup func(t *testing.T, w *workflow) []string
	// want is the exit code: 2 (refused, nothing written) or 0 (accepted:
	// then every file must be inside destPath, and check may look further).
	want     int
	destPath string
	check    func(t *testing.T, files map[string]string)
}

func link(t *testing.T, target, at string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(at), 0o755)
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
}

func platformWith(t *testing.T, w *workflow, dest ...string) {
	t.Helper()
	w.setPlatform(t, localStore("store", w.path("stores/state.git")), destination("dev-1", "GitStateStore", "store", dest...))
}

func selectors(t *testing.T, w *workflow, yaml string) {
	t.Helper()
	w.writeFile(t, "metadata/destination-selectors.yaml", yaml)
}

var pathCases = []pathCase{
	// Links in the output that lead out of it.
	{name: "output link to /etc/passwd", want: 2, setup: func(t *testing.T, w *workflow) []string {
		link(t, "/etc/passwd", w.path("output/passwd.yaml"))
		return nil
	}},
	{name: "output link to /etc/passwd without a YAML name", want: 2, setup: func(t *testing.T, w *workflow) []string {
		link(t, "/etc/passwd", w.path("output/passwd"))
		return nil
	}},
	{name: "output link to ../ a file beside the output", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "outside.yaml", configMap("outside", 1, "secret"))
		link(t, "../outside.yaml", w.path("output/up.yaml"))
		return nil
	}},
	{name: "output link to a folder outside", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "outside-dir/x.yaml", configMap("outside", 2, "secret"))
		link(t, "../outside-dir", w.path("output/dir"))
		return nil
	}},
	{name: "output link to its own parent folder", want: 2, setup: func(t *testing.T, w *workflow) []string {
		link(t, "..", w.path("output/parent"))
		return nil
	}},
	{name: "output link chain that ends outside", want: 2, setup: func(t *testing.T, w *workflow) []string {
		link(t, "b.yaml", w.path("output/a.yaml"))
		link(t, "/etc/hostname", w.path("output/b.yaml"))
		return nil
	}},
	{name: "output link in a sub-folder to ../../", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "outside.yaml", configMap("outside", 3, "secret"))
		link(t, "../../outside.yaml", w.path("output/sub/up.yaml"))
		return nil
	}},
	{name: "output file named with backslashes and ..", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, `output/..\..\evil.yaml`, configMap("evil", 1, "v1"))
		// A second store whose destination aggregates (no file paths) is
		// written unless the name is refused before any store is.
		w.setPlatform(t, localStore("store", w.path("stores/state.git")), localStore("other", w.path("stores/other.git")),
			destination("dev-1", "GitStateStore", "store"),
			destination("dev-2", "GitStateStore", "other", "filepath: {mode: aggregatedYAML}"))
		return nil
	}},

	// destination-selectors.yaml directories.
	{name: "selectors directory ../x", want: 2, setup: func(t *testing.T, w *workflow) []string {
		selectors(t, w, "- directory: ../x\n  matchLabels: {env: dev}\n")
		return nil
	}},
	{name: "selectors directory ..", want: 2, setup: func(t *testing.T, w *workflow) []string {
		selectors(t, w, "- directory: ..\n  matchLabels: {env: dev}\n")
		return nil
	}},
	{name: "selectors directory /etc", want: 2, setup: func(t *testing.T, w *workflow) []string {
		selectors(t, w, "- directory: /etc\n  matchLabels: {env: dev}\n")
		return nil
	}},
	{name: "selectors directory a/../../x", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "output/a/x.yaml", configMap("a", 1, "v1"))
		selectors(t, w, "- directory: a/../../x\n  matchLabels: {env: dev}\n")
		return nil
	}},

	// Destination and store paths.
	{name: "Destination spec.path ../../x", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "path: ../../x")
		return nil
	}},
	{name: "Destination spec.path a/../../x", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "path: a/../../x")
		return nil
	}},
	{name: "Destination spec.path ..", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "path: ..")
		return nil
	}},
	{name: "Destination spec.path .render (render's own folder)", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "path: .render/workloads")
		return nil
	}},
	{name: "GitStateStore spec.path ../x", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.setPlatform(t, strings.Replace(localStore("store", w.path("stores/state.git")), "path: clusters", "path: ../x", 1),
			destination("dev-1", "GitStateStore", "store"))
		return nil
	}},
	{name: "Destination spec.path /abs/x is taken as abs/x, inside the store", want: 0, destPath: "abs/x", setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "path: /abs/x")
		return nil
	}},

	// Workflow identity: names become folders.
	{name: "promise name ../evil", want: 2, setup: func(t *testing.T, w *workflow) []string { return []string{"--promise", "../evil"} }},
	{name: "promise name ..", want: 2, setup: func(t *testing.T, w *workflow) []string { return []string{"--promise", ".."} }},
	{name: "pipeline name a/b", want: 2, setup: func(t *testing.T, w *workflow) []string { return []string{"--pipeline", "a/b"} }},
	{name: "pipeline name ../../x", want: 2, setup: func(t *testing.T, w *workflow) []string { return []string{"--pipeline", "../../x"} }},
	{name: "resource name ..", want: 2, setup: func(t *testing.T, w *workflow) []string {
		return []string{"--workflow-type", "resource", "--name", "..", "--namespace", "default"}
	}},
	{name: "resource namespace x/../../y", want: 2, setup: func(t *testing.T, w *workflow) []string {
		return []string{"--workflow-type", "resource", "--name", "db", "--namespace", "x/../../y"}
	}},

	// filepath.filename of aggregatedYAML destinations.
	{name: "filepath.filename ../x.yaml", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "filepath: {mode: aggregatedYAML, filename: ../x.yaml}")
		return nil
	}},
	{name: "filepath.filename a/b.yaml", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "filepath: {mode: aggregatedYAML, filename: a/b.yaml}")
		return nil
	}},
	{name: "filepath.filename ..", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "filepath: {mode: aggregatedYAML, filename: ..}")
		return nil
	}},
	{name: "filepath.filename /etc/x.yaml", want: 2, setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "filepath: {mode: aggregatedYAML, filename: /etc/x.yaml}")
		return nil
	}},

	// Kustomizations that try to read outside the output.
	{name: "kustomization configMapGenerator reading /etc/passwd", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "output/app/kustomization.yaml", "configMapGenerator:\n- name: stolen\n  namespace: x\n  files: [/etc/passwd]\n")
		return nil
	}},
	{name: "kustomization configMapGenerator reading /etc/passwd, --hydrate", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "output/app/kustomization.yaml", "configMapGenerator:\n- name: stolen\n  namespace: x\n  files: [/etc/passwd]\n")
		return []string{"--hydrate"}
	}},
	{name: "kustomization resource ../../../outside.yaml, --hydrate", want: 2, setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "outside.yaml", configMap("outside", 4, "secret"))
		w.writeFile(t, "output/app/kustomization.yaml", "resources: [../../outside.yaml]\n")
		return []string{"--hydrate"}
	}},

	// Legitimate names that merely look odd stay inside.
	{name: "file names ..yaml, ... and a..b.yaml stay inside", want: 0, destPath: "dev-1", setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "output/..yaml", configMap("dots", 1, "v1"))
		w.writeFile(t, "output/...", "not yaml\n")
		w.writeFile(t, "output/sub/a..b.yaml", configMap("dots", 2, "v1"))
		return nil
	}, check: func(t *testing.T, files map[string]string) {
		for _, f := range []string{"..yaml", "...", "sub/a..b.yaml"} {
			if _, ok := files["clusters/dev-1/dependencies/paths/configure/5058f/"+f]; !ok {
				t.Errorf("%s not written inside the destination", f)
			}
		}
	}},
	{name: "a link to a file inside the output is followed", want: 0, destPath: "dev-1", setup: func(t *testing.T, w *workflow) []string {
		w.writeFile(t, "output/notes/readme.txt", "hello\n")
		link(t, "notes/readme.txt", w.path("output/alias.txt"))
		return nil
	}, check: func(t *testing.T, files map[string]string) {
		base := "clusters/dev-1/dependencies/paths/configure/5058f/"
		if files[base+"alias.txt"] != "hello\n" || files[base+"notes/readme.txt"] != "hello\n" {
			t.Errorf("alias.txt does not hold notes/readme.txt's content")
		}
	}},
	{name: "mode none writes flat, inside", want: 0, destPath: "dev-1", setup: func(t *testing.T, w *workflow) []string {
		platformWith(t, w, "filepath: {mode: none}")
		w.writeFile(t, "output/sub/dir/x.yaml", configMap("flat", 1, "v1"))
		return nil
	}},
}

// TestPathsStayInside runs every case of pathCases against a local
// repository: each is refused with exit 2 and nothing written (no
// repository created, no file added anywhere in the test's folder), or
// accepted with every file inside the destination's folder (or render's
// own records), and no content read from outside the output.
func TestPathsStayInside(t *testing.T) {
	t.Parallel()
	renderBin(t)
	for _, c := range pathCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorkflow(t, "paths")
			w.docs(t, 0, 2, "v1")
			os.MkdirAll(w.path("stores"), 0o755)
			platformWith(t, w)
			w.extra = c.setup(t, w)
			before := listDir(t, w.dir)
			res := render(t, w)
			if res.code != c.want {
				t.Fatalf("want exit %d, got %s", c.want, res)
			}
			if c.want != 0 {
				if _, err := os.Stat(w.path("stores/state.git")); err == nil {
					t.Errorf("refused, but the repository was created")
				}
				if after := listDir(t, w.dir); after != before {
					t.Errorf("refused, but files changed:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				if !strings.Contains(res.stderr, "nothing was written") {
					t.Errorf("refused without saying nothing was written: %s", res.stderr)
				}
				t.Logf("refused: %s", strings.TrimSpace(res.stderr))
				return
			}
			files := repoFiles(t, w.path("stores/state.git"))
			for p := range files {
				if !strings.HasPrefix(p, "clusters/"+c.destPath+"/") && !strings.HasPrefix(p, "clusters/.render/") {
					t.Errorf("%s is outside clusters/%s/", p, c.destPath)
				}
			}
			if c.check != nil {
				c.check(t, files)
			}
		})
	}
}

// TestReservedMarkerName: with filepath mode none, an output file named
// like the S3 completeness marker would land where the marker lives. It
// must be refused before anything is written (exit 2), not overwrite the
// marker nor fail half way.
func TestReservedMarkerName(t *testing.T) {
	t.Parallel()
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "marker")
	w := newWorkflow(t, "marker")
	w.docs(t, 0, 2, "v1")
	w.writeFile(t, "output/.render-complete.json", `{"format":1,"digest":"sha256:forged"}`)
	dir := filepath.Join(t.TempDir(), "state.git")
	w.setPlatform(t, bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()), localStore("git", dir),
		destination("dev-1", "BucketStateStore", "minio", "filepath: {mode: none}"),
		destination("dev-2", "GitStateStore", "git", "filepath: {mode: none}"))
	res := render(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := listBucket(ctx, m.Client(t), bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	// The marker must never be forged, whatever else happens.
	if data, err := getObject(ctx, m.Client(t), bucket, "clusters/dev-1/.render-complete.json"); err == nil && strings.Contains(string(data), "forged") {
		t.Fatalf("the output overwrote the completeness marker")
	}
	_, gitErr := os.Stat(dir)
	if res.code != 2 || len(objs) > 0 || gitErr == nil {
		var keys []string
		for k := range objs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Errorf("an output file named .render-complete.json in a mode-none S3 destination: want exit 2 and nothing written; "+
			"got exit %d, bucket holds %d objects %v, git repository written: %v\n%s", res.code, len(objs), keys, gitErr == nil, res.stderr)
	}
}

// TestRefusedBeforeAnyStore: output files that a store would refuse, or
// that would take a name render reserves, sent to one git and one S3
// destination, are exit 2 before either store is contacted: the bucket
// stays empty and the repository is never created. Each case names the
// issue's example; the modes cover where a name would collide.
func TestRefusedBeforeAnyStore(t *testing.T) {
	t.Parallel()
	m := testenv.MinIO(t)
	cases := []struct {
		name, file, mode string
	}{
		{"marker name in a sub-folder (nestedByMetadata)", "sub/.render-complete.json", ""},
		{"marker name in a sub-folder (none)", "sub/.render-complete.json", "filepath: {mode: none}"},
		{"a .git folder", ".git/config", ""},
		{"a .git folder in a sub-folder, upper case", "app/.GIT/config", "filepath: {mode: none}"},
		{"git's NTFS alias of .git", "git~1/config", ""},
		{".git with a trailing dot", "app/.git./HEAD", ""},
		{"a canary's name (none)", "dependencies/kratix-canary-namespace.yaml", "filepath: {mode: none}"},
		{"a canary's name (nestedByMetadata)", "resources/kratix-canary-configmap.yaml", ""},
		{"render's own folder (none)", ".render/workloads/x.json", "filepath: {mode: none}"},
		{"a file where the canaries' folder is (none)", "dependencies", "filepath: {mode: none}"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bucket := m.CreateBucket(t, fmt.Sprintf("refused-%d", i))
			w := newWorkflow(t, "refused")
			w.docs(t, 0, 2, "v1")
			w.writeFile(t, "output/"+c.file, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sneaky, namespace: x}\n")
			dir := filepath.Join(t.TempDir(), "state.git")
			var mode []string
			if c.mode != "" {
				mode = append(mode, c.mode)
			}
			w.setPlatform(t, bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()), localStore("git", dir),
				destination("dev-1", "GitStateStore", "git", mode...),
				destination("dev-2", "BucketStateStore", "minio", mode...))
			res := render(t, w)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			objs, err := listBucket(ctx, m.Client(t), bucket, "")
			if err != nil {
				t.Fatal(err)
			}
			_, gitErr := os.Stat(dir)
			if res.code != 2 || len(objs) > 0 || gitErr == nil {
				t.Fatalf("output file %s to a git and an S3 destination: want exit 2 and nothing written; got exit %d, %d objects in the bucket, repository created: %v\n%s",
					c.file, res.code, len(objs), gitErr == nil, res.stderr)
			}
			if !strings.Contains(res.stderr, c.file) || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
				t.Errorf("want one line naming %s, got:\n%s", c.file, res.stderr)
			}
		})
	}
}

// listDir lists every file and link below dir with its size, one per line.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		if info != nil && !d.IsDir() {
			lines = append(lines, rel+" "+info.Mode().String()+" "+strings.Repeat("#", int(min(info.Size(), 1))))
		} else if d.IsDir() {
			lines = append(lines, rel+"/")
		}
		return nil
	})
	return strings.Join(lines, "\n")
}

// repoFiles reads branch main of a local repository: path to content;
// no file may hold /etc/passwd.
func repoFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := testenv.BranchFiles(t, dir)
	for name, s := range out {
		if strings.Contains(s, "root:x:0:0") {
			t.Errorf("%s holds /etc/passwd", name)
		}
	}
	return out
}
