package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/render-dev/render/internal/testinfra/chaos"
)

// When updates land. A writer's update lands at its store's commit point,
// which the requests show: a git push that moves the branch (the writer's
// own, or another writer's that carries its request), the PUT of an S3
// record, the PUT of an OCI store's state manifest.

const branchRef = plumbing.ReferenceName("refs/heads/main")

// commits reports whether r is a request at the store's commit point: one
// that may land a writer's update.
func commits(kind chaos.Kind, r *Request) bool {
	switch kind {
	case chaos.GitHTTP, chaos.GitSSH:
		if r.Push == nil {
			return strings.Contains(r.What, "receive-pack")
		}
		for _, c := range r.Push.Commands {
			if c.Name == branchRef || strings.HasPrefix(c.Name.String(), "refs/render/pending/") && !c.New.IsZero() {
				return true
			}
		}
		return false
	case chaos.S3:
		return strings.HasPrefix(r.What, "PUT ") && strings.Contains(r.What, "/.render/workloads/")
	case chaos.OCI:
		return strings.HasPrefix(r.What, "PUT ") && strings.HasSuffix(r.What, "/manifests/render-state")
	}
	return false
}

// mayHaveLanded reports whether r may have landed its writer's update: a
// commit-point request that succeeded, or whose answer the writer never
// got. A git request published (a group-commit request answered by the
// server) does not count: a writer that gives up withdraws it, and reports
// whether it was folded meanwhile, which is what the checker holds it to.
func mayHaveLanded(kind chaos.Kind, r *Request) bool {
	if !commits(kind, r) || !r.Sent {
		return false
	}
	if r.Unknown() {
		return true
	}
	switch kind {
	case chaos.GitHTTP, chaos.GitSSH:
		return r.Push != nil && r.Push.OK[branchRef]
	}
	return r.Delivered && r.Status >= 200 && r.Status < 300
}

// landings sets, for every writer whose update landed, when it landed:
// its own commit, or (git) the push of another writer that carried its
// request.
func landings(kind chaos.Kind, runs []*writerRun) {
	// Git requests: which writer published each request commit, and when
	// a push that moved the branch deleted it.
	owner := map[plumbing.Hash]*writerRun{}
	last := map[*writerRun]plumbing.Hash{}
	type carried struct {
		at time.Duration
		by *writerRun
	}
	deleted := map[plumbing.Hash]carried{}
	for _, r := range runs {
		if r.link == nil {
			continue
		}
		for _, q := range r.link.Requests() {
			if q.Push == nil {
				continue
			}
			for _, c := range q.Push.Commands {
				if !strings.HasPrefix(c.Name.String(), "refs/render/pending/") {
					continue
				}
				if !c.New.IsZero() && q.Push.OK[c.Name] {
					owner[c.New], last[r] = r, c.New
				}
				if c.New.IsZero() && q.Push.OK[c.Name] && q.Push.OK[branchRef] {
					if _, ok := deleted[c.Old]; !ok {
						deleted[c.Old] = carried{q.At, r}
					}
				}
			}
		}
	}
	for _, r := range runs {
		if r.link == nil || r.Outcome != chaos.Landed || r.Kind == chaos.Drain {
			continue
		}
		for _, q := range r.link.Requests() {
			if commits(kind, q) && q.Sent && !q.Unknown() && mayHaveLanded(kind, q) {
				r.landed, r.hasLanded = q.At, true
			}
		}
		if h, ok := last[r]; ok {
			if c, ok := deleted[h]; ok && c.by != r && (!r.hasLanded || c.at > r.landed) {
				r.landed, r.hasLanded = c.at, true
			}
		}
	}
}

// slowReturns checks that no writer waited more than bound after its
// update landed, unless a fault met one of its requests since, or one that
// met a request before still held it then (a stall, a pause, a lost
// answer: the wait is the fault's).
func slowReturns(runs []*writerRun, bound time.Duration) []string {
	var out []string
	for _, r := range runs {
		if !r.hasLanded || r.writer < 0 {
			continue
		}
		wait := r.End - r.landed
		if wait <= bound {
			continue
		}
		faulted := false
		for _, q := range r.link.Requests() {
			if !q.Fault.Zero() && (q.At >= r.landed || q.End > r.landed) {
				faulted = true
			}
		}
		if !faulted {
			out = append(out, fmt.Sprintf("bound: %s returned %v after its update landed (at %v), with no fault since; the bound is %v",
				r.Label, wait.Round(time.Millisecond), r.landed.Round(time.Millisecond), bound))
		}
	}
	return out
}
