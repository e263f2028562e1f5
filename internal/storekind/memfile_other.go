//go:build !linux

package storekind

// memFile returns the name of a file holding data for a library that reads
// only named files, and a function that releases it: a temporary file where
// there is no memfd.
func memFile(name string, data []byte) (string, func(), error) {
	return tempFile(name, data)
}
