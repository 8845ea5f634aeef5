package sharedstate

import (
	"sync/atomic"
	"time"
)

// Clock tells the engine the time. Everything in this package that decides by
// time (window buckets, staleness, open durations, probe rounds, override
// expiry) reads it through a Clock, so tests move time instead of sleeping.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// MonotonicClock is a Clock that also reads a monotonic time, which wall
// clock steps (NTP corrections, an operator's date command, a VM resumed)
// do not move. An Engine given one runs on "start wall time + monotonic
// time elapsed", so a step changes none of its decisions.
type MonotonicClock interface {
	Clock
	// Monotonic is the time elapsed since an arbitrary fixed origin; it
	// never steps.
	Monotonic() time.Duration
}

// SystemClock is the real clock (time.Now), with Go's monotonic reading.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

var processStart = time.Now()

// Monotonic returns the monotonic time since the process started.
func (SystemClock) Monotonic() time.Duration { return time.Since(processStart) }

// ManualClock is a Clock that moves only when told to. It exists for tests, in
// this package and in others (agent, clientlib, coordinator), and is safe for
// concurrent use. The zero value reads as the Unix epoch.
//
// Reading a ManualClock costs a single atomic load, so an Engine driven by one
// attributes every recorded outcome to the exact current time; see
// EngineConfig.Clock.
type ManualClock struct {
	ns   atomic.Int64
	mono atomic.Int64 // monotonic reading, ns: moved by Advance and Set, not by Step
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	c := &ManualClock{}
	c.ns.Store(start.UnixNano())
	return c
}

// Monotonic returns the clock's monotonic reading: the sum of every Advance
// and Set, without the wall-clock Steps.
func (c *ManualClock) Monotonic() time.Duration { return time.Duration(c.mono.Load()) }

// Step moves the wall time by d without moving the monotonic reading, like
// an operator or NTP setting the system clock. An Engine on this clock does
// not see it.
func (c *ManualClock) Step(d time.Duration) { c.ns.Add(int64(d)) }

// Now returns the clock's current time, in UTC and without a monotonic reading.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock forward by d (backwards if d is negative) and returns
// the new time.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mono.Add(int64(d))
	return time.Unix(0, c.ns.Add(int64(d))).UTC()
}

// Set makes the clock read t, moving the monotonic reading by as much (time
// passed, not a step; see Step).
func (c *ManualClock) Set(t time.Time) {
	old := c.ns.Swap(t.UnixNano())
	c.mono.Add(t.UnixNano() - old)
}

// Rand is the engine's source of randomness. *rand.Rand from math/rand/v2
// satisfies it. It need not be safe for concurrent use: the engine serialises
// its calls. The engine uses it only to spread heartbeats of different
// dependencies over time, never for a decision, so decisions stay
// deterministic given the clock and the inputs.
type Rand interface {
	Uint64() uint64
}

// splitmix is the default Rand, seeded from the node name so that an engine
// built without a Rand is still deterministic.
type splitmix struct{ s uint64 }

func (r *splitmix) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// mix64 is the splitmix64 finaliser: a cheap bijective scrambler.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
