//go:build !unix

package sim

import "time"

// CPUTime is not measured here.
func CPUTime() time.Duration { return 0 }
