// Package fluxcheck checks, before anything is written, that what render puts
// in a destination builds the way Flux will build it on the worker, and finds
// objects that two files (or two workloads) would both apply.
//
// # What Flux builds
//
// A worker's Flux runs one Kustomization on ./<destination>/dependencies and
// one on ./<destination>/resources. Its kustomize-controller builds each path
// with kustomize (krusty, load restrictions off, plugins off). Where the path
// holds no kustomization file (kustomization.yaml, kustomization.yml or
// Kustomization), Flux generates one, with the rule of
// github.com/fluxcd/pkg/kustomize's Generator, which this package follows
// (that module needs a newer Go and brings client-go and controller-runtime,
// so the rule is written out here):
//
//   - it walks the whole tree below the path, hidden folders included;
//   - a sub-folder holding its own kustomization file becomes one resource
//     (kustomize builds it) and is not walked further;
//   - every other file whose name ends in exactly ".yaml" or ".yml" becomes a
//     resource, and must decode as Kubernetes objects (kustomize's resource
//     factory: every non-empty document a mapping with kind and
//     metadata.name; a FooList's items inlined), or the whole build fails.
//     Other files are ignored.
//
// The build then fails when two resources have the same identity. The objects
// are applied with server-side apply, which also needs apiVersion, so a
// document without apiVersion is refused here too.
//
// For a GitRepository source, source-controller leaves Flux's default-ignored
// files out of the artifact (folders .git, .github, .circleci; files
// .gitignore, .gitmodules, .gitattributes, .travis.yml, .gitlab-ci.yml,
// appveyor.yml, .drone.yml, cloudbuild.yaml, codeship-services.yml,
// codeship-steps.yml, .goreleaser.yml, .sops.yaml, .flux.yaml), so they are
// not read either. A Bucket source keeps them. Patterns from .sourceignore
// files are not applied.
//
// # How it is checked, and how fast
//
// Plain files are decoded once each with kustomize's own resource factory;
// no kustomize build is needed for them, because a generated kustomization
// that only lists files does nothing but collect their objects. Only folders
// that hold a kustomization file are built with krusty, in process, on an
// in-memory copy of the destination. A kustomization that refers to a remote
// base (a URL, or host/org/repo) is not built: Flux fetches it on the worker,
// and render neither reaches the network nor guesses its objects.
//
// Besides the two sections, files outside dependencies/ and resources/
// (filepath modes none and aggregatedYAML) are checked as a third section,
// ".", the way a Kustomization pointed at those files would build them.
//
// Object identity is group, kind, namespace and name: the version does not
// count (apps/v1 and apps/v1beta1 Deployments are the same object in the
// cluster), and a namespaced object without a namespace is in "default", as
// kustomize has it.
package fluxcheck

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// Sections of a destination, each reconciled by its own Flux Kustomization.
const (
	Dependencies = "dependencies"
	Resources    = "resources"
	// Root holds the files outside dependencies/ and resources/.
	Root = "."
)

// Object is one Kubernetes object a Flux build of a destination produces.
// Store, Destination and Source are set by CheckPlan (empty from
// CheckDestination).
type Object = statestore.Object

// identity is what makes two objects the same object in a cluster.
func identity(o Object) string { return o.Identity() }

// place is where an object is applied: the same identity in two places does
// not clash.
func place(o Object) string {
	return o.Store + "|" + o.Destination + "|" + o.Section
}

// display is the file to name in messages.
func display(o Object) string {
	if o.Source != "" {
		return o.Source
	}
	if o.Destination != "" {
		return path.Join(o.Destination, o.File)
	}
	return o.File
}

// Source is the kind of Flux source that reads a store: what Flux serves
// of a folder depends on it. A store kind declares its own
// (storekind.Capabilities.FluxSource).
type Source string

// The Flux sources render's stores are read by.
const (
	GitRepository Source = "GitRepository"
	Bucket        Source = "Bucket"
	OCIRepository Source = "OCIRepository"
)

// keepsIgnored reports whether the source serves the files a
// GitRepository's artifact leaves out by default (ignoredByFlux): Bucket
// and OCIRepository do.
func (s Source) keepsIgnored() bool { return s == Bucket || s == OCIRepository }

// options tune a check to the source Flux reads from.
type options struct {
	// keepIgnored: the source keeps Flux's default-ignored files (Bucket).
	keepIgnored bool
	// ctx, when set, stops the check once it is done (checkError.cancelled).
	ctx context.Context
}

// done returns ctx's error, if the check has a context and it is done.
func (o options) done() *checkError {
	if o.ctx == nil || o.ctx.Err() == nil {
		return nil
	}
	return &checkError{cancelled: o.ctx.Err()}
}

// CheckDestination checks one destination's files (paths relative to the
// destination folder, e.g. "dependencies/p/x/5058f/a.yaml" and the canary
// files) the way Flux will build its dependencies and resources paths from a
// GitRepository, and returns the objects the builds produce, sorted by
// section, file and identity.
//
// A failure is a *renderer.InputError whose File is the destination-relative
// path at fault, Where the document ("document 2") when known, and Msg the
// reason: a document that is not a Kubernetes object, a kustomization that
// does not build, or two documents of one section with the same identity
// (both files named).
func CheckDestination(files map[string][]byte) ([]Object, error) {
	objs, err := check(files, options{})
	if err != nil {
		return nil, err.inputError(func(p string) string { return p })
	}
	return objs, nil
}

// checkError is a failure before the file names are made readable.
type checkError struct {
	file, other string // destination-relative paths; other for duplicates
	where, msg  string
	// msgf, when set, builds the message once the other file's name is known.
	msgf func(other string) string
	// cancelled is the context's error when the check was stopped.
	cancelled error
}

func (e *checkError) inputError(name func(string) string) *renderer.InputError {
	msg := e.msg
	if e.msgf != nil {
		msg = e.msgf(name(e.other))
	}
	return &renderer.InputError{File: name(e.file), Where: e.where, Msg: msg}
}

// check is CheckDestination without the error conversion.
func check(files map[string][]byte, opt options) ([]Object, *checkError) {
	bySection := map[string][]string{}
	for p := range files {
		if !opt.keepIgnored && ignoredByFlux(p) {
			continue
		}
		bySection[sectionOf(p)] = append(bySection[sectionOf(p)], p)
	}
	var mem *memTree // built on first use
	var all []Object
	for _, sec := range []string{Dependencies, Resources, Root} {
		paths := bySection[sec]
		if len(paths) == 0 {
			continue
		}
		sort.Strings(paths)
		objs, err := checkSection(sec, paths, files, &mem, opt)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

// sectionOf tells which Flux Kustomization reads a destination-relative path.
func sectionOf(p string) string {
	switch {
	case strings.HasPrefix(p, Dependencies+"/"):
		return Dependencies
	case strings.HasPrefix(p, Resources+"/"):
		return Resources
	}
	return Root
}

// sectionDir is the section's folder relative to the destination ("" for Root).
func sectionDir(sec string) string {
	if sec == Root {
		return ""
	}
	return sec
}

// checkSection builds one section: plain files are decoded, folders with a
// kustomization are built with krusty, and identities must be unique.
func checkSection(sec string, paths []string, files map[string][]byte, mem **memTree, opt options) ([]Object, *checkError) {
	base := sectionDir(sec)
	// Folders (destination-relative) holding a kustomization file.
	kdirs := map[string]bool{}
	for _, p := range paths {
		if isKustomizationFile(path.Base(p)) {
			kdirs[path.Dir(p)] = true
		}
	}
	rootDir := base
	if rootDir == "" {
		rootDir = "."
	}
	var objs []Object
	var builds []string
	if kdirs[rootDir] {
		// The section has its own kustomization: Flux builds it as it is.
		builds = []string{rootDir}
	} else {
		seen := map[string]bool{}
		for _, p := range paths {
			if top := topKustomization(p, base, kdirs); top != "" {
				if !seen[top] {
					seen[top] = true
					builds = append(builds, top)
				}
				continue
			}
			if ext := path.Ext(p); ext != ".yaml" && ext != ".yml" {
				continue
			}
			if err := opt.done(); err != nil {
				return nil, err
			}
			fo, err := decodeFile(files[p])
			if err != nil {
				err.file = p
				return nil, err
			}
			for i := range fo {
				fo[i].Section = sec
				fo[i].File = p
			}
			objs = append(objs, fo...)
		}
	}
	for _, dir := range builds {
		if err := opt.done(); err != nil {
			return nil, err
		}
		if *mem == nil {
			*mem = newMemTree(files)
			(*mem).warn = warnFrom(opt.ctx)
		}
		bo, err := (*mem).build(dir)
		if err != nil {
			return nil, err
		}
		for i := range bo {
			bo[i].Section = sec
		}
		objs = append(objs, bo...)
	}
	if err := uniqueIn(objs); err != nil {
		return nil, err
	}
	sortObjects(objs)
	return objs, nil
}

// topKustomization returns the topmost folder between the section folder
// (excluded) and p that holds a kustomization file, or "".
func topKustomization(p, base string, kdirs map[string]bool) string {
	if len(kdirs) == 0 {
		return ""
	}
	rel := p
	if base != "" {
		rel = strings.TrimPrefix(p, base+"/")
	}
	parts := strings.Split(rel, "/")
	dir := base
	for _, part := range parts[:len(parts)-1] {
		dir = path.Join(dir, part)
		if kdirs[dir] {
			return dir
		}
	}
	return ""
}

func isKustomizationFile(name string) bool {
	switch name {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// Flux's default ignore patterns (source-controller, GitRepository).
var (
	ignoredDirs  = map[string]bool{".git": true, ".github": true, ".circleci": true}
	ignoredFiles = map[string]bool{
		".gitignore": true, ".gitmodules": true, ".gitattributes": true,
		".travis.yml": true, ".gitlab-ci.yml": true, "appveyor.yml": true, ".drone.yml": true,
		"cloudbuild.yaml": true, "codeship-services.yml": true, "codeship-steps.yml": true,
		".goreleaser.yml": true, ".sops.yaml": true, ".flux.yaml": true,
	}
	ignoredExts = []string{".jpg", ".jpeg", ".gif", ".png", ".wmv", ".flv", ".tar.gz", ".zip"}
)

// ignoredByFlux reports whether a GitRepository artifact leaves p out.
func ignoredByFlux(p string) bool {
	parts := strings.Split(p, "/")
	for _, d := range parts[:len(parts)-1] {
		if ignoredDirs[d] {
			return true
		}
	}
	name := parts[len(parts)-1]
	if ignoredFiles[name] {
		return true
	}
	for _, ext := range ignoredExts {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// uniqueIn finds two objects of one section with the same identity.
func uniqueIn(objs []Object) *checkError {
	first := make(map[string]int, len(objs))
	for i, o := range objs {
		id := identity(o)
		j, dup := first[id]
		if !dup {
			first[id] = i
			continue
		}
		prev := objs[j]
		return duplicateError(o, prev)
	}
	return nil
}

func duplicateError(o, prev Object) *checkError {
	sec := o.Section
	return &checkError{
		file: o.File, other: prev.File,
		msgf: func(other string) string {
			if prev.File == o.File {
				return fmt.Sprintf("%s is defined twice in this file; Flux's build of %s would fail (may not add resource with an already registered id)", o, sec)
			}
			return fmt.Sprintf("%s is also defined in %s; both are in %s, so Flux's build would fail (may not add resource with an already registered id)", o, layout.Quote(other), sec)
		},
	}
}

// sortObjects orders by section and file, keeping each file's documents in order.
func sortObjects(objs []Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if a.Section != b.Section {
			return a.Section < b.Section
		}
		return a.File < b.File
	})
}
