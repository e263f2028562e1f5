package sim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ServersCPU is the processor time used so far by the running processes
// whose command line names a path under dir: the campaign's private
// servers (MinIO, the registry), which run apart from this process. A
// server that restarted counts only since its restart.
func ServersCPU(dir string) time.Duration {
	if dir == "" {
		return 0
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, p := range stats {
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir+"/") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// Fields after the command's name, in parentheses: utime and stime
		// are the 14th and 15th of the whole line, in clock ticks (100 a
		// second on Linux).
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+st) * 10 * time.Millisecond
	}
	return total
}
