package sim

import (
	"strings"
	"testing"
	"time"
)

// The landed bound excuses a writer held past it by a fault, also by one
// that met a request before the update landed and still held the writer
// after: s3 seed 1050 of the long campaign (48 writers) failed about one
// run in four with "writer 13 returned 1m12s after its update landed,
// with no fault since", the very end of an 84 s pause its parallel read
// met 12 s before the landing. A writer held that long by nothing still
// breaks the bound.
func TestSlowReturns(t *testing.T) {
	s := time.Second
	run := func(reqs ...*Request) *writerRun {
		r := newRun("writer 13", "k", "configure", 0, nil, 0, 2*time.Minute)
		r.writer, r.landed, r.hasLanded, r.End = 13, 146*s, true, 218*s
		r.link = &Link{log: reqs}
		return r
	}
	commit := &Request{N: 3, What: "PUT /b/clusters/.render/workloads/x.json", At: 146 * s, End: 146 * s}
	paused := &Request{N: 2, What: "GET /b/", At: 134 * s, End: 218 * s, Fault: Fault{Pause: 84 * s}}
	if v := slowReturns([]*writerRun{run(paused, commit)}, 5*s); len(v) != 0 {
		t.Fatalf("held by a pause until it returned: %v", v)
	}
	quick := &Request{N: 2, What: "GET /b/", At: 134 * s, End: 135 * s, Fault: Fault{Pause: s}}
	v := slowReturns([]*writerRun{run(quick, commit)}, 5*s)
	if len(v) != 1 || !strings.Contains(v[0], "writer 13 returned 1m12s after its update landed") {
		t.Fatalf("held by nothing for 72 s: %v", v)
	}
}
