package fluxcheck

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeMu serialises krusty runs, as Flux does: kustomize has had
// concurrent map access bugs (kubernetes-sigs/kustomize#3659).
var kustomizeMu sync.Mutex

// kustomizeOptions are the kustomize-controller's: files may be loaded from
// outside the kustomization's folder, and plugins (helm included) are off.
func kustomizeOptions() *krusty.Options {
	return &krusty.Options{
		LoadRestrictions: kustypes.LoadRestrictionsNone,
		PluginConfig:     kustypes.DisabledPluginConfig(),
	}
}

// memTree is an in-memory copy of a destination (or an output) for krusty.
type memTree struct {
	fs    filesys.FileSystem
	files map[string][]byte
	// warn, when set, is told what kustomize prints while building.
	warn func(dir, msg string)
}

func newMemTree(files map[string][]byte) *memTree {
	fs := filesys.MakeFsInMemory()
	for p, data := range files {
		_ = fs.WriteFile(p, data) // in memory: cannot fail for clean relative paths
	}
	return &memTree{fs: fs, files: files}
}

// kustomizationIn names the kustomization file of dir ("." for the root).
func (m *memTree) kustomizationIn(dir string) string {
	for _, name := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		p := path.Join(dir, name)
		if _, ok := m.files[p]; ok {
			return p
		}
	}
	return path.Join(dir, "kustomization.yaml")
}

// remoteRef returns a remote reference made by a kustomization file at or
// below dir, or "".
func (m *memTree) remoteRef(dir string) (file, ref string) {
	var paths []string
	for p := range m.files {
		if isKustomizationFile(path.Base(p)) && (dir == "." || p == dir || strings.HasPrefix(p, dir+"/")) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, r := range references(m.files[p]) {
			if isRemote(r) {
				return p, r
			}
		}
	}
	return "", ""
}

// build runs kustomize on dir as Flux does. A kustomization with remote
// references is not built (nil, nil).
func (m *memTree) build(dir string) ([]Object, *checkError) {
	kfile := m.kustomizationIn(dir)
	if f, _ := m.remoteRef(dir); f != "" {
		return nil, nil
	}
	res, err := runKrusty(m.fs, dir, m.warn)
	if err != nil {
		return nil, &checkError{file: kfile, msg: "kustomize build of " + dir + " fails, as it would in Flux: " + cleanBuildErr(err)}
	}
	var objs []Object
	for _, r := range res.Resources() {
		o := Object{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(), File: kfile}
		if o.APIVersion == "" {
			return nil, &checkError{file: kfile, msg: fmt.Sprintf("kustomize build of %s gives %s without apiVersion; Flux cannot apply it", dir, o)}
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// runKrusty builds dir. kustomize prints some warnings (deprecated fields)
// straight to the process's stderr; with warn set, they go to warn instead.
func runKrusty(fs filesys.FileSystem, dir string, warn func(dir, msg string)) (res resmap.ResMap, err error) {
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	if warn != nil {
		defer captureStderr(func(msg string) { warn(dir, msg) })()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("kustomize panicked: %v", r)
		}
	}()
	return krusty.MakeKustomizer(kustomizeOptions()).Run(fs, dir)
}

type warnKey struct{}

// WithWarn returns ctx carrying warn, which CheckPlan and Hydrate tell what
// kustomize prints while building (a deprecated field, for one), with the
// folder it built, instead of letting it reach the process's stderr, where
// it would break a JSON log.
func WithWarn(ctx context.Context, warn func(dir, msg string)) context.Context {
	return context.WithValue(ctx, warnKey{}, warn)
}

func warnFrom(ctx context.Context) func(dir, msg string) {
	if ctx == nil {
		return nil
	}
	w, _ := ctx.Value(warnKey{}).(func(dir, msg string))
	return w
}

// captureStderr points os.Stderr, which kustomize writes its warnings to,
// at a pipe whose lines go to warn, until the returned function restores it.
// It runs under kustomizeMu; render's own logs hold the original stderr
// and do not see the swap.
func captureStderr(warn func(string)) (restore func()) {
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	orig := os.Stderr
	os.Stderr = w
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				warn(line)
			}
		}
	}()
	return func() {
		os.Stderr = orig
		w.Close()
		<-done
		r.Close()
	}
}

var quotedConfig = regexp.MustCompile("(?s)`[^`]*`")

// cleanBuildErr shortens krusty's errors to one line: no Go struct dumps,
// no quoted configurations, and paths relative to the in-memory root.
func cleanBuildErr(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, " in object {"); i > 0 {
		msg = msg[:i]
	}
	msg = quotedConfig.ReplaceAllString(msg, "`...`")
	msg = strings.ReplaceAll(msg, "'/", "'")
	return strings.Join(strings.Fields(msg), " ")
}

// references lists what a kustomization file loads from elsewhere: the
// fields kustomize resolves as paths or URLs.
func references(data []byte) []string {
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil // krusty reports it
	}
	var out []string
	strs := func(v any) {
		list, _ := v.([]any)
		for _, x := range list {
			switch x := x.(type) {
			case string:
				out = append(out, x)
			case map[string]any:
				if p, ok := x["path"].(string); ok {
					out = append(out, p)
				}
			}
		}
	}
	for _, key := range []string{"resources", "bases", "components", "crds", "configurations",
		"patchesStrategicMerge", "patches", "patchesJson6902", "generators", "transformers", "validators"} {
		strs(k[key])
	}
	if o, ok := k["openapi"].(map[string]any); ok {
		if p, ok := o["path"].(string); ok {
			out = append(out, p)
		}
	}
	return out
}

// isRemote follows kustomize's rule for a reference that is fetched rather
// than read: a URL (any scheme, or git::), an scp-like user@host:path, or a
// github.com/org/repo path.
func isRemote(ref string) bool {
	r := strings.TrimSpace(ref)
	if strings.Contains(r, "\n") {
		return false // an inline patch
	}
	if len(r) >= 5 && strings.EqualFold(r[:5], "git::") {
		return true
	}
	if strings.Contains(r, "://") {
		return true
	}
	if strings.HasPrefix(r, "github.com/") || strings.HasPrefix(r, "github.com:") {
		return true
	}
	first := r
	if i := strings.IndexAny(r, "/:"); i >= 0 {
		first = r[:i]
	}
	return strings.Contains(first, "@")
}
