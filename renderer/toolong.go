package renderer

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/render-dev/render/internal/layout"
)

// TooLongAdvice says how to shorten a path a store cannot hold, when err
// is a *layout.TooLongError, and "" otherwise. The path is
// storePath/destPath/rel: the store's spec.path ("" when not part of it),
// the destination's spec.path, and the file's path below the destination
// (Kratix's folders for the workload, then the file's path in the
// workflow's output). It names the part to shorten: the one holding a
// name that is too long, or, for a whole path too long, what each part
// takes of it.
func TooLongAdvice(err error, storePath, destPath, rel string) string {
	var tl *layout.TooLongError
	if !errors.As(err, &tl) {
		return ""
	}
	if tl.Name != "" {
		switch {
		case containsName(storePath, tl.Name):
			return "shorten that name in the store's spec.path"
		case containsName(destPath, tl.Name):
			return "shorten that name in the destination's spec.path"
		default:
			return "rename that file or folder in the workflow's output"
		}
	}
	if storePath == "" && destPath == "" {
		return "shorten its folders and file name in the workflow's output"
	}
	var parts []string
	if storePath != "" {
		parts = append(parts, fmt.Sprintf("the store's spec.path takes %d", len(storePath)+1))
	}
	parts = append(parts, fmt.Sprintf("the destination's spec.path %d", len(destPath)+1),
		fmt.Sprintf("and the file's path below the destination %d (the workload's folders, then the file's path in the workflow's output)", len(rel)))
	where := "the destination's spec.path"
	if storePath != "" {
		where = "the destination's or the store's spec.path"
	}
	return fmt.Sprintf("of its %d bytes, %s: shorten the folders and file names in the workflow's output, or %s", len(path.Join(storePath, destPath, rel)), strings.Join(parts, ", "), where)
}

func containsName(p, name string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == name {
			return true
		}
	}
	return false
}

// DestinationOf is the destination path among dests that holds p, and
// p's path below it.
func DestinationOf(p string, dests []string) (dest, rel string) {
	for _, d := range dests {
		if strings.HasPrefix(p, d+"/") && len(d) > len(dest) {
			dest = d
		}
	}
	if dest == "" {
		return "", p
	}
	return dest, strings.TrimPrefix(p, dest+"/")
}
