package inputs

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
)

// TooLong explains an error that says a path is longer than this system
// allows (ENAMETOOLONG, which the kernel words "file name too long"
// whichever limit was passed): a name in the path longer than the system's
// limit for one name, or the whole path longer than its limit for a path,
// with the lengths and the limits. ok is false for any other error.
func TooLong(err error) (msg string, ok bool) {
	if !errors.Is(err, syscall.ENAMETOOLONG) {
		return "", false
	}
	var p string
	var pe *fs.PathError
	if errors.As(err, &pe) {
		p = pe.Path
	}
	for _, name := range strings.Split(p, "/") {
		if len(name) > maxName && maxName > 0 {
			return fmt.Sprintf("a name in the path is %d bytes long; this system allows at most %d bytes in a name", len(name), maxName), true
		}
	}
	if len(p) >= maxPath && maxPath > 0 {
		return fmt.Sprintf("the path is %d bytes long; this system allows at most %d bytes in a path", len(p), maxPath-1), true
	}
	if maxName > 0 && maxPath > 0 {
		return fmt.Sprintf("the path is too long for this system (at most %d bytes in a name, %d in a path)", maxName, maxPath-1), true
	}
	return "the path is too long for this system", true
}
