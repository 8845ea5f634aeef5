//go:build race

package procs

// raceEnabled: the test binary was built with -race; the agent is built
// that way too (its packages are compiled already: only linking is left).
const raceEnabled = true
