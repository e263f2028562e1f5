package bookkeeping

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// A claim is how one workload holds a Kubernetes object in a section of a
// destination: a small file at ClaimPath, named by the object's place and
// identity, that the workload owns like any of its files. Two workloads that
// write the same object to the same section want the same claim path, so
// the ordinary ownership rule of planner.PlanUpdate refuses the second, on whatever
// snapshot the update is finally planned (a git re-plan after a lost race, a
// folded request, an S3 re-listing). A claim also names its workload in its
// content, so a claim uploaded by a writer that has not committed its record
// yet (S3) still refuses everyone else.

// ClaimsDir holds every claim.
var ClaimsDir = path.Join(layout.MetaDir, "objects")

// claim is a claim file's content.
type claim struct {
	Workload string            `json:"workload"`
	Object   statestore.Object `json:"object"`
}

// ClaimPath is where the claim on o (in o.Destination's o.Section) lives.
// The store o.Store names does not count: every claim of one snapshot is in
// one store.
func ClaimPath(o statestore.Object) string {
	sum := sha256.Sum256([]byte(o.Destination + "\x00" + o.Section + "\x00" + o.Identity()))
	h := hex.EncodeToString(sum[:])
	return path.Join(ClaimsDir, h[:2], h[2:]+".json")
}

func encodeClaim(workload string, o statestore.Object) []byte {
	b, err := json.MarshalIndent(claim{Workload: workload, Object: o}, "", "  ")
	if err != nil {
		panic(err) // only strings: cannot fail
	}
	return append(b, '\n')
}

// Claims returns the claim files an update's record asks for. Two objects
// of the workload with one identity in one section (Flux would refuse that
// build anyway) share a claim, the first one's.
func Claims(u statestore.Update) map[string][]byte {
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

// CheckClaim refuses a claim p (which the workload does not own) that
// exists in snap for another workload.
func CheckClaim(snap statestore.Snapshot, p, workload string, mine statestore.Object, owners func() (map[string]string, error)) error {
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
			return &statestore.OwnedError{Owner: o, Object: &mine}
		}
		return nil
	}
	if c.Workload == workload {
		return nil
	}
	return &statestore.OwnedError{Owner: c.Workload, Object: &mine, OwnerObject: &c.Object}
}
