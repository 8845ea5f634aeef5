package sharedstate

import "time"

// Snapshot is an immutable view of one dependency as one node sees it: what
// clientlib needs to decide a first attempt without asking the agent. The
// engine publishes a new *Snapshot whenever any field changes (and calls
// EngineConfig.OnChange); never modify one. A Snapshot has only exported
// fields, so one rebuilt from the wire (protocol conversions) decides exactly
// as the original.
type Snapshot struct {
	Dependency string
	// Version increases by one with each snapshot the engine publishes for
	// the dependency; receivers can drop an older snapshot that arrives late.
	Version uint64

	// State is the state of the breaker that governs this node: the fleet's
	// (or zone's) record for scope fleet/zone, this node's own breaker for
	// scope node.
	State      BreakerState
	Generation uint64    // of the governing record (0 for scope node)
	OpenCount  uint32    // opens in a row of the governing breaker
	Since      time.Time // when the governing breaker took its state
	ProbeRound uint64    // while HalfOpen (scope fleet/zone)
	// ProbePermit: while State or LocalState is HalfOpen, this node may send
	// probes (it holds one of the fleet's permits and its turn in the round
	// has come, or it is the only prober of its own breaker). Probes still go
	// through AcquireProbe.
	ProbePermit bool
	// LocalState is this node's own breaker under scope fleet/zone: Open or
	// HalfOpen when this node's traffic fails while the fleet's does not. It
	// matters only while State is Closed. Always Closed for scope node.
	LocalState BreakerState

	Override        OverrideState // OverrideNone, ForcedOpen or ForcedClosed
	OverrideReason  string
	OverrideExpires time.Time // zero: until cleared

	// Policy is the dependency's effective policy: its mode, scope,
	// slow-call duration (outcomes at least this slow are Slow or
	// SlowFailure) and retry settings are what a client decides by. Shared
	// by every snapshot published under it: never modify it. nil decides as
	// the enforce mode.
	Policy *Policy

	// ThrottleProbability is the probability with which a first attempt is
	// refused (Throttled, DecideFirstAt): the higher of the policy's
	// throttle formula over the scope's window at the engine's last Tick
	// and, for breaker.rampDuration after a close, the ramp's refusal
	// (RampProbability); in steps of 1/200, and 0 unless the governing and
	// local breakers are closed without an override. In shadow mode it is
	// published but DecideFirstAt allows.
	ThrottleProbability float64
	// RampProbability is the ramp's part of ThrottleProbability (at most
	// it): 1 − rampStart at the close, falling linearly to 0 over
	// breaker.rampDuration. A refusal whose draw falls below it is the
	// ramp's (ReasonRamp), one above it the throttle's (ReasonThrottled).
	RampProbability float64
	// ConcurrencyLimit is this node's share of the policy's
	// concurrency.maxInFlight (0: no limit). Overrides do not lift it.
	ConcurrencyLimit int
}

// Shadow reports whether the snapshot's policy is in shadow mode: refusals
// are computed and reported, never made.
func (s *Snapshot) Shadow() bool {
	return s != nil && s.Policy != nil && s.Policy.Breaker.Mode == ModeShadow
}

// LocalOpen reports whether this node's own breaker is open or half-open.
func (s *Snapshot) LocalOpen() bool { return s != nil && s.LocalState != Closed }

// DecideFirst decides a first attempt from the snapshot alone: no lock, no
// clock, no allocation. A nil snapshot (unknown dependency) allows.
//
// AllowProbe means "this node may probe: ask AcquireProbe". The snapshot does
// not read the clock: the engine publishes a new snapshot when a breaker turns
// half-open or an override expires (at its next Tick), and a reader keeps
// deciding from the old one until then.
func (s *Snapshot) DecideFirst() Decision {
	if s == nil {
		return allow
	}
	switch s.Override {
	case ForcedOpen:
		return reject(ReasonForcedOpen)
	case ForcedClosed:
		return allow
	}
	state := s.State
	if state != Open && state != HalfOpen {
		state = s.LocalState // the governing breaker is closed: this node's own decides
	}
	var d Decision
	switch {
	case state == Open:
		d = reject(ReasonOpen)
	case state == HalfOpen && s.ProbePermit:
		return allowProbe
	case state == HalfOpen:
		d = reject(ReasonHalfOpenNoPermit)
	default:
		return allow
	}
	if s.Shadow() {
		d.Verdict = Allow
	}
	return d
}
