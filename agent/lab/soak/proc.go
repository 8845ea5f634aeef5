package soak

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procResources reads pid's RSS, threads and open files from /proc (-1
// for what cannot be read; Goroutines -1).
func procResources(pid int) Resources {
	r := Resources{RSS: -1, FDs: -1, Threads: -1, Goroutines: -1}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f := strings.Fields(v)
			if len(f) == 0 {
				continue
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "VmRSS":
				r.RSS = n << 10 // kB
			case "Threads":
				r.Threads = n
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r.FDs = int64(len(ents))
	}
	return r
}
