package sim

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/chaos"
	"github.com/render-dev/render/statestore"
)

// Foreign state: what someone other than render left in a store before the
// trial's writers start, which render must refuse or ignore without
// deleting another workload's files (issue #35's rules):
//
//   - ledger: a Kratix ledger (.kratix/ in a filepath-none destination)
//     named for a workload render has no record of yet (Target), listing
//     the files of another workload (Owner). Target's first render may
//     take the ledger over; Owner's files stay Owner's.
//   - file-for-folder: a file where Target's folder goes
//     (d2/dependencies/<target>). It stays; Target's renders fail, at once
//     rather than after their whole retry deadline.
//   - request (git): a group-commit request ref pushed by someone else,
//     for a workload no render writes, with no basis, taking over Owner's
//     folders. It is never folded.

// ForeignKind is a kind of foreign state.
type ForeignKind string

// The kinds of foreign state.
const (
	Ledger        ForeignKind = "ledger"
	FileForFolder ForeignKind = "file-for-folder"
	ForgedRequest ForeignKind = "request"
)

// Foreign is one piece of foreign state of a trial.
type Foreign struct {
	Kind ForeignKind
	// Target is the workload whose renders meet it; Owner the workload
	// whose files it names (-1 for none).
	Target, Owner int
}

// drawForeign draws a trial's foreign state, if it gets any.
func drawForeign(r interface{ IntN(int) int }, s *Schedule) []Foreign {
	kinds := []ForeignKind{Ledger, FileForFolder}
	switch s.Store {
	case chaos.GitHTTP, chaos.GitSSH:
		kinds = append(kinds, ForgedRequest)
	case chaos.OCI:
		return nil // its state is one manifest; nothing to place a file in
	}
	if r.IntN(100) >= 30 {
		return nil
	}
	// Targets: promise workloads with no setup render (their first render
	// is a writer's); owners: workloads set up before.
	var targets, owners []int
	for i, w := range s.Workloads {
		switch {
		case !w.Setup && !w.Resource:
			targets = append(targets, i)
		case w.Setup:
			owners = append(owners, i)
		}
	}
	if len(targets) == 0 || len(owners) == 0 {
		return nil
	}
	return []Foreign{{Kind: kinds[r.IntN(len(kinds))], Target: targets[r.IntN(len(targets))], Owner: owners[r.IntN(len(owners))]}}
}

func (f Foreign) String(s Schedule) string {
	t, o := s.Workloads[f.Target].Name, s.Workloads[f.Owner].Name
	switch f.Kind {
	case Ledger:
		return fmt.Sprintf("a Kratix ledger named for %s listing %s's files", t, o)
	case FileForFolder:
		return fmt.Sprintf("a file where %s's folder goes (d2/dependencies/%s)", t, t)
	}
	return fmt.Sprintf("a forged request of workload promise/forged/configure, with no basis, taking over %s's folders", o)
}

// placed is foreign state as placed in a store: its files (store-relative
// paths) and refs.
type placed struct {
	files map[string][]byte
	refs  map[string]bool
	// blocks is the workload whose renders must fail (-1: none).
	blocks int
}

// foreignFiles is what f places, in store-relative paths.
func foreignFiles(s Schedule, f Foreign) placed {
	p := placed{files: map[string][]byte{}, refs: map[string]bool{}, blocks: -1}
	target, owner := s.Workloads[f.Target], s.Workloads[f.Owner]
	switch f.Kind {
	case Ledger:
		var files []string
		for _, d := range chaos.Dests {
			for _, file := range chaos.SetupFiles {
				files = append(files, chaos.FilePath(owner, d, file))
			}
		}
		name := fmt.Sprintf("d3/.kratix/kratix-platform-system-%s-configure-abcde.d3-5058f.yaml", target.Name)
		p.files[name] = []byte("files:\n- " + strings.Join(files, "\n- ") + "\n")
	case FileForFolder:
		p.files["d2/dependencies/"+target.Name] = []byte("placed by someone else\n")
		p.blocks = f.Target
	}
	return p
}

// placeGit commits p's files onto branch main of the bare repository dir,
// and for a forged request, pushes its ref.
func placeGit(dir string, s Schedule, f Foreign, p placed) error {
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return err
	}
	st := repo.Storer
	ref, err := repo.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		return fmt.Errorf("main: %w", err)
	}
	if f.Kind == ForgedRequest {
		return forgeRequest(st, s, f, p)
	}
	tip, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return err
	}
	tree, err := tip.Tree()
	if err != nil {
		return err
	}
	entries := map[string]object.TreeEntry{}
	err = tree.Files().ForEach(func(file *object.File) error {
		entries[file.Name] = object.TreeEntry{Name: file.Name, Mode: file.Mode, Hash: file.Hash}
		return nil
	})
	if err != nil {
		return err
	}
	for rel, data := range p.files {
		h, err := putObject(st, plumbing.BlobObject, data)
		if err != nil {
			return err
		}
		name := path.Join(chaos.StorePath, rel)
		entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}
	}
	root, err := buildTree(st, entries, "")
	if err != nil {
		return err
	}
	sig := object.Signature{Name: "someone else", Email: "else@example.invalid", When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, TreeHash: root, ParentHashes: []plumbing.Hash{ref.Hash()}, Message: "placed by someone else\n"}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return err
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return err
	}
	return st.CheckAndSetReference(plumbing.NewHashReference(ref.Name(), h), ref)
}

// buildTree writes the tree of the entries below dir.
func buildTree(st storer.EncodedObjectStorer, entries map[string]object.TreeEntry, dir string) (plumbing.Hash, error) {
	children := map[string]bool{}
	var out []object.TreeEntry
	for name, e := range entries {
		rel := name
		if dir != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(name, dir+"/"); !ok {
				continue
			}
		}
		first, rest, sub := strings.Cut(rel, "/")
		if !sub {
			out = append(out, object.TreeEntry{Name: first, Mode: e.Mode, Hash: e.Hash})
			continue
		}
		_ = rest
		children[first] = true
	}
	for c := range children {
		h, err := buildTree(st, entries, path.Join(dir, c))
		if err != nil {
			return plumbing.ZeroHash, err
		}
		out = append(out, object.TreeEntry{Name: c, Mode: filemode.Dir, Hash: h})
	}
	sort.Slice(out, func(i, j int) bool { return treeName(out[i]) < treeName(out[j]) })
	obj := st.NewEncodedObject()
	if err := (&object.Tree{Entries: out}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

// treeName is how git sorts tree entries: folders as if their name ended
// with a slash.
func treeName(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func putObject(st storer.EncodedObjectStorer, t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(t)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

// forgedWorkload is the workload of a forged request.
const forgedWorkload = "promise/forged/configure"

// forgeRequest pushes a group-commit request, in the format render writes
// them (statestore/gitstore/pending.go), of a workload no render writes,
// with no basis, that takes over Owner's folders.
func forgeRequest(st storer.Storer, s Schedule, f Foreign, p placed) error {
	owner := s.Workloads[f.Owner]
	var folders []string
	for _, d := range chaos.Dests {
		if fp := chaos.FilePath(owner, d, "a"); strings.Contains(fp, "/5058f/") {
			folders = append(folders, path.Dir(path.Dir(fp)))
		}
	}
	rec := (&statestore.Record{Workload: forgedWorkload, Type: "promise", Promise: "forged", Pipeline: "configure"}).Encode()
	manifest, err := json.Marshal(map[string]any{
		"workload": forgedWorkload, "subject": "render: configure promise forged", "record": json.RawMessage(rec),
		"destinations": chaos.Dests, "adopt": map[string]any{"folders": folders},
	})
	if err != nil {
		return err
	}
	mh, err := putObject(st, plumbing.BlobObject, manifest)
	if err != nil {
		return err
	}
	th, err := buildTree(st, map[string]object.TreeEntry{"request.json": {Name: "request.json", Mode: filemode.Regular, Hash: mh}}, "")
	if err != nil {
		return err
	}
	sig := object.Signature{Name: "someone else", Email: "else@example.invalid", When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, TreeHash: th, Message: "render: pending update of " + forgedWorkload + "\n"}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return err
	}
	h, err := st.SetEncodedObject(obj)
	if err != nil {
		return err
	}
	name := requestRef(forgedWorkload)
	p.refs[name] = true
	return st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h))
}

// requestRef is the request ref of workload on branch main under the
// store's path, as gitstore names them.
func requestRef(workload string) string {
	space := sha1.Sum([]byte("main\x00" + chaos.StorePath))
	sum := sha1.Sum([]byte(workload))
	return "refs/render/pending/" + hex.EncodeToString(space[:6]) + "/" + hex.EncodeToString(sum[:10])
}

// placeBucket uploads p's files.
func placeBucket(ctx context.Context, c *minio.Client, bucket string, p placed) error {
	for rel, data := range p.files {
		if _, err := c.PutObject(ctx, bucket, path.Join(chaos.StorePath, rel), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// foreignChecks takes foreign state out of st before the checker reads it
// (it belongs to no workload, by design), and checks what the trial did
// with it: a foreign file stays unless a render that may take it over
// (the ledger's own workload) wrote; a forged request is never folded
// (its workload's record would be in st, which the checker reports).
func foreignChecks(s Schedule, p placed, runs []*writerRun, st *chaos.State) []string {
	var out []string
	for rel, data := range p.files {
		got, ok := st.Files[rel]
		switch {
		case ok && bytes.Equal(got, data):
			delete(st.Files, rel)
		case strings.Contains(rel, "/.kratix/"):
			// The ledger's own workload takes it over on its first write.
		case ok:
			out = append(out, fmt.Sprintf("foreign: %s, placed by someone else, was overwritten", rel))
		default:
			out = append(out, fmt.Sprintf("foreign: %s, placed by someone else, was deleted", rel))
		}
	}
	var left []chaos.Leftover
	for _, l := range st.Leftovers {
		if !p.refs[l.Name] {
			left = append(left, l)
		}
	}
	st.Leftovers = left
	if p.blocks >= 0 {
		for _, r := range runs {
			if r.Workload != p.blocks || r.Kind == chaos.Drain || r.dead {
				continue
			}
			if took := r.End - r.Start; r.Outcome != chaos.Landed && took > 30*time.Second && !slicesContainsFault(r) {
				out = append(out, fmt.Sprintf("foreign: %s, blocked by a file where its folder goes, failed only after %v (want at once)", r.Label, took.Round(time.Second)))
			}
		}
	}
	return out
}

// slicesContainsFault reports whether a fault met one of r's requests.
func slicesContainsFault(r *writerRun) bool {
	if r.link == nil {
		return false
	}
	for _, q := range r.link.Requests() {
		if !q.Fault.Zero() {
			return true
		}
	}
	return false
}
