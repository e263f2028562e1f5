package gitstore

// Group commit through the server.
//
// N sidecars writing one branch at once each need a turn at the branch tip.
// Re-planning after every lost race costs a fetch and a push per round, and
// N writers make O(N²) attempts. Instead, a writer that loses a race
// publishes its update where it cannot conflict: a "request" commit on a ref
// of its own, refs/render/pending/<space>/<workload>. Whoever next wins the
// branch folds every request it can see into the same push, one commit per
// workload, chained, and deletes the folded request refs in that same atomic
// push, each folded commit naming its request (a Render-Request trailer).
// A writer whose request ref is gone finds that commit (confirm.go: its
// update landed), or plans again and finds its update landed or stale; a
// writer that died after publishing still gets its update landed by the
// next one, unless the workload's record changed meanwhile (a later render
// of it landed): the request is then stale (statestore.Basis), and the next
// push deletes it instead of folding it.
//
// A request is a root commit whose tree holds the Update itself, not a diff:
// request.json (the workload, message, shared paths, aggregate targets, the
// record, and each file's blob id) and a "blobs" folder that keeps every
// blob reachable. Folding a request is therefore exactly what its owner would
// do on a retry: PlanUpdate on the newest tree, with the same ownership
// rules, so a folded update is never a mix and never takes another
// workload's file.

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/render-dev/render/statestore"
)

// pendingRoot is the ref folder for requests.
const pendingRoot = "refs/render/pending/"

// pendingSpace is the ref folder for one branch and store path: stores that
// share a repository but not a branch or a path never fold each other's
// requests.
func pendingSpace(branch, prefix string) string {
	sum := sha1.Sum([]byte(branch + "\x00" + prefix))
	return pendingRoot + hex.EncodeToString(sum[:6]) + "/"
}

// pendingRef names the request ref of one workload. The name is a hash, so
// any workload key makes a valid ref; the key itself is in the request.
func pendingRef(space, workload string) plumbing.ReferenceName {
	sum := sha1.Sum([]byte(workload))
	return plumbing.ReferenceName(space + hex.EncodeToString(sum[:10]))
}

// request is the JSON form of an Update kept in a request commit.
type request struct {
	Workload     string               `json:"workload"`
	Subject      string               `json:"subject"`
	Body         string               `json:"body,omitempty"`
	Trailers     []statestore.Trailer `json:"trailers,omitempty"`
	Files        map[string]string    `json:"files,omitempty"`  // path → blob id
	Shared       map[string]string    `json:"shared,omitempty"` // path → blob id
	Aggregates   []requestAggregate   `json:"aggregates,omitempty"`
	Record       json.RawMessage      `json:"record,omitempty"`
	Destinations []string             `json:"destinations,omitempty"`
	Adopt        *statestore.Adoption `json:"adopt,omitempty"`
	// Basis is the update's statestore.Basis: {"record": the record, or
	// null when there was none}. A request without one (written by an
	// older render) is folded on any record.
	Basis *requestBasis `json:"basis,omitempty"`
	// Base is the workload's state in the tree the request was planned on
	// (see workloadState): a fold that finds another state skips the
	// request, which a newer render of the workload has overtaken (or
	// which has landed already), and deletes it.
	Base string `json:"base,omitempty"`
}

type requestBasis struct {
	Record json.RawMessage `json:"record"`
}

type requestAggregate struct {
	Target string `json:"target"`
	Blob   string `json:"blob,omitempty"` // "" withdraws the contribution
}

// writeRequest stores u, planned on a tree where the workload's state was
// base, as a request commit in objs and returns its id.
func writeRequest(objs storer.EncodedObjectStorer, u statestore.Update, sig object.Signature, base string) (plumbing.Hash, error) {
	blobs := map[plumbing.Hash]bool{}
	put := func(data []byte) (string, error) {
		h, err := writeObject(objs, plumbing.BlobObject, data)
		if err != nil {
			return "", err
		}
		blobs[h] = true
		return h.String(), nil
	}
	req := request{Workload: u.Workload, Subject: u.Message.Subject, Body: u.Message.Body, Trailers: u.Message.Trailers, Destinations: u.Destinations, Adopt: u.Adopt, Base: base}
	var err error
	for _, m := range []struct {
		from map[string][]byte
		to   *map[string]string
	}{{u.Files, &req.Files}, {u.Shared, &req.Shared}} {
		if len(m.from) == 0 {
			continue
		}
		*m.to = make(map[string]string, len(m.from))
		for p, data := range m.from {
			if (*m.to)[p], err = put(data); err != nil {
				return plumbing.ZeroHash, err
			}
		}
	}
	for _, a := range u.Aggregates {
		ra := requestAggregate{Target: a.Target}
		if len(a.Contribution) > 0 {
			if ra.Blob, err = put(a.Contribution); err != nil {
				return plumbing.ZeroHash, err
			}
		}
		req.Aggregates = append(req.Aggregates, ra)
	}
	if u.Record != nil {
		req.Record = u.Record.Encode()
	}
	if u.Basis != nil {
		req.Basis = &requestBasis{Record: json.RawMessage("null")}
		if u.Basis.Record != nil {
			req.Basis.Record = u.Basis.Record.Encode()
		}
	}
	manifest, err := json.Marshal(&req)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	mh, err := writeObject(objs, plumbing.BlobObject, manifest)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	entries := make([]object.TreeEntry, 0, len(blobs))
	for h := range blobs {
		entries = append(entries, object.TreeEntry{Name: h.String(), Mode: filemode.Regular, Hash: h})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	root := []object.TreeEntry{{Name: "request.json", Mode: filemode.Regular, Hash: mh}}
	if len(entries) > 0 {
		bh, err := writeTreeObject(objs, entries)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		root = []object.TreeEntry{{Name: "blobs", Mode: filemode.Dir, Hash: bh}, root[0]}
	}
	th, err := writeTreeObject(objs, root)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	c := &object.Commit{Author: sig, Committer: sig, TreeHash: th,
		Message: "render: pending update of " + u.Workload + "\n\n" + u.Message.String()}
	obj := objs.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return objs.SetEncodedObject(obj)
}

func writeTreeObject(objs storer.EncodedObjectStorer, entries []object.TreeEntry) (plumbing.Hash, error) {
	obj := objs.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return objs.SetEncodedObject(obj)
}

// readRequest decodes the request commit c back into the Update it holds,
// and the signature its owner would have committed with.
func readRequest(objs storer.EncodedObjectStorer, c plumbing.Hash) (statestore.Update, object.Signature, error) {
	u, sig, _, err := readRequestBase(objs, c)
	return u, sig, err
}

// readRequestBase is readRequest, with the workload's state the request
// was planned on ("" for a request of a render that did not say).
func readRequestBase(objs storer.EncodedObjectStorer, c plumbing.Hash) (statestore.Update, object.Signature, string, error) {
	u, sig, req, err := decodeRequest(objs, c)
	return u, sig, req.Base, err
}

func decodeRequest(objs storer.EncodedObjectStorer, c plumbing.Hash) (statestore.Update, object.Signature, request, error) {
	var u statestore.Update
	var req request
	commit, err := object.GetCommit(objs, c)
	if err != nil {
		return u, object.Signature{}, req, fmt.Errorf("request %s: %w", c, err)
	}
	tree, err := object.GetTree(objs, commit.TreeHash)
	if err != nil {
		return u, commit.Author, req, fmt.Errorf("request %s: %w", c, err)
	}
	e, err := tree.FindEntry("request.json")
	if err != nil {
		return u, commit.Author, req, fmt.Errorf("request %s: %w", c, err)
	}
	manifest, err := readBlob(objs, e.Hash)
	if err != nil {
		return u, commit.Author, req, fmt.Errorf("request %s: %w", c, err)
	}
	if err := json.Unmarshal(manifest, &req); err != nil {
		return u, commit.Author, req, fmt.Errorf("request %s: %w", c, err)
	}
	if req.Workload == "" {
		return u, commit.Author, req, fmt.Errorf("request %s: no workload", c)
	}
	blob := func(id string) ([]byte, error) {
		if !plumbing.IsHash(id) {
			return nil, fmt.Errorf("request %s: bad blob id %q", c, id)
		}
		return readBlob(objs, plumbing.NewHash(id))
	}
	u = statestore.Update{
		Workload:     req.Workload,
		Message:      statestore.Message{Subject: req.Subject, Body: req.Body, Trailers: req.Trailers},
		Destinations: req.Destinations,
		Adopt:        req.Adopt,
	}
	for _, m := range []struct {
		from map[string]string
		to   *map[string][]byte
	}{{req.Files, &u.Files}, {req.Shared, &u.Shared}} {
		if len(m.from) == 0 {
			continue
		}
		*m.to = make(map[string][]byte, len(m.from))
		for p, id := range m.from {
			if (*m.to)[p], err = blob(id); err != nil {
				return u, commit.Author, req, err
			}
		}
	}
	for _, a := range req.Aggregates {
		la := statestore.Aggregate{Target: a.Target}
		if a.Blob != "" {
			if la.Contribution, err = blob(a.Blob); err != nil {
				return u, commit.Author, req, err
			}
		}
		u.Aggregates = append(u.Aggregates, la)
	}
	if len(req.Record) > 0 {
		rec, err := statestore.DecodeRecord(statestore.RecordPath(req.Workload), req.Record)
		if err != nil {
			return u, commit.Author, req, fmt.Errorf("request %s: %w", c, err)
		}
		u.Record = &rec
	}
	if req.Basis != nil {
		u.Basis = &statestore.Basis{}
		if len(req.Basis.Record) > 0 && string(req.Basis.Record) != "null" {
			rec, err := statestore.DecodeRecord(statestore.RecordPath(req.Workload), req.Basis.Record)
			if err != nil {
				return u, commit.Author, req, fmt.Errorf("request %s: basis: %w", c, err)
			}
			u.Basis.Record = &rec
		}
	}
	return u, commit.Author, req, nil
}

// workloadState fingerprints what workload has in snap: its record and
// every file the record names, by blob id. Two trees with the same state
// hold the same render of the workload; a request planned on one state is
// overtaken in a tree with another.
func workloadState(snap *treeSnap, workload string) (string, error) {
	h := sha1.New()
	rec := statestore.RecordPath(workload)
	e, err := snap.entry(snap.full(rec))
	if err != nil {
		return "", err
	}
	if !isFile(e) {
		return "none", nil
	}
	fmt.Fprintf(h, "record %s\n", e.Hash)
	data, err := readBlob(snap.s, e.Hash)
	if err != nil {
		return "", err
	}
	r, err := statestore.DecodeRecord(rec, data)
	if err != nil {
		return "", err
	}
	files := append([]string(nil), r.Files...)
	sort.Strings(files)
	for _, f := range files {
		fe, err := snap.entry(snap.full(f))
		if err != nil {
			return "", err
		}
		id := "absent"
		if isFile(fe) {
			id = fe.Hash.String()
		}
		fmt.Fprintf(h, "%s %s\n", f, id)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pendingRequest is one request ref seen on the server.
type pendingRequest struct {
	ref    plumbing.ReferenceName
	commit plumbing.Hash
}

// requests lists the request refs in space that the last fetch saw, sorted
// by name so every writer folds them in the same order.
func requests(st storer.ReferenceStorer, space string) ([]pendingRequest, error) {
	iter, err := st.IterReferences()
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []pendingRequest
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference && strings.HasPrefix(ref.Name().String(), space) {
			out = append(out, pendingRequest{ref: ref.Name(), commit: ref.Hash()})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ref < out[j].ref })
	return out, err
}
