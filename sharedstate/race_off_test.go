//go:build !race

package sharedstate

const raceEnabled = false
