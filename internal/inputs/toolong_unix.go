//go:build linux || darwin

package inputs

import "golang.org/x/sys/unix"

// The system's limits: the bytes of one name, and of a path with its
// terminating NUL (PATH_MAX).
const (
	maxName = unix.NAME_MAX
	maxPath = unix.PathMax
)
