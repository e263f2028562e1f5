package gitstore

import (
	"context"

	"github.com/render-dev/render/statestore"
)

// PublishRequest publishes u as a group-commit request and stops there, as a
// writer killed right after publishing would.
func PublishRequest(ctx context.Context, s *Store, u statestore.Update) error {
	r := s.repo.server()
	if _, _, err := r.head(ctx, true); err != nil {
		return err
	}
	_, err := s.request(ctx, r, u, pendingRef(r.space, u.Workload))
	return err
}

// PendingRoot is the ref folder of group-commit requests.
const PendingRoot = pendingRoot
