package layout

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// pathCases are paths relative to a destination: want "" for accepted,
// else a word the refusal must hold.
var pathCases = []struct{ p, want string }{
	// Accepted: names that merely look odd.
	{"a.yaml", ""},
	{"sub/dir/x.yaml", ""},
	{"..yaml", ""},
	{"...", ""},
	{"a..b.yaml", ""},
	{".github/workflows/x.yaml", ""},
	{".gitignore", ""},
	{".gitkeep", ""},
	{".gitattributes", ""},
	{"git", ""},
	{"git~2", ""},
	{"my.git/x", ""},
	{"x.git", ""},
	{"gitmodules", ""},
	{".gitmodules.yaml", ""},
	{"dependencies/x.yaml", ""},
	{"resources/deploy.yaml", ""},
	{"resources/kratix-canary-configmap.yaml.bak", ""},
	{"sub/.render/x", ""},
	{"sub/dependencies", ""},
	{"ünïcode/名前.yaml", ""},
	{"clusterrole-system:aggregate.yaml", ""},
	{strings.Repeat("a", 255), ""},

	// Not clean, absolute, escaping.
	{"", "empty"},
	{".", "empty"},
	{"/etc/passwd", "absolute"},
	{"a//b", "clean"},
	{"a/./b", "clean"},
	{"a/", "clean"},
	{"../x", "leaves"},
	{"..", "leaves"},
	{"a/../../x", "clean"},
	{`..\..\evil.yaml`, "backslash"},
	{`a\.git\config`, "backslash"},

	// Bytes no store or file system holds.
	{"a\x00b", "control"},
	{"a\nb.yaml", "control"},
	{"a\tb", "control"},
	{"a\x7fb", "control"},
	{"a\u0085b", "control"},
	{"bad\xffutf8", "UTF-8"},
	{strings.Repeat("a", 256), "bytes long"},
	{strings.Repeat("abcdefgh/", 114) + "x", "bytes long"},

	// MinIO reads these as . and ..; so does NTFS for trailing spaces.
	{"a/.. /b", "reads as"},
	{"a/ ../b", "reads as"},
	{"a/. /b", "reads as"},
	{"..  ", "reads as"},

	// .git in any case, as any component, and its disguises.
	{".git", "git refuses"},
	{".git/config", "git refuses"},
	{"sub/.git/config", "git refuses"},
	{"sub/.GIT/HEAD", "git refuses"},
	{"a/.Git", "git refuses"},
	{".git.", "git refuses"},
	{".git...", "git refuses"},
	{".git ", "git refuses"},
	{".git . .", "git refuses"},
	{".git::$INDEX_ALLOCATION/config", "git refuses"},
	{".git:stream", "git refuses"},
	{"git~1", "git refuses"},
	{"GIT~1/config", "git refuses"},
	{"git~1.", "git refuses"},
	{".g\u200cit", "git refuses"},
	{"\ufeff.git/config", "git refuses"},
	{".gi\u200dt\u200e", "git refuses"},

	// .gitmodules and its disguises.
	{".gitmodules", "gitmodules"},
	{"sub/.GITMODULES", "gitmodules"},
	{".gitmodules.", "gitmodules"},
	{".gitmodules ::$DATA", "gitmodules"},
	{"gitmod~1", "gitmodules"},
	{"GITMOD~4", "gitmodules"},
	{"gi7eba~1", "gitmodules"},
	{"gi7eb~12", "gitmodules"},
	{".gitmod\u200cules", "gitmodules"},

	// Names render reserves, in every filepath mode.
	{".render-complete.json", "completeness"},
	{"sub/.render-complete.json", "completeness"},
	{".render", "own records"},
	{".render/workloads/x.json", "own records"},
	{"dependencies/kratix-canary-namespace.yaml", "canary"},
	{"resources/kratix-canary-configmap.yaml", "canary"},
	{"dependencies", "canary"},
	{"resources", "canary"},
}

func TestCheckWorkloadPath(t *testing.T) {
	for _, c := range pathCases {
		err := CheckWorkloadPath(c.p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckWorkloadPath(%q) = %v, want accepted", c.p, err)
		case c.want != "" && err == nil:
			t.Errorf("CheckWorkloadPath(%q) accepted it, want refused (%s)", c.p, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("CheckWorkloadPath(%q) = %v, want a message about %q", c.p, err, c.want)
		}
	}
}

func TestCheckAggregateFile(t *testing.T) {
	for name, ok := range map[string]bool{
		"aggregated.yaml": true, "all.yml": true,
		"a/b.yaml": false, "../x.yaml": false, "..": false, ".": false, "": false,
		"/etc/x.yaml": false, ".git": false, MarkerName: false, MetaDir: false,
		"dependencies": false, "resources": false,
	} {
		if err := CheckAggregateFile(name); (err == nil) != ok {
			t.Errorf("CheckAggregateFile(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestGitAgrees asks git itself: every name git refuses to put in an index
// (core.protectNTFS and core.protectHFS on) is refused by ValidPath. The
// table's accepted names must be ones git accepts too.
func TestGitAgrees(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed")
		}
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	run := func(index string, args ...string) (string, error) {
		cmd := exec.Command(git, append([]string{"-c", "core.protectNTFS=true", "-c", "core.protectHFS=true"}, args...)...)
		cmd.Dir = dir
		if index != "" {
			cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index)
		}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("", "init", "-q"); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	blob, err := run("", "hash-object", "-w", "--stdin")
	if err != nil {
		t.Fatalf("git hash-object: %v: %s", err, blob)
	}
	type verdict struct {
		refused bool
		out     string
	}
	verdicts := make([]verdict, len(pathCases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, c := range pathCases {
		if c.p == "" || strings.ContainsRune(c.p, 0) {
			continue // not expressible as an argument
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A fresh index per path: git checks the path as it adds it.
			index := filepath.Join(dir, fmt.Sprintf("index-%d", i))
			out, err := run(index, "update-index", "--add", "--cacheinfo", "100644,"+blob+","+c.p)
			verdicts[i] = verdict{refused: err != nil, out: out}
		}()
	}
	wg.Wait()
	refusedByGit := 0
	for i, c := range pathCases {
		v := verdicts[i]
		if !v.refused {
			continue
		}
		refusedByGit++
		if ValidPath(c.p) == nil {
			t.Errorf("git refuses %q (%s), ValidPath accepts it", c.p, v.out)
		}
		if c.want == "" {
			t.Errorf("the table accepts %q, git refuses it: %s", c.p, v.out)
		}
	}
	if refusedByGit < 10 {
		t.Fatalf("git refused only %d of the table's paths: is it checking at all?", refusedByGit)
	}
	t.Logf("git refuses %d of the table's %d paths; ValidPath refuses each of them", refusedByGit, len(pathCases))
}

// FuzzValidPath: whatever ValidPath accepts stays inside the store once
// joined to it, is valid UTF-8 without control characters, within the
// length limits, and has no component that any file system git protects
// reads as .git or .gitmodules.
func FuzzValidPath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := CheckWorkloadPath(p)
		if ValidPath(p) != nil && err == nil {
			t.Fatalf("CheckWorkloadPath accepts %q, which ValidPath refuses", p)
		}
		if err != nil {
			return
		}
		if !utf8.ValidString(p) || strings.IndexFunc(p, unicode.IsControl) >= 0 || len(p) > MaxPathBytes {
			t.Fatalf("accepted %q", p)
		}
		if j := path.Join("store/dest", p); !strings.HasPrefix(j, "store/dest/") || path.Clean(j) != j {
			t.Fatalf("accepted %q, which leaves the store as %q", p, j)
		}
		if path.Base(p) == MarkerName || IsMeta(p) || p == CanaryDependencies || p == CanaryResources {
			t.Fatalf("accepted the reserved %q", p)
		}
		for _, c := range strings.Split(p, "/") {
			if len(c) > MaxComponentBytes || strings.ContainsRune(c, '\\') {
				t.Fatalf("accepted %q with component %q", p, c)
			}
			n := strings.ToLower(hfsIgnored.Replace(c))
			if i := strings.IndexByte(n, ':'); i >= 0 {
				n = n[:i]
			}
			n = strings.TrimRight(n, ". ")
			switch n {
			case ".git", "git~1", ".gitmodules", "gitmod~1":
				t.Fatalf("accepted %q, whose component %q reads as %q", p, c, n)
			}
			if strings.TrimSpace(c) == "." || strings.TrimSpace(c) == ".." {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
	})
}

// Names are printed as they are unless they need quotes, as git does.
func TestQuote(t *testing.T) {
	for name, want := range map[string]string{
		"clusters/dev/app.yaml": "clusters/dev/app.yaml",
		"with space.yaml":       "with space.yaml",
		"café.yaml":             "café.yaml",
		"new\nline.yaml":        `"new\nline.yaml"`,
		"tab\there":             `"tab\there"`,
		`say "hi".yaml`:         `"say \"hi\".yaml"`,
		`back\slash`:            `"back\\slash"`,
		"zero\u200bwidth":       `"zero\u200bwidth"`,
		"bad\xffutf8":           `"bad\xffutf8"`,
	} {
		if got := Quote(name); got != want {
			t.Errorf("Quote(%q) = %s, want %s", name, got, want)
		}
	}
}
