package ocistore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"maps"
	"testing"
)

// The same files give the same bytes, whatever the map's order, with no
// owner, fixed times and sorted entries, and unpack returns them.
func TestPackIsReproducible(t *testing.T) {
	files := map[string][]byte{"b/x.yaml": []byte("x\n"), "a.yaml": []byte("a\n"), "b/c/y.yaml": []byte("y\n")}
	first, err := pack(files)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := pack(maps.Clone(files))
		if !bytes.Equal(first, again) {
			t.Fatal("packing the same files twice gave different bytes")
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Fatalf("gzip header has a time or name: %v %q", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) {
			t.Fatalf("entry %s: uid %d gid %d %q %q time %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		names = append(names, h.Name)
	}
	want := []string{"a.yaml", "b/", "b/c/", "b/c/y.yaml", "b/x.yaml"}
	if len(names) != len(want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %v, want %v", names, want)
		}
	}
	got, err := unpack(first)
	if err != nil || !maps.EqualFunc(got, files, bytes.Equal) {
		t.Fatalf("unpack: %v, %v", got, err)
	}
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../x", "/etc/x", "a/../../x"} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		_ = zw.Close()
		if _, err := unpack(buf.Bytes()); err == nil {
			t.Errorf("%s: unpacked", name)
		}
	}
}

func TestLockTags(t *testing.T) {
	a, ok := parseLockTag("lock-t-00000000000000000007-1700000000-aa")
	b, ok2 := parseLockTag("lock-t-00000000000000000007-1700000000-bb")
	c, ok3 := parseLockTag("lock-c-1700000000-cc")
	if !ok || !ok2 || !ok3 || a.number != 7 || !a.before(b) || b.before(a) || !c.choosing() || a.choosing() {
		t.Fatalf("%+v %+v %+v", a, b, c)
	}
	for _, bad := range []string{"latest", "render-state", "lock-t-x-1-a", "lock-t-0-1-a", "lock-c-1"} {
		if _, ok := parseLockTag(bad); ok {
			t.Errorf("%s parsed as a lock tag", bad)
		}
	}
}
