package storekind

import "os"

// tempFile writes data to a temporary file, for memFile where a file in
// memory cannot be had; release removes it.
func tempFile(name string, data []byte) (string, func(), error) {
	f, err := os.CreateTemp("", name+"-*")
	if err != nil {
		return "", nil, err
	}
	release := func() { os.Remove(f.Name()) }
	if _, err := f.Write(data); err != nil {
		f.Close()
		release()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		release()
		return "", nil, err
	}
	return f.Name(), release, nil
}
