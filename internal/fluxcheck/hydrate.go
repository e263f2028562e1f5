package fluxcheck

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
	kustypes "sigs.k8s.io/kustomize/api/types"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// HydratedFile is the name of the file a hydrated folder is built into.
const HydratedFile = "hydrated.yaml"

const originAnnotation = "config.kubernetes.io/origin"

// Hydrate builds the kustomizations of a workflow's output into plain
// manifests before scheduling (render --hydrate), so that workers (and Argo
// CD's directory mode, which does not run kustomize on sub-folders) receive
// objects, not build instructions.
//
//   - A top-level folder F holding a kustomization file is built (kustomize
//     build F, with Flux's options); all of F's files are replaced by one
//     multi-document F/hydrated.yaml. The folder stays, so a directory entry
//     of destination-selectors.yaml still schedules it.
//   - When the output's root holds a kustomization file, it is built too,
//     into hydrated.yaml at the root. It replaces every file directly at the
//     root, and every top-level folder some object of the build comes from.
//     Top-level folders the root build does not use keep their files and
//     their own scheduling. A folder both built on its own and used by the
//     root build would be scheduled twice: that is an input error.
//   - Kustomizations deeper down are left as they are (a worker's Flux
//     builds them); so is everything when no kustomization is at the root or
//     a top-level folder.
//
// Remote bases cannot be hydrated (nothing is fetched): an input error. A
// build that fails is an input error naming the kustomization file. The
// result is sorted by path. It gives up with ctx's error once ctx is done,
// checking before each build.
func Hydrate(ctx context.Context, files []renderer.File) ([]renderer.File, error) {
	byPath := make(map[string][]byte, len(files))
	for _, f := range files {
		byPath[f.Path] = f.Data
	}
	var tops []string // top-level folders with a kustomization
	rootK := false
	for p := range byPath {
		if !isKustomizationFile(path.Base(p)) {
			continue
		}
		switch dir := path.Dir(p); {
		case dir == ".":
			rootK = true
		case !strings.Contains(dir, "/"):
			tops = append(tops, dir)
		}
	}
	if !rootK && len(tops) == 0 {
		return files, nil
	}
	sort.Strings(tops)
	tops = dedupe(tops)
	mem := newMemTree(byPath)
	mem.warn = warnFrom(ctx)
	replaced := map[string]bool{} // top-level folders whose files go
	out := map[string][]byte{}
	for _, dir := range tops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, _, err := hydrateDir(mem, dir, false)
		if err != nil {
			return nil, err
		}
		out[path.Join(dir, HydratedFile)] = data
		replaced[dir] = true
	}
	rootReplaced := false
	if rootK {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, used, err := hydrateDir(mem, ".", true)
		if err != nil {
			return nil, err
		}
		for _, dir := range tops {
			if used[dir] {
				return nil, &renderer.InputError{
					File: mem.kustomizationIn("."),
					Msg: fmt.Sprintf("it builds objects from folder %s, which has its own kustomization and is hydrated on its own into %s: its objects would be scheduled twice; remove %s from the root kustomization, or its kustomization file",
						layout.Quote(dir), layout.Quote(path.Join(dir, HydratedFile)), layout.Quote(dir)),
				}
			}
		}
		for dir := range used {
			replaced[dir] = true
		}
		out[HydratedFile] = data
		rootReplaced = true
	}
	result := make([]renderer.File, 0, len(files))
	for _, f := range files {
		top, _, nested := strings.Cut(f.Path, "/")
		if (nested && replaced[top]) || (!nested && rootReplaced) {
			continue
		}
		if _, ok := out[f.Path]; ok {
			continue
		}
		result = append(result, f)
	}
	for p, data := range out {
		result = append(result, renderer.File{Path: p, Data: data})
	}
	sort.Slice(result, func(i, j int) bool { return result[i].Path < result[j].Path })
	return result, nil
}

// hydrateDir builds dir. With origins, it also returns the top-level folders
// the build's objects come from.
func hydrateDir(mem *memTree, dir string, origins bool) ([]byte, map[string]bool, error) {
	kfile := mem.kustomizationIn(dir)
	if f, ref := mem.remoteRef(dir); f != "" {
		return nil, nil, &renderer.InputError{File: f, Msg: fmt.Sprintf("refers to the remote base %q: --hydrate builds only what is in the output, and fetches nothing", ref)}
	}
	keepOrigins := true
	if origins {
		orig := mem.files[kfile]
		patched, had, err := withOriginAnnotations(orig)
		if err != nil {
			return nil, nil, &renderer.InputError{File: kfile, Msg: "invalid YAML: " + err.Error()}
		}
		keepOrigins = had
		_ = mem.fs.WriteFile(kfile, patched)
		defer mem.fs.WriteFile(kfile, orig) //nolint:errcheck // in memory
	}
	res, err := runKrusty(mem.fs, dir, mem.warn)
	if err != nil {
		return nil, nil, &renderer.InputError{File: kfile, Msg: "kustomize build of " + layout.Quote(dir) + " fails: " + cleanBuildErr(err)}
	}
	used := map[string]bool{}
	if origins {
		for _, r := range res.Resources() {
			var o struct {
				Path string `yaml:"path"`
				Repo string `yaml:"repo"`
			}
			if yaml.Unmarshal([]byte(r.GetAnnotations()[originAnnotation]), &o) != nil || o.Repo != "" {
				continue
			}
			if top, _, nested := strings.Cut(path.Clean(o.Path), "/"); nested && top != ".." {
				used[top] = true
			}
		}
		if !keepOrigins {
			if err := res.RemoveOriginAnnotations(); err != nil {
				return nil, nil, &renderer.InputError{File: kfile, Msg: err.Error()}
			}
		}
	}
	for _, r := range res.Resources() {
		if r.GetApiVersion() == "" || r.GetKind() == "" || r.GetName() == "" {
			return nil, nil, &renderer.InputError{File: kfile, Msg: fmt.Sprintf("kustomize build of %s gives an object without apiVersion, kind or metadata.name (%s %s)", layout.Quote(dir), r.GetKind(), r.GetName())}
		}
	}
	data, err := res.AsYaml()
	if err != nil {
		return nil, nil, &renderer.InputError{File: kfile, Msg: "kustomize build of " + layout.Quote(dir) + ": " + err.Error()}
	}
	return data, used, nil
}

// withOriginAnnotations adds buildMetadata: [originAnnotations] to a
// kustomization, and says whether it was there already.
func withOriginAnnotations(data []byte) ([]byte, bool, error) {
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, false, err
	}
	if k == nil {
		k = map[string]any{}
	}
	list, _ := k["buildMetadata"].([]any)
	for _, x := range list {
		if x == kustypes.OriginAnnotations {
			return data, true, nil
		}
	}
	k["buildMetadata"] = append(list, kustypes.OriginAnnotations)
	out, err := yaml.Marshal(k)
	return out, false, err
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
