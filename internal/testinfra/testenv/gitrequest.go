package testenv

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
)

// PendingRequests returns the group-commit request refs of repo
// (refs/render/...) that a writer could still apply: those whose workload,
// on branch under prefix (the store's path), is still in the state the
// request was planned on, and those that do not say which state that was.
// A request whose workload has moved on (its own write landed with the
// same push, or a newer render overtook it) is not pending: no writer
// folds it again, and the next write of the store deletes it. It is
// written from the request format the README documents, not with
// render's store code, so that tests check that code against it.
func PendingRequests(repo *git.Repository, branch, prefix string) ([]string, error) {
	refs, err := repo.References()
	if err != nil {
		return nil, err
	}
	var tree *object.Tree
	if ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true); err == nil {
		c, err := repo.CommitObject(ref.Hash())
		if err != nil {
			return nil, err
		}
		if tree, err = c.Tree(); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, err
	}
	var pending []string
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		name := ref.Name().String()
		if !strings.HasPrefix(name, "refs/render/") || ref.Type() != plumbing.HashReference {
			return nil
		}
		live, err := requestPending(repo, ref.Hash(), tree, prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if live {
			pending = append(pending, name)
		}
		return nil
	})
	sort.Strings(pending)
	return pending, err
}

func requestPending(repo *git.Repository, h plumbing.Hash, tree *object.Tree, prefix string) (bool, error) {
	c, err := repo.CommitObject(h)
	if err != nil {
		return false, err
	}
	t, err := c.Tree()
	if err != nil {
		return false, err
	}
	f, err := t.File("request.json")
	if err != nil {
		return false, err
	}
	data, err := f.Contents()
	if err != nil {
		return false, err
	}
	var req struct {
		Workload string `json:"workload"`
		Base     string `json:"base"`
	}
	if err := json.Unmarshal([]byte(data), &req); err != nil {
		return false, err
	}
	if req.Base == "" || tree == nil {
		return true, nil
	}
	state, err := workloadState(tree, prefix, req.Workload)
	if err != nil {
		return false, err
	}
	return state == req.Base, nil
}

// workloadState is the fingerprint a request's "base" holds: "none" when
// the workload has no record, else the SHA-1 of "record <blob id>\n" and,
// for each file the record lists in sorted order, "<path> <blob id or
// absent>\n".
func workloadState(tree *object.Tree, prefix, workload string) (string, error) {
	full := func(p string) string {
		if prefix == "" {
			return p
		}
		return path.Join(prefix, p)
	}
	recPath := statestore.RecordPath(workload)
	rec, err := tree.File(full(recPath))
	if errors.Is(err, object.ErrFileNotFound) {
		return "none", nil
	}
	if err != nil {
		return "", err
	}
	h := sha1.New()
	fmt.Fprintf(h, "record %s\n", rec.Hash)
	data, err := rec.Contents()
	if err != nil {
		return "", err
	}
	r, err := statestore.DecodeRecord(recPath, []byte(data))
	if err != nil {
		return "", err
	}
	files := append([]string(nil), r.Files...)
	sort.Strings(files)
	for _, p := range files {
		id := "absent"
		if f, err := tree.File(full(p)); err == nil {
			id = f.Hash.String()
		} else if !errors.Is(err, object.ErrFileNotFound) {
			return "", err
		}
		fmt.Fprintf(h, "%s %s\n", p, id)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BlobID is the git blob id of data, as a request's "files" name it.
func BlobID(data []byte) string {
	return plumbing.ComputeHash(plumbing.BlobObject, data).String()
}

// ForgeRequest pushes to ref, in the repository at url, a request commit
// as anyone allowed to push there could: a root commit whose tree holds
// request.json (req, as JSON) and, in a folder "blobs", each of blobs
// named by its id (BlobID), in the format the README documents. It is
// written with go-git alone, not with render's store code, so that tests
// can hand render requests render would never write.
func ForgeRequest(url string, auth transport.AuthMethod, ref string, req any, blobs ...[]byte) error {
	st := memory.NewStorage()
	put := func(t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
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
	tree := func(entries []object.TreeEntry) (plumbing.Hash, error) {
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		obj := st.NewEncodedObject()
		if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
			return plumbing.ZeroHash, err
		}
		return st.SetEncodedObject(obj)
	}
	manifest, err := json.Marshal(req)
	if err != nil {
		return err
	}
	mh, err := put(plumbing.BlobObject, manifest)
	if err != nil {
		return err
	}
	root := []object.TreeEntry{{Name: "request.json", Mode: filemode.Regular, Hash: mh}}
	if len(blobs) > 0 {
		var entries []object.TreeEntry
		for _, b := range blobs {
			h, err := put(plumbing.BlobObject, b)
			if err != nil {
				return err
			}
			entries = append(entries, object.TreeEntry{Name: h.String(), Mode: filemode.Regular, Hash: h})
		}
		bh, err := tree(entries)
		if err != nil {
			return err
		}
		root = append(root, object.TreeEntry{Name: "blobs", Mode: filemode.Dir, Hash: bh})
	}
	th, err := tree(root)
	if err != nil {
		return err
	}
	sig := object.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Unix(1700000000, 0)}
	c := &object.Commit{Author: sig, Committer: sig, TreeHash: th, Message: "render: pending update\n"}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return err
	}
	ch, err := st.SetEncodedObject(obj)
	if err != nil {
		return err
	}
	local := plumbing.ReferenceName("refs/forged/request")
	if err := st.SetReference(plumbing.NewHashReference(local, ch)); err != nil {
		return err
	}
	rem := git.NewRemote(st, &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	return rem.Push(&git.PushOptions{Auth: auth, Force: true,
		RefSpecs: []config.RefSpec{config.RefSpec("+" + local.String() + ":" + ref)}})
}
