package statestore

// Snapshot is one consistent view of a store's files, as a backend provides
// it to the planner. Paths are relative to the store's path.
type Snapshot interface {
	// Compare reports whether p exists and whether its content equals data.
	// Backends answer from hashes they already have (git blob ids, S3 ETags)
	// without reading the content.
	Compare(p string, data []byte) (exists, equal bool, err error)
	// ReadFile returns p's content, or an error wrapping ErrNotFound.
	ReadFile(p string) ([]byte, error)
	// List returns every file below dir, recursively, sorted.
	List(dir string) ([]string, error)
	// Capabilities declares what the snapshot does beyond these
	// lookups: whether it reads lazily, whether it logs, what it can
	// tell of the store's bookkeeping without the generic lookups.
	Capabilities() SnapshotCapabilities
}

// SnapshotCapabilities is what a snapshot does beyond its lookups,
// declared, not discovered: a caller reads them from
// Snapshot.Capabilities, never by asserting the snapshot's type, and
// calls no step that is nil. The zero value is a snapshot that holds
// what it shows (nothing to fetch ahead) and logs nothing.
type SnapshotCapabilities struct {
	// Prefetch, set by a snapshot that reads lazily (a partial git
	// clone, a bucket listed folder by folder, an OCI state's layers),
	// is told, before a series of lookups, what they will look at, so
	// that it can fetch what lies on their way in a few requests
	// instead of one per folder. It is a hint: lookups work without it.
	// Callers go through the package's Prefetch.
	Prefetch func(h Hint) error
	// Debug, set by a snapshot that can log at debug level, logs msg
	// naming its store (each backend's snapshot, when its store was
	// given a debug log).
	Debug func(msg string, args ...any)
	// TreeShaped is set by a snapshot whose paths form a tree, as a file
	// system's do (git, an OCI layer, the memory store): a path is a
	// file, a folder or nothing, so a file cannot be written where a
	// folder is, nor below a file. The planner then checks every path a
	// plan adds (see BlockedError). A flat store's (S3's) keys are not
	// checked by the planner: its backend refuses such a write itself.
	TreeShaped bool
	// Indexed, set by a snapshot that can tell whether its store has the
	// placement index by other means than the index marker (an S3
	// snapshot: it tells a bucket that holds no record yet, which has
	// nothing to migrate, from one whose records predate the index,
	// without reading every record), reports whether the store has it.
	// Callers go through bookkeeping.Indexed, which looks the marker up
	// itself when Indexed is nil.
	Indexed func() (bool, error)
	// SummaryLoad, set by a snapshot of a store that keeps a load summary
	// (a git tree's counts, an S3 bucket's ledgers: see
	// statestore/bookkeeping/load.go), returns the resource entries of
	// the placement index (.render/placed/<destination>/resource/<flavour
	// folder>/) by destination and flavour folder, for those of dests
	// it can vouch for (a destination it returns no counts for holds
	// none), and rest, the destinations it cannot answer for. Callers go
	// through bookkeeping.ReadLoad, which lists the entries of rest
	// itself, and those of every destination when SummaryLoad is nil.
	SummaryLoad func(dests []string) (counts map[string]map[string]int, rest []string, err error)
}

// Prefetch passes h to snap when snap reads lazily (it declares a
// Prefetch) and h names something. Every prefetch goes through here. A
// failed prefetch does not fail the caller: the lookups that follow read
// what they need one path at a time and report their own failures. It is
// not silent either: a snapshot that declares a Debug logs it, saying
// what the lookups fall back to.
func Prefetch(snap Snapshot, h Hint) {
	c := snap.Capabilities()
	if c.Prefetch == nil || len(h.Paths)+len(h.Reads)+len(h.Dirs)+len(h.Load) == 0 {
		return
	}
	if err := c.Prefetch(h); err != nil && c.Debug != nil {
		c.Debug("prefetch failed: the lookups read one path at a time instead",
			"paths", len(h.Paths), "reads", len(h.Reads), "folders", len(h.Dirs), "load", len(h.Load), "error", err.Error())
	}
}

// Hint is what a series of lookups will look at.
type Hint struct {
	// Paths will be compared (Compare): the folders on their way are needed.
	Paths []string
	// Reads will be read (ReadFile): their content too.
	Reads []string
	// Dirs will be listed (List), recursively.
	Dirs []string
	// Load names destinations whose load will be read (bookkeeping.ReadLoad): each
	// backend fetches what its way of counting needs.
	Load []string
}

// Merge adds o's paths to h.
func (h Hint) Merge(o Hint) Hint {
	h.Paths = append(h.Paths, o.Paths...)
	h.Reads = append(h.Reads, o.Reads...)
	h.Dirs = append(h.Dirs, o.Dirs...)
	h.Load = append(h.Load, o.Load...)
	return h
}
