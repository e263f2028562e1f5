package ocistore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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

// A spilled layer (read into a temporary file) answers as the layer in
// memory does, and a commit's changes laid over it pack into exactly the
// bytes the same files give when packed in memory: the layer's digest
// does not depend on whether this process spilled it.
func TestSpilledLayerPacksAsInMemory(t *testing.T) {
	files := map[string][]byte{}
	for i := range 500 {
		files[fmt.Sprintf("workloads/p%d/w%03d.json", i%7, i)] = fmt.Appendf(nil, "{\"n\": %d}\n", i)
	}
	files["index.json"] = []byte("{}\n")
	files["empty"] = []byte{}
	for _, level := range []int{gzip.BestSpeed, gzip.BestCompression} {
		packed, err := packLevel(files, level)
		if err != nil {
			t.Fatal(err)
		}
		desc := ocispec.Descriptor{MediaType: LayerMediaType, Digest: digest.FromBytes(packed), Size: int64(len(packed))}
		sp, err := unspill(bytes.NewReader(packed), desc)
		if err != nil {
			t.Fatal(err)
		}
		if got := sp.names(); len(got) != len(files) || !slices.IsSorted(got) {
			t.Fatalf("spilled names: %d, sorted %v", len(got), slices.IsSorted(got))
		}
		for n, want := range files {
			if got, ok, err := sp.get(n); err != nil || !ok || !bytes.Equal(got, want) {
				t.Fatalf("spilled %s: %q, %v, %v", n, got, ok, err)
			}
		}
		// A damaged blob is refused.
		bad := bytes.Clone(packed)
		bad[len(bad)/2] ^= 0xff
		if _, err := unspill(bytes.NewReader(bad), desc); err == nil {
			t.Fatal("a damaged layer was spilled")
		}
		// Changes laid over it pack as the same files in memory do.
		set := map[string][]byte{"workloads/p1/new.json": []byte("new\n"), "index.json": []byte("{\"format\": 1}\n")}
		del := map[string]bool{"workloads/p0/w000.json": true, "workloads/p3/w010.json": true}
		o := newOverlayFiles(sp, set, del)
		want := maps.Clone(files)
		for n := range del {
			delete(want, n)
		}
		maps.Copy(want, set)
		blob, err := packSpilled(o, level)
		if err != nil {
			t.Fatal(err)
		}
		mem, err := packLevel(want, level)
		if err != nil {
			t.Fatal(err)
		}
		if blob.desc.Digest != digest.FromBytes(mem) || blob.desc.Size != int64(len(mem)) {
			t.Fatalf("level %d: the overlay packed to %s (%d bytes), the same files in memory to %s (%d)", level, blob.desc.Digest, blob.desc.Size, digest.FromBytes(mem), len(mem))
		}
		blob.file.Close()
	}
}

// A spilled layer's index is its names, sorted, with each one's extent at
// the same position (no map beside them): a name the layer holds twice is
// its last entry, as a tar is read, and once in the names; a name it does
// not hold is missing, whichever names sort around it.
func TestSpilledIndexLooksUpByName(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, data string }{
		{"b/2.json", "first\n"}, {"a/1.json", "one\n"}, {"b/2.json", "second\n"}, {"c", ""}, {"b/1.json", "b1\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{MediaType: LayerMediaType, Digest: digest.FromBytes(buf.Bytes()), Size: int64(buf.Len())}
	sp, err := unspill(bytes.NewReader(buf.Bytes()), desc)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.file.Close()
	if got, want := sp.names(), []string{"a/1.json", "b/1.json", "b/2.json", "c"}; !slices.Equal(got, want) {
		t.Fatalf("names %q, want %q", got, want)
	}
	for name, want := range map[string]string{"a/1.json": "one\n", "b/1.json": "b1\n", "b/2.json": "second\n", "c": ""} {
		if got, ok, err := sp.get(name); err != nil || !ok || string(got) != want {
			t.Errorf("get(%s) = %q, %v, %v; want %q", name, got, ok, err, want)
		}
	}
	for _, name := range []string{"", "a", "a/0.json", "b/3.json", "d"} {
		if got, ok, err := sp.get(name); err != nil || ok {
			t.Errorf("get(%q) = %q, %v, %v; want missing", name, got, ok, err)
		}
	}
}
