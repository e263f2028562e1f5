// Package layout is the vocabulary the renderer and the state stores share:
// which paths a store may hold, which names render keeps for itself, and the
// small value types that travel from a render into a store's records
// (placements, aggregated-file contributions, object identities).
//
// It does no I/O and imports neither the renderer nor the stores, so the pure
// renderer knows nothing of stores, and every rule about names lives here
// once and is checked before any store is contacted.
package layout

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MetaDir is the folder, relative to a store's path, where render keeps what
// it needs for itself (records, indexes, aggregate parts). Nothing in it is
// YAML, and no destination may use it as its path, so Flux and Argo CD never
// read it as manifests.
const MetaDir = ".render"

// KratixDir is the folder of a destination where Kratix keeps its ledgers
// (filepath mode none): which files each of its workloads wrote there.
// render reads them when it takes a store over from Kratix, so no workload
// file may be written there.
const KratixDir = ".kratix"

// MarkerName is the completeness marker a store may keep at the root of each
// destination (the S3 store does). No workload file may take this name in any
// folder, so the rule is the same for every store and every filepath mode.
const MarkerName = ".render-complete.json"

// IsMeta reports whether the store-relative path p is one of render's own.
func IsMeta(p string) bool { return p == MetaDir || strings.HasPrefix(p, MetaDir+"/") }

// The canary files Kratix keeps in every destination, by name, and their
// paths relative to a nestedByMetadata destination (in the folders Flux's
// two Kustomizations read). In aggregatedYAML and none destinations they
// sit at the destination's root, under their names.
const (
	CanaryNamespaceFile = "kratix-canary-namespace.yaml"
	CanaryConfigMapFile = "kratix-canary-configmap.yaml"
	CanaryDependencies  = "dependencies/" + CanaryNamespaceFile
	CanaryResources     = "resources/" + CanaryConfigMapFile
)

// Limits every store can hold: S3 refuses a key longer than 1024 bytes,
// and a file system (a git checkout, MinIO's disks) a name longer than 255.
const (
	MaxPathBytes      = 1024
	MaxComponentBytes = 255
)

// ValidPath reports whether p is a path every state store can hold, and
// every reader of one can check out: clean, relative, slash-separated,
// inside the store, valid UTF-8 without control characters, no name longer
// than MaxComponentBytes nor the whole longer than MaxPathBytes, no name
// that is "." or ".." once spaces are trimmed (MinIO refuses those), and
// no name git refuses in a tree (see GitRefuses).
func ValidPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("empty path")
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return fmt.Errorf("path %q holds a control character", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case strings.Contains(p, "\\"):
		return fmt.Errorf("path %q contains a backslash", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean", p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q leaves the store", p)
	case len(p) > MaxPathBytes:
		return &TooLongError{Path: p, Len: len(p), Limit: MaxPathBytes}
	}
	for _, c := range strings.Split(p, "/") {
		switch t := strings.TrimSpace(c); {
		case t == "." || t == "..":
			return fmt.Errorf("path %q: the name %q reads as %q", p, c, t)
		case len(c) > MaxComponentBytes:
			return &TooLongError{Path: p, Name: c, Len: len(c), Limit: MaxComponentBytes}
		}
		if err := GitRefuses(c); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
	}
	return nil
}

// TooLongError is a path over one of the two length limits every store
// holds: one name (a file's or a folder's) longer than MaxComponentBytes,
// or the whole path longer than MaxPathBytes. Its message says which.
type TooLongError struct {
	Path string
	// Name is the name over MaxComponentBytes; "" when the whole path is
	// over MaxPathBytes.
	Name       string
	Len, Limit int
}

func (e *TooLongError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("the name %.40q... in path %.60q... is %d bytes long: one file or folder name holds at most %d bytes (a file system's limit)", e.Name, e.Path, e.Len, e.Limit)
	}
	return fmt.Sprintf("path %.60q... is %d bytes long: a whole path, with its folders, holds at most %d bytes (S3's limit on a key, which render keeps for every store)", e.Path, e.Len, e.Limit)
}

// GitRefuses reports why git would refuse name as one component of a path
// in a tree, or nil. It is the rule git applies with core.protectNTFS and
// core.protectHFS on, as go-git (and so Flux's source-controller) applies
// it when it reads a tree: ".git" in any letter case, its 8.3 alias
// "git~1", either followed by dots, spaces or an NTFS stream (":..."), and
// ".git" with characters HFS+ ignores. render also refuses ".gitmodules"
// in the same disguises: git refuses it as a symbolic link and render
// writes links as the files they point at, and git's fsck checks its
// content on push, so a workload file of that name would fail at a server.
//
// name is one component ValidPath has already found clean (no slash, no
// control character, not "." or ".."). The rule is written here, not
// asked of go-git, so that the renderer links no git library; the git
// store kind's tests hold it to go-git's own check.
func GitRefuses(name string) error {
	if isDotGit(name) {
		return fmt.Errorf("git refuses the name %q in a tree: it is .git, or reads as .git on NTFS or HFS+", name)
	}
	if isGitmodules(name) {
		return fmt.Errorf("the name %q is refused: it is .gitmodules, or reads as .gitmodules on NTFS or HFS+, which git refuses as a link and checks on push", name)
	}
	return nil
}

// isDotGit reports whether name reads as .git where git protects it:
// ".git" or "git~1" in any letter case (Unicode's lower case, as go-git
// compares: ".gİt" is refused); on NTFS, either in any ASCII letter case
// followed only by dots and spaces, or by a stream name (":..."); on HFS+,
// ".git" in any ASCII letter case once the code points HFS+ ignores are
// dropped.
func isDotGit(name string) bool {
	switch strings.ToLower(name) {
	case ".git", "git~1":
		return true
	}
	var rest string
	ntfs := false
	switch {
	case len(name) >= 4 && name[0] == '.' && asciiEqualFold(name[1:4], "git"):
		rest, ntfs = name[4:], true
	case len(name) >= 5 && asciiEqualFold(name[:3], "git") && name[3:5] == "~1":
		rest, ntfs = name[5:], true
	}
	if ntfs && ntfsTrailer(rest) {
		return true
	}
	h := hfsIgnored.Replace(name)
	return len(h) == 4 && h[0] == '.' && asciiEqualFold(h[1:], "git")
}

// ntfsTrailer reports whether s is what NTFS drops after a name: dots and
// spaces, up to an optional stream name.
func ntfsTrailer(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ':':
			return true
		case '.', ' ':
		default:
			return false
		}
	}
	return true
}

// asciiEqualFold compares s with the lower-case ASCII word, folding only
// ASCII letters (as git does: no other letter reads as one of these).
func asciiEqualFold(s, word string) bool {
	if len(s) != len(word) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != word[i] {
			return false
		}
	}
	return true
}

// hfsIgnored are the code points HFS+ drops when it compares names.
var hfsIgnored = strings.NewReplacer(
	"\u200c", "", "\u200d", "", "\u200e", "", "\u200f", "",
	"\u202a", "", "\u202b", "", "\u202c", "", "\u202d", "", "\u202e", "",
	"\u206a", "", "\u206b", "", "\u206c", "", "\u206d", "", "\u206e", "", "\u206f", "",
	"\ufeff", "",
)

// isGitmodules reports whether name reads as .gitmodules on NTFS or HFS+:
// in any letter case, with trailing dots and spaces or a stream name, as
// an 8.3 short name (gitmod~N, or the hashed gi7eba~N form), or with
// characters HFS+ ignores.
func isGitmodules(name string) bool {
	n := strings.ToLower(hfsIgnored.Replace(name))
	if i := strings.IndexByte(n, ':'); i >= 0 {
		n = n[:i]
	}
	n = strings.TrimRight(n, ". ")
	if n == ".gitmodules" {
		return true
	}
	i := strings.IndexByte(n, '~')
	if len(n) != 8 || i < 1 || i > 6 || n[i+1] < '1' || n[i+1] > '9' {
		return false
	}
	for _, c := range n[i+2:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return strings.HasPrefix("gitmod", n[:i]) || strings.HasPrefix("gi7eba", n[:i])
}

// CheckWorkloadPath is the one rule for the path a workload's file takes
// inside a destination folder (p is relative to the destination, which in
// filepath mode none is the file's path in the workflow's output): it must
// be a valid path, and it must not take a name render reserves. The rule
// is the same in every filepath mode, so an output is refused or accepted
// whatever destinations it goes to.
func CheckWorkloadPath(p string) error {
	if err := ValidPath(p); err != nil {
		return err
	}
	return reserved(p)
}

// reserved says why p, relative to a destination, is render's own.
func reserved(p string) error {
	first, _, _ := strings.Cut(p, "/")
	switch {
	case path.Base(p) == MarkerName:
		return fmt.Errorf("the name %s is reserved for render's completeness markers", MarkerName)
	case first == MetaDir:
		return fmt.Errorf("the folder %s is reserved for render's own records", MetaDir)
	case first == KratixDir:
		return fmt.Errorf("the folder %s is reserved for Kratix's ledgers, which render reads as evidence of what a workload owns", KratixDir)
	case p == CanaryDependencies || p == CanaryResources:
		return fmt.Errorf("%s is Kratix's canary file in every nestedByMetadata destination", p)
	case p == CanaryNamespaceFile || p == CanaryConfigMapFile:
		return fmt.Errorf("%s is Kratix's canary file at the root of every aggregatedYAML and none destination", p)
	case p == path.Dir(CanaryDependencies) || p == path.Dir(CanaryResources):
		return fmt.Errorf("a file named %s would take the place of the folder that holds render's canary file", p)
	}
	return nil
}

// CheckStorePath is the rule for a path relative to a store (not to a
// destination): a valid path that does not take the completeness marker's
// name. It is what a store may check again; the names reserved inside a
// destination were checked, relative to the destination, by the renderer.
func CheckStorePath(p string) error {
	if err := ValidPath(p); err != nil {
		return err
	}
	if path.Base(p) == MarkerName {
		return fmt.Errorf("the name %s is reserved for render's completeness markers", MarkerName)
	}
	return nil
}

// CheckAggregateFile is the rule for an aggregatedYAML destination's
// filepath.filename: one valid name, and none render reserves in a
// destination.
func CheckAggregateFile(name string) error {
	if strings.Contains(name, "/") {
		return fmt.Errorf("%q must be a plain file name, without a folder", name)
	}
	return CheckWorkloadPath(name)
}

// Group is the API group of an apiVersion ("" for the core group).
func Group(apiVersion string) string {
	if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}
