package storekind

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/render-dev/render/internal/layout"
)

// goGitRefuses is go-git's own check of one name in a tree (the check
// Flux's source-controller applies when it reads the store): an empty
// tree answers "not found" for every path go-git accepts.
func goGitRefuses(name string) bool {
	_, err := (&object.Tree{}).FindEntry(name)
	return err != nil && !errors.Is(err, object.ErrEntryNotFound) && !errors.Is(err, object.ErrDirectoryNotFound)
}

// layoutRefusesAsDotGit is whether layout.GitRefuses refuses name as .git
// (it also refuses .gitmodules, which go-git's tree check lets through).
func layoutRefusesAsDotGit(name string) bool {
	err := layout.GitRefuses(name)
	return err != nil && strings.HasPrefix(err.Error(), "git refuses")
}

// gitNames are names around .git and its disguises, built from parts.
func gitNames() []string {
	var names []string
	for _, pre := range []string{"", "\u200c", "\ufeff", "x", " "} {
		for _, body := range []string{
			".git", ".GiT", ".GIT", "git~1", "GIT~1", "Git~1", "git~2", "git~10", "git~", "git", ".gi", ".gitx", "x.git",
			".g\u200dit", ".gi\u200ct", ".\u202egit", ".gi\u206ft", ".g\u0130t", ".g\u0131t", ".\u212ait", "\uff0egit",
			".gitmodules", "gitmod~1", ".git~1", "..git", ". git",
		} {
			for _, suf := range []string{"", ".", " ", ". .", "...", ":", ":$DATA", "::$INDEX_ALLOCATION", "x", ".x", " :s", "\u200e", "\ufeff", "\u200c.", "~1"} {
				names = append(names, pre+body+suf)
			}
		}
	}
	return names
}

// layout.GitRefuses writes git's rule for .git itself, so that the pure
// renderer links no git library; it must refuse exactly the names go-git
// refuses, or render would write a tree Flux cannot read (or refuse a
// name git takes).
func TestGitRefusesAgreesWithGoGit(t *testing.T) {
	refused := 0
	for _, name := range gitNames() {
		got, want := layoutRefusesAsDotGit(name), goGitRefuses(name)
		if got != want {
			t.Errorf("%q: layout refuses it as .git: %v; go-git refuses it: %v", name, got, want)
		}
		if want {
			refused++
		}
	}
	if refused < 50 {
		t.Fatalf("go-git refused only %d names: is it checking at all?", refused)
	}
}

func FuzzGitRefusesAgreesWithGoGit(f *testing.F) {
	for _, name := range gitNames() {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		// GitRefuses is asked about one component ValidPath has found
		// clean so far: go-git's other refusals are not its business.
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") ||
			strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return
		}
		if got, want := layoutRefusesAsDotGit(name), goGitRefuses(name); got != want {
			t.Fatalf("%q: layout refuses it as .git: %v; go-git refuses it: %v", name, got, want)
		}
	})
}
