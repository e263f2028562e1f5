package gitstore

import (
	"context"

	"github.com/go-git/go-git/v5/plumbing/protocol/packp"

	"github.com/render-dev/render/statestore"
)

// PublishRequest publishes u as a group-commit request, planned on the
// branch's newest tip, and stops there, as a writer killed right after
// publishing would.
func PublishRequest(ctx context.Context, s *Store, u statestore.Update) error {
	r := s.repo.server()
	a, err := s.readTip(ctx, true)
	if err != nil {
		return err
	}
	base, err := workloadState(a.treeSnap, u.Workload)
	if err != nil {
		return err
	}
	_, err = s.request(ctx, r, u, pendingRef(r.space, u.Workload), base)
	return err
}

// FoldPending pushes what a leader would: every request waiting folded on
// the newest tip, and the folded (or overtaken) requests deleted.
func FoldPending(ctx context.Context, s *Store) error {
	r := s.repo.server()
	a, err := s.readTip(ctx, true)
	if err != nil {
		return err
	}
	head, deletes, stale, err := s.fold(a.ov, a.treeSnap, a.tip, "", r.st, r.space)
	if err != nil {
		return err
	}
	deletes = append(deletes, stale...)
	var cmds []*packp.Command
	if head != a.tip {
		cmds = append(cmds, &packp.Command{Name: r.branch, Old: a.tip, New: head})
	}
	cmds = append(cmds, deletes...)
	if len(cmds) == 0 {
		return nil
	}
	return r.publishCommands(ctx, a.ov, cmds)
}

// PendingRoot is the ref folder of group-commit requests.
const PendingRoot = pendingRoot

// RequestRef is the ref of workload's group-commit request in s.
func RequestRef(s *Store, workload string) string {
	return string(pendingRef(s.repo.server().space, workload))
}
