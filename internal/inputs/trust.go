package inputs

import (
	"fmt"
	"path"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// checkRecordFolders refuses a destination whose folder lies inside the
// folder where another store of the same location (the same repository
// and branch, or bucket) keeps render's own files: <store path>/.render.
// That store's writes rewrite and prune its records, placement index and
// claims there, so the destination's files would overwrite them, and the
// next render of that store would delete the destination's files (or
// take them for records). A store whose own path lies in another's
// .render has every destination there, so it is refused the same way.
// (A destination inside its own store's .render is refused where its
// spec.path is read.)
func (p *Platform) checkRecordFolders() error {
	type placed struct {
		d              renderer.Destination
		loc, prefix    string
		folder, render string
	}
	var all []placed
	for _, d := range p.Destinations {
		if p.Store(d.Store) == nil {
			continue // refused by validate
		}
		loc, prefix := p.location(d.Store)
		all = append(all, placed{d: d, loc: loc, prefix: prefix, folder: path.Join(prefix, d.Path), render: path.Join(prefix, layout.MetaDir)})
	}
	for _, a := range all {
		for _, b := range all {
			if a.loc != b.loc || a.d.Store == b.d.Store || !inside(a.folder, b.render) {
				continue
			}
			return &renderer.InputError{File: p.destFile[a.d.Name], Where: "Destination " + a.d.Name, Msg: fmt.Sprintf(
				"spec.path %q puts it in folder %q of %s, inside %q, where %s (the store of Destination %s) keeps render's records: each store's writes would overwrite and delete the other's files; both stores are %s: move the destination out of %q (its spec.path, or the spec.path of %s)",
				a.d.Path, a.folder, a.d.Store, b.render, b.d.Store, b.d.Name, a.loc, b.render, a.d.Store)}
		}
	}
	return nil
}

// inside says whether slash path p is dir or lies below it.
func inside(p, dir string) bool {
	return p == dir || len(p) > len(dir) && p[:len(dir)+1] == dir+"/"
}
