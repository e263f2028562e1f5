package chaos

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/minio/minio-go/v7"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// State is what a store holds at the end of a trial, read straight from the
// server (never through the proxy, never with render's own store code).
type State struct {
	// Files are the store's files, by path relative to the store's path.
	Files map[string][]byte
	// Published are the files each destination's consumer (Flux) reads,
	// relative to the destination's folder, when the store publishes them
	// apart from Files (OCI: each destination's artifact); nil otherwise,
	// when Flux reads Files.
	Published map[string]map[string][]byte
	// Read is when the state was read.
	Read time.Time
	// Leftovers are what a writer leaves only while it works: group-commit
	// requests (git), lock tags (OCI).
	Leftovers []Leftover
}

// Leftover is one thing a writer holds while it works, found at the end.
type Leftover struct {
	Name string
	// Expires is the end of its lease, when it has one (OCI's lock tags).
	Expires time.Time
	// Landed is set for a git request whose workload moved past the state
	// it was planned on (its own push landed it, or a newer render
	// overtook it): no writer applies it again, and the store's next
	// write deletes it (testenv.PendingRequests).
	Landed bool
}

// readGit reads branch main of r under prefix, and its pending refs.
func readGit(r *git.Repository, refs []*plumbing.Reference, prefix string) (*State, error) {
	st := &State{Files: map[string][]byte{}}
	var pending map[string]bool
	if r != nil {
		names, err := testenv.PendingRequests(r, "main", prefix)
		if err != nil {
			return nil, fmt.Errorf("read requests: %w", err)
		}
		pending = map[string]bool{}
		for _, n := range names {
			pending[n] = true
		}
	}
	for _, ref := range refs {
		if name := ref.Name().String(); strings.HasPrefix(name, "refs/render/") {
			st.Leftovers = append(st.Leftovers, Leftover{Name: name, Landed: pending != nil && !pending[name]})
		}
	}
	if r == nil {
		return st, nil
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		return nil, err
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		rel, ok := strings.CutPrefix(f.Name, prefix+"/")
		if !ok {
			rel = "../" + f.Name // outside the store's path: reported as no workload's
		}
		s, err := f.Contents()
		st.Files[rel] = []byte(s)
		return err
	})
	return st, err
}

// readRemoteGit clones branch main of url over HTTP (depth 1) and lists
// its refs.
func readRemoteGit(ctx context.Context, url, user, password, prefix string) (*State, error) {
	a := &githttp.BasicAuth{Username: user, Password: password}
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: a})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return &State{Files: map[string][]byte{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", url, err)
	}
	r, err := git.CloneContext(ctx, memory.NewStorage(), nil, &git.CloneOptions{
		URL: url, Auth: a, ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true, Depth: 1,
	})
	if err != nil {
		if strings.Contains(err.Error(), "couldn't find remote ref") {
			return readGit(nil, refs, prefix)
		}
		return nil, fmt.Errorf("clone %s: %w", url, err)
	}
	// The requests too, to tell pending ones from landed ones.
	err = r.FetchContext(ctx, &git.FetchOptions{Auth: a, Depth: 1, RefSpecs: []config.RefSpec{"+refs/render/*:refs/render/*"}})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !strings.Contains(err.Error(), "couldn't find remote ref") {
		return nil, fmt.Errorf("fetch the requests of %s: %w", url, err)
	}
	return readGit(r, refs, prefix)
}

// readLocalGit reads a bare repository on disk. git, updating a ref,
// writes its new value to a lock file beside it (refs/.../name.lock)
// first, and go-git, listing the refs, reads that file too: empty for a
// moment (dotgit.ErrEmptyRefFile; in CI, a read while a killed writer's
// request was being pushed over SSH). That moment is retried.
func readLocalGit(dir, prefix string) (*State, error) {
	r, err := git.PlainOpen(dir)
	if err != nil {
		return nil, err
	}
	iter, err := r.References()
	for try := 0; errors.Is(err, dotgit.ErrEmptyRefFile) && try < 100; try++ {
		time.Sleep(10 * time.Millisecond)
		iter, err = r.References()
	}
	if err != nil {
		return nil, err
	}
	var refs []*plumbing.Reference
	iter.ForEach(func(ref *plumbing.Reference) error { refs = append(refs, ref); return nil })
	return readGit(r, refs, prefix)
}

// readBucket reads every object of a bucket.
func readBucket(ctx context.Context, c *minio.Client, bucket, prefix string) (*State, error) {
	st := &State{Files: map[string][]byte{}}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		b, err := readObject(ctx, c, bucket, o.Key)
		if err != nil {
			return nil, err
		}
		rel, ok := strings.CutPrefix(o.Key, prefix+"/")
		if !ok {
			rel = "../" + o.Key
		}
		st.Files[rel] = b
	}
	return st, nil
}

// readObject reads one object whole.
func readObject(ctx context.Context, c *minio.Client, bucket, key string) ([]byte, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

// ociReader reads an OCI store: its state manifest, and each destination's
// artifact at tag latest.
type ociReader struct {
	addr, user, password, repo string
}

func (o ociReader) repository(name string) (*remote.Repository, error) {
	r, err := remote.NewRepository(o.addr + "/" + name)
	if err != nil {
		return nil, err
	}
	r.PlainHTTP = true
	r.Client = &auth.Client{
		Client:     http.DefaultClient,
		Credential: auth.StaticCredential(o.addr, auth.Credential{Username: o.user, Password: o.password}),
	}
	return r, nil
}

func (o ociReader) read(ctx context.Context, dests []string) (*State, error) {
	st := &State{Files: map[string][]byte{}, Published: map[string]map[string][]byte{}}
	base, err := o.repository(o.repo)
	if err != nil {
		return nil, err
	}
	err = base.Tags(ctx, "", func(tags []string) error {
		for _, t := range tags {
			if strings.HasPrefix(t, "lock-") {
				st.Leftovers = append(st.Leftovers, Leftover{Name: "tag " + t, Expires: lockExpiry(t)})
			}
		}
		return nil
	})
	if err != nil && !isNotFound(err) {
		return nil, fmt.Errorf("tags of %s: %w", o.repo, err)
	}
	m, err := fetchManifest(ctx, base, "render-state")
	if isNotFound(err) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	for _, l := range m.Layers {
		if l.MediaType == ocispec.MediaTypeEmptyJSON {
			continue
		}
		files, err := fetchLayer(ctx, base, l)
		if err != nil {
			return nil, err
		}
		folder := l.Annotations[ocispec.AnnotationTitle]
		for p, b := range files {
			if folder != "." {
				p = path.Join(folder, p)
			}
			st.Files[p] = b
		}
	}
	for _, d := range dests {
		r, err := o.repository(o.repo + "/" + d)
		if err != nil {
			return nil, err
		}
		m, err := fetchManifest(ctx, r, "latest")
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", d, err)
		}
		if len(m.Layers) != 1 {
			return nil, fmt.Errorf("artifact %s has %d layers, want 1", d, len(m.Layers))
		}
		files, err := fetchLayer(ctx, r, m.Layers[0])
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", d, err)
		}
		st.Published[d] = files
	}
	return st, nil
}

// lockExpiry reads the expiry (Unix seconds) in an OCI lock tag's name:
// lock-c-<expiry>-<id> or lock-t-<number>-<expiry>-<id>.
func lockExpiry(tag string) time.Time {
	parts := strings.Split(tag, "-")
	i := 2
	if strings.HasPrefix(tag, "lock-t-") {
		i = 3
	}
	if len(parts) <= i {
		return time.Time{}
	}
	n, err := strconv.ParseInt(parts[i], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

func isNotFound(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "NAME_UNKNOWN") || strings.Contains(err.Error(), "MANIFEST_UNKNOWN"))
}

func fetchManifest(ctx context.Context, r *remote.Repository, tag string) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	_, b, err := r.FetchReference(ctx, tag)
	if err != nil {
		return m, err
	}
	defer b.Close()
	data, err := io.ReadAll(b)
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

func fetchLayer(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor) (map[string][]byte, error) {
	data, err := content.FetchAll(ctx, r.Blobs(), desc)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(h.Name, "./")] = b
	}
}
