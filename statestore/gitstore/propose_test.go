package gitstore

import (
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

func TestProposalBranch(t *testing.T) {
	for key, want := range map[string]string{
		"resource/team-a/postgres/orders/configure": "render/resource/team-a/postgres/orders/configure",
		"promise/postgres/install":                  "render/promise/postgres/install",
		"promise/postgres/.static-dependencies":     "render/promise/postgres/_static-dependencies",
		"resource/ns/p/a..b/x.lock":                 "render/resource/ns/p/a__b/x_lock",
		"resource/ns/p/we ird~^:?*[\\/pipe.":        "render/resource/ns/p/we_ird_______/pipe_",
		"resource/ns/p/@{x}/pipe":                   "render/resource/ns/p/__x_/pipe",
	} {
		got := ProposalBranch(key)
		if got != want {
			t.Errorf("ProposalBranch(%q) = %q, want %q", key, got, want)
		}
		if err := plumbing.NewBranchReferenceName(got).Validate(); err != nil {
			t.Errorf("ProposalBranch(%q) = %q, which git refuses: %v", key, got, err)
		}
	}
}
