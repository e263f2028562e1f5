package s3store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
)

// A bucket's keys are flat: a key and keys below it ("dev/pg" and
// "dev/pg/p/cm.yaml") are different objects, and S3 holds both. Readers
// do not: Flux's Bucket source and every tool that copies a bucket to a
// file system need a path to be a file or a folder, and MinIO, which keeps
// objects as files, takes the PUT of either and then hides the lower keys
// from every listing but one of their own folder. So a write refuses to
// add a file where keys lie below it, or below a key, with a
// *statestore.BlockedError, before it writes anything (refuseBlocked).
//
// What the write's listings showed answers most of it: the delimited
// listing of a file's folder, from the file's name on, shows the file's
// name as a sub-folder when keys lie below it, and a folder that holds
// objects already took the write's files before (on MinIO a listing of a
// folder that is a key shows nothing). Only a file in a folder the
// listings showed empty costs requests: one delimited listing of the
// folder above a level, from the level's name on, says whether the level
// is a key and whether keys lie below it (and, when a name follows, that
// the folder above holds objects). The folders that hold objects are the
// upper levels of the file's path, and nothing lies below a new one, so
// what is left to find is the first new level, which must not be a key:
// the write looks at the lowest level left first (a new workload's
// folders are at the bottom), then bisects, the levels of all its new
// folders side by side, a round of listings at a time. Above a folder
// that holds objects nothing is looked at: what stands there stood before
// this write, which adds nothing to it.

// shape says what the listings showed of path p: whether p is a key
// (file) and whether keys lie below p/ (dir), each with whether a listing
// covered it.
func (sn *snapshot) shape(p string) (fileKnown, file, dirKnown, dir bool) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.empty {
		return true, false, true, false
	}
	if fileKnown = sn.covered(p); fileKnown {
		_, file, _ = sn.obj(p)
	}
	if sn.hasFolder(p) {
		return fileKnown, file, true, true
	}
	if sn.deepCovered(p) {
		return fileKnown, file, true, false
	}
	parent, name := folder(p)
	if sn.subSpansHold(parent, name+"/") {
		return fileKnown, file, true, false
	}
	return fileKnown, file, false, false
}

// needShapes lists what shape does not know yet of each of paths: their
// folders side by side, each from its first such name on (see lookNames).
func (sn *snapshot) needShapes(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	byDir := map[string][]string{}
	for _, p := range paths {
		if fk, _, dk, _ := sn.shape(p); !fk || !dk {
			dir, name := folder(p)
			byDir[dir] = append(byDir[dir], name)
		}
	}
	jobs := make([]func(context.Context) error, 0, len(byDir))
	for dir, names := range byDir {
		jobs = append(jobs, func(ctx context.Context) error { return sn.lookNames(ctx, dir, names) })
	}
	if err := parallel(sn.ctx, sn.s.cfg.Concurrency, jobs); err != nil {
		return err
	}
	for _, p := range paths {
		if fk, _, dk, _ := sn.shape(p); !fk || !dk {
			return fmt.Errorf("the listings of %s did not show whether it is a file or a folder", p)
		}
	}
	return nil
}

// lookNames lists folder dir, delimited, from just before the first of
// names on, until it has shown each name both as a file and as a
// sub-folder (its name and a slash), or the folder's end: one short page
// per name that a page before did not reach.
func (sn *snapshot) lookNames(ctx context.Context, dir string, names []string) error {
	sort.Strings(names)
	pre := sn.folderPrefix(dir)
	after := strings.TrimPrefix(before(pre, names[0]), pre)
	fetchOwner := false
	for len(names) > 0 {
		page := min(listPage, sparse*len(names)+skipPage)
		var found map[string]object
		var subs map[string]bool
		var greatest string
		toEnd := true
		err := sn.s.retry(ctx, func() error {
			found, subs, greatest, toEnd = map[string]object{}, map[string]bool{}, after, true
			opts := minio.ListObjectsOptions{Prefix: pre, StartAfter: pre + after, MaxKeys: page, FetchOwner: &fetchOwner}
			if after == "" {
				opts.StartAfter = ""
			}
			n := 0
			for o := range sn.s.client.ListObjectsIter(ctx, sn.s.cfg.Bucket, opts) {
				if o.Err != nil {
					return o.Err
				}
				name := strings.TrimPrefix(o.Key, pre)
				greatest = max(greatest, name)
				if strings.HasSuffix(name, "/") {
					subs[name] = true
				} else if name != "" {
					found[name] = object{etag: trimETag(o.ETag), size: o.Size}
				}
				if n++; n == page {
					// A page's end: the page holds every name up to the
					// greatest it showed.
					toEnd = false
					break
				}
			}
			return ctx.Err() // a listing that stopped early proves nothing
		})
		if err != nil {
			return err
		}
		sp := span{after: after, last: greatest, toEnd: toEnd}
		sn.addSpan(dir, found, sp)
		sn.addSubs(dir, subs, sp)
		if toEnd {
			return nil
		}
		for len(names) > 0 && names[0]+"/" <= greatest {
			names = names[1:]
		}
		if len(names) > 0 {
			after = max(greatest, strings.TrimPrefix(before(pre, names[0]), pre))
		}
	}
	return nil
}

// refuseBlocked returns a *statestore.BlockedError when plan adds a file
// that the bucket's keys leave no room for (see the top of this file): a
// key at one of the file's folders, or keys below the file's path, that
// the plan does not itself delete (a workload's own file that becomes a
// folder, and back). It looks only at the files the plan adds: a file
// that exists is a key already.
func (w *write) refuseBlocked(plan planner.Plan) error {
	if w.snap.empty {
		return nil
	}
	bc := &blockCheck{w: w, sn: w.snap, writes: map[string]bool{}, gone: map[string]bool{}}
	for _, op := range plan.Ops {
		if op.Delete {
			bc.gone[op.Path] = true
		} else {
			bc.writes[op.Path] = true
		}
	}
	if err := bc.findAdded(); err != nil || len(bc.added) == 0 {
		return err
	}
	if err := bc.startSearches(); err != nil {
		return err
	}
	if err := bc.searchFolders(); err != nil {
		return err
	}
	return bc.refuseBelow()
}

// blockCheck is the state of refuseBlocked: the paths the plan writes
// and deletes, the files it adds, and one search per folder of an added
// file.
type blockCheck struct {
	w            *write
	sn           *snapshot
	writes, gone map[string]bool
	added        []string // sorted
	searches     []*folderSearch
	byFolder     map[string]*folderSearch
}

// folderSearch is the search of one folder of an added file, over the
// folders from the store's root down to it: where the keys that exist
// end.
type folderSearch struct {
	path   string   // the first file added in the folder, for the error
	levels []string // the folder and the folders above it, top down
	done   bool
	// exists: the folder holds objects already, so keys may lie
	// below the files added in it.
	exists bool
	tried  bool // the lowest level left was looked at
}

// findAdded finds the files the plan adds: those it writes that the
// listings do not show.
func (bc *blockCheck) findAdded() error {
	for p := range bc.writes {
		if _, ok, err := bc.sn.lookup(p); err != nil {
			return err
		} else if !ok {
			bc.added = append(bc.added, p)
		}
	}
	sort.Strings(bc.added)
	return nil
}

// startSearches starts one search per folder of an added file. A plan
// that writes a file at one of the folders of another is refused here,
// with nothing looked at.
func (bc *blockCheck) startSearches() error {
	bc.byFolder = map[string]*folderSearch{}
	for _, p := range bc.added {
		f := parentDir(p)
		if bc.byFolder[f] != nil {
			continue
		}
		sr := &folderSearch{path: p}
		for i := 0; f != "" && i <= len(f); i++ {
			if i == len(f) || f[i] == '/' {
				sr.levels = append(sr.levels, f[:i])
			}
		}
		for _, l := range sr.levels {
			if bc.writes[l] {
				// The update wants a file and a file below it.
				return &statestore.BlockedError{Path: p, Blocker: l, File: l, Owner: bc.w.u.Workload}
			}
		}
		bc.byFolder[f] = sr
		bc.searches = append(bc.searches, sr)
	}
	return nil
}

// searchFolders runs the searches, a round of listings at a time (one
// listing per search that is not done), until every search is done. A
// level that is a key the plan does not delete refuses the write.
func (bc *blockCheck) searchFolders() error {
	// Each round makes at least one more level known to every search
	// that is not done, so none takes more rounds than its levels and two.
	rounds := 2
	for _, sr := range bc.searches {
		rounds = max(rounds, len(sr.levels)+2)
	}
	for round := 0; ; round++ {
		if round > rounds {
			return fmt.Errorf("the folders of %s: still not known after %d rounds of listings", bc.searches[0].path, round)
		}
		var need []string
		for _, sr := range bc.searches {
			if sr.done {
				continue
			}
			l, err := bc.nextLevel(sr)
			if err != nil {
				return err
			}
			if !sr.done {
				need = append(need, l)
			}
		}
		if len(need) == 0 {
			return nil
		}
		if err := bc.sn.needShapes(need); err != nil {
			return err
		}
	}
}

// nextLevel takes sr one step further on what the listings showed so far:
// it returns the level to look at next, or marks sr done. A level that is
// a key the plan does not delete refuses the write.
func (bc *blockCheck) nextLevel(sr *folderSearch) (string, error) {
	sn := bc.sn
	// Existing folders are a prefix of the levels (every key
	// below a folder is below the folders above it): look for
	// the first new one, which must not be a key, by bisecting
	// what the listings did not show yet. empty is the first
	// level known to hold nothing (len: none), fileKnown whether
	// a listing showed if it is a key.
	exist, empty, fileKnown := -1, len(sr.levels), false
	for i, l := range sr.levels {
		fk, file, dk, dir := sn.shape(l)
		if fk && file && !bc.gone[l] {
			return "", bc.w.blocked(&statestore.BlockedError{Path: sr.path, Blocker: l, File: l})
		}
		if dk && dir {
			exist = i
		}
	}
	for i := exist + 1; i < len(sr.levels); i++ {
		if fk, _, dk, dir := sn.shape(sr.levels[i]); dk && !dir {
			empty, fileKnown = i, fk
			break
		}
	}
	switch {
	case exist == len(sr.levels)-1:
		sr.done, sr.exists = true, true
		return "", nil
	case empty == exist+1 && fileKnown:
		sr.done = true // the first new folder, and no key
		return "", nil
	case empty == exist+1:
		return sr.levels[empty], nil
	case !sr.tried && exist >= 0:
		// Below a folder known to hold objects, first the lowest
		// level left: new folders are mostly a workload's own,
		// at the bottom, and the listing that looks at a level
		// shows the folder above it holding objects, unless no
		// name follows the level's there. (Where no level is
		// known to hold objects, as in a new bucket, the
		// bisection starts from the top.)
		sr.tried = true
		if empty < len(sr.levels) && !fileKnown {
			return sr.levels[empty], nil
		}
		return sr.levels[empty-1], nil
	default:
		return sr.levels[(exist+empty)/2], nil
	}
}

// refuseBelow refuses an added file with keys below its path that the
// plan does not delete. Keys below an added file can only lie in a folder
// that holds objects already: only there is it looked at.
func (bc *blockCheck) refuseBelow() error {
	sn := bc.sn
	var below []string
	for _, p := range bc.added {
		if bc.byFolder[parentDir(p)].exists {
			below = append(below, p)
		}
	}
	if err := sn.needShapes(below); err != nil {
		return err
	}
	for _, p := range below {
		if _, _, _, dir := sn.shape(p); !dir {
			continue
		}
		files, err := sn.List(p)
		if err != nil {
			return err
		}
		for _, f := range files {
			if !bc.gone[f] {
				return bc.w.blocked(&statestore.BlockedError{Path: p, Blocker: p, Folder: true, File: f})
			}
		}
	}
	return nil
}

// blocked names the owner of what is in the way, from every record (a
// refused write reads them all, as the planner does).
func (w *write) blocked(e *statestore.BlockedError) error {
	recs, err := statestore.ReadRecords(w.snap)
	if err != nil {
		return err
	}
	for _, r := range recs {
		for _, f := range r.Files {
			if f == e.File {
				e.Owner = r.Workload
			}
		}
	}
	return e
}

// parentDir is p's folder, "" at the store's root.
func parentDir(p string) string {
	d, _ := folder(p)
	return d
}
