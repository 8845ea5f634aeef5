//go:build unix

package clientlib

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user + system) the test process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-ns/op metric to b: the process's CPU time per
// operation, all threads. Unlike ns/op it does not count the time the
// process waited for a CPU, so it stays meaningful on an oversubscribed
// machine (for RunParallel it sums the work of every thread).
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
