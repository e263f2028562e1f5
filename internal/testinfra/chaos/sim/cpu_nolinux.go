//go:build !linux

package sim

import "time"

// ServersCPU is not measured here.
func ServersCPU(dir string) time.Duration { return 0 }
