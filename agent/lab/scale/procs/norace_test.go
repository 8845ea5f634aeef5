//go:build !race

package procs

// raceEnabled: the test binary was built with -race (see race_test.go).
const raceEnabled = false
