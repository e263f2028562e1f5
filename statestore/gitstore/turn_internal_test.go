package gitstore

import (
	"testing"
	"time"
)

// TestTurnTime: a waiter's turn follows what the leader's push carries (a
// hook run per ref on a server such as Gitea), is at least a second and at
// most the retry budget (which every answered poll moves on).
func TestTurnTime(t *testing.T) {
	for _, c := range []struct {
		slowest time.Duration
		waiting int
		budget  time.Duration
		want    time.Duration
	}{
		{10 * time.Millisecond, 0, 2 * time.Minute, time.Second},               // quiet server: the floor
		{time.Second, 0, 2 * time.Minute, 3 * time.Second},                     // three pushes of its own
		{time.Second, 15, 2 * time.Minute, 18 * time.Second},                   // a leader carrying 15 requests: 6 pushes' worth, 3 times
		{2 * time.Minute, 15, 10 * time.Minute, 10 * time.Minute},              // loaded server: capped at the budget
		{75 * time.Second, 63, 2 * time.Minute, 2 * time.Minute},               // 64 at once on Gitea: a leader's push of 63 refs took 3m24s
		{500 * time.Millisecond, 6, 90 * time.Second, 4500 * time.Millisecond}, // the campaign's clean renders
	} {
		if got := turnTime(c.slowest, c.waiting, c.budget); got != c.want {
			t.Errorf("turnTime(%v, %d, %v) = %v, want %v", c.slowest, c.waiting, c.budget, got, c.want)
		}
	}
}
