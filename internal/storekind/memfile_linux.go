package storekind

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// memFile returns the name of a file holding data for a library that reads
// only named files, and a function that releases it. On Linux the file is a
// memfd named through /proc/self/fd: nothing is written to disk, so it works
// on a read-only root file system without /tmp (a sidecar's). Without memfd
// or /proc it falls back to a temporary file.
func memFile(name string, data []byte) (string, func(), error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return tempFile(name, data)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", nil, err
	}
	path := fmt.Sprintf("/proc/self/fd/%d", fd)
	if _, err := os.Stat(path); err != nil {
		f.Close()
		return tempFile(name, data)
	}
	return path, func() { f.Close() }, nil
}
