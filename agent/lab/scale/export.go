package scale

import "time"

// Machine describes the CPU the run is on (model and count), as the
// table's first line says it; LoadAvg is /proc/loadavg's three averages.
// scale-procs (package procs) prints the same line.
func Machine() string { return machine() }

// LoadAvg returns the 1, 5 and 15 minute load averages ("unknown" when
// /proc/loadavg cannot be read).
func LoadAvg() string { return loadavg() }

// Percentile returns the p-th percentile (0 < p ≤ 1, nearest rank) of d,
// as the table's trip columns compute it; 0 for an empty sample.
func Percentile(d []time.Duration, p float64) time.Duration { return percentile(d, p) }
