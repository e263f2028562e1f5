package statestore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"

	"github.com/render-dev/render/internal/layout"
)

// A claim is how one workload holds a Kubernetes object in a section of a
// destination: a small file at ClaimPath, named by the object's place and
// identity, that the workload owns like any of its files. Two workloads that
// write the same object to the same section want the same claim path, so
// the ordinary ownership rule of PlanUpdate refuses the second, on whatever
// snapshot the update is finally planned (a git re-plan after a lost race, a
// folded request, an S3 re-listing). A claim also names its workload in its
// content, so a claim uploaded by a writer that has not committed its record
// yet (S3) still refuses everyone else.

// ClaimsDir holds every claim.
var ClaimsDir = path.Join(layout.MetaDir, "objects")

// claim is a claim file's content.
type claim struct {
	Workload string `json:"workload"`
	Object   Object `json:"object"`
}

// ClaimPath is where the claim on o (in o.Destination's o.Section) lives.
// The store o.Store names does not count: every claim of one snapshot is in
// one store.
func ClaimPath(o Object) string {
	sum := sha256.Sum256([]byte(o.Destination + "\x00" + o.Section + "\x00" + o.Identity()))
	h := hex.EncodeToString(sum[:])
	return path.Join(ClaimsDir, h[:2], h[2:]+".json")
}

func encodeClaim(workload string, o Object) []byte {
	b, err := json.MarshalIndent(claim{Workload: workload, Object: o}, "", "  ")
	if err != nil {
		panic(err) // only strings: cannot fail
	}
	return append(b, '\n')
}

// claims returns the claim files an update's record asks for. Two objects
// of the workload with one identity in one section (Flux would refuse that
// build anyway) share a claim, the first one's.
func claims(u Update) map[string][]byte {
	if u.Record == nil || len(u.Record.Objects) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(u.Record.Objects))
	for _, o := range u.Record.Objects {
		p := ClaimPath(o)
		if _, ok := out[p]; !ok {
			out[p] = encodeClaim(u.Workload, o)
		}
	}
	return out
}

// OwnedError says an update wants what another workload already has: a
// path its record owns, or a Kubernetes object it writes to the same
// section of the same destination (Flux builds a section as one
// kustomization, so the duplicate would break it for every workload
// there). It wraps ErrConflict, but it is not a race: retrying cannot help,
// and the CLI reports it as bad input.
type OwnedError struct {
	// Owner is the other workload's key.
	Owner string
	// Path is the path in dispute, for a path another workload owns.
	Path string
	// Object is this workload's object, and OwnerObject the other
	// workload's, for a duplicate object (nil otherwise).
	Object, OwnerObject *Object
}

func (e *OwnedError) Error() string {
	if e.Object == nil {
		return fmt.Sprintf("%v: %s belongs to workload %s", ErrConflict, e.Path, e.Owner)
	}
	o := e.Object
	where := path.Join(o.Destination, sectionDir(o.Section))
	msg := fmt.Sprintf("%v: %s (from %s) is already written by workload %s", ErrConflict, o, objectFile(*o), e.Owner)
	if e.OwnerObject != nil {
		msg += fmt.Sprintf(" (from %s)", objectFile(*e.OwnerObject))
	}
	return msg + fmt.Sprintf(" to %s; Flux builds them together, so its build would fail for every workload there", where)
}

func (e *OwnedError) Unwrap() error { return ErrConflict }

func sectionDir(section string) string {
	if section == "" || section == "." {
		return "."
	}
	return section
}

func objectFile(o Object) string {
	f := path.Join(o.Destination, o.File)
	if o.Source != "" && o.Source != f {
		return o.Source + ", at " + f
	}
	return f
}

// checkClaim refuses a claim p (which the workload does not own) that
// exists in snap for another workload.
func checkClaim(snap Snapshot, p, workload string, mine Object, owners func() (map[string]string, error)) error {
	data, err := snap.ReadFile(p)
	if err != nil {
		return err
	}
	var c claim
	if err := json.Unmarshal(data, &c); err != nil || c.Workload == "" {
		// Not readable as a claim: whoever owns the path owns the object.
		idx, err := owners()
		if err != nil {
			return err
		}
		if o, ok := idx[p]; ok && o != workload {
			return &OwnedError{Owner: o, Object: &mine}
		}
		return nil
	}
	if c.Workload == workload {
		return nil
	}
	return &OwnedError{Owner: c.Workload, Object: &mine, OwnerObject: &c.Object}
}
