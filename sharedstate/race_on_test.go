//go:build race

package sharedstate

// raceEnabled: the race detector slows the single-goroutine fleet
// simulations tenfold without finding anything in them, so the long ones
// run shorter under -race.
const raceEnabled = true
