package sharedstate

import (
	"math"
	"math/rand/v2"
)

// Beyond on/off: fleet-wide adaptive throttling and the fleet-wide
// concurrency limit. Both are computed at each Tick from the scope's window
// totals and published in the Snapshot, so that clients decide a first
// attempt in process.

// throttleQuantum is the resolution of a published throttle probability: a
// probability moves in steps of 1/200 so that a noisy rate does not publish
// a new snapshot (and push it to every client) on every tick.
const throttleQuantum = 200

// ThrottleProbability is Google SRE client-side throttling:
// max(0, (requests − k·accepts) / (requests + 1)), and 0 while requests <
// minRequests. It is in [0, 1). The window's requests are the attempts
// callers wanted to make, whether made (successes and failures) or refused
// by Fusebox (rejected). Its accepts are the attempts the dependency
// answered: the successes. An error the classifier does not count as a
// failure (the dependency answered, e.g. a 404) is counted as a success, so
// it is an accept; failures, timeouts and refused attempts are not.
func (t ThrottlePolicy) ThrottleProbability(c Counts) float64 {
	req := satAdd(c.Requests(), c.Rejected)
	if req == 0 || req < uint64(max(t.MinRequests, 0)) {
		return 0
	}
	r := float64(req)
	p := (r - t.K*float64(c.Successes)) / (r + 1)
	if !(p > 0) { // also NaN
		return 0
	}
	return min(p, 1)
}

// quantize rounds p to the published resolution, keeping a positive
// probability positive.
func quantize(p float64) float64 {
	if p <= 0 {
		return 0
	}
	return max(math.Round(p*throttleQuantum)/throttleQuantum, 1.0/throttleQuantum)
}

// ConcurrencyShare is one node's share of a concurrency limit: max ×
// own/scope (the node's part of the scope's traffic over the window), or
// max / activeNodes while the scope has no traffic; at least 1. Traffic is
// the first attempts made or refused (a node whose callers are held back by
// a small share still shows its demand). max 0 means no limit (0).
func ConcurrencyShare(max int, own, scope uint64, activeNodes int) int {
	if max <= 0 {
		return 0
	}
	var share float64
	if scope > 0 && own <= scope {
		share = float64(max) * float64(own) / float64(scope)
	} else {
		share = float64(max) / float64(activeNodes+b2i(activeNodes == 0))
	}
	return int(math.Max(1, math.Round(share)))
}

func concurrencyTraffic(c Counts) uint64 { return satAdd(c.FirstAttempts, c.Rejected) }

// shapeState is what a dependency's throttle and concurrency limit are at the
// last Tick. Guarded by depState.mu.
type shapeState struct {
	throttle    float64 // published probability (quantized); 0 when not applied
	rawThrottle float64 // what the formula says, applied or not (metrics)
	share       int     // this node's concurrency share; 0 without a limit
	inFlight    uint64  // the scope's calls in flight (rows + own)
}

// shape recomputes the throttle probability and the concurrency share from
// the scan of the scope. Caller holds d.mu.
func (d *depState) shape(e *Engine, s scanResult) {
	own, scope, nodes := s.own, s.eff, s.effActive
	inFlight := s.effInFlight
	if !d.shared() {
		scope, nodes, inFlight = own, 1, s.ownInFlight
	}
	t := d.pol.Throttle
	var st shapeState
	st.inFlight = inFlight
	if t.Enabled {
		st.rawThrottle = t.ThrottleProbability(scope)
		st.throttle = quantize(st.rawThrottle)
	}
	st.share = ConcurrencyShare(d.pol.Concurrency.MaxInFlight, concurrencyTraffic(own), concurrencyTraffic(scope), nodes)
	d.shaped = st
}

// SetInFlight sets how many calls this node's callers have in flight to dep
// now (the sum over its clients); the number travels with the node's rows.
// An untracked dependency is created (see Record for the errors).
func (e *Engine) SetInFlight(dep string, n uint64) error {
	for {
		d, err := e.state(dep)
		if err != nil {
			return err
		}
		d.inFlight.Store(n)
		if !d.evicted.Load() {
			return nil
		}
	}
}

// Shape is a dependency's adaptive throttle and concurrency limit as this
// node computed them at its last Tick.
type Shape struct {
	// ThrottleEnabled is the policy's throttle.enabled.
	ThrottleEnabled bool
	// ThrottleProbability is what the throttle formula gives for the scope's
	// window, whether or not it is applied (0 when throttling is off).
	ThrottleProbability float64
	// Applied is the probability first attempts are refused with now (the
	// snapshot's ThrottleProbability): the throttle's, or the ramp's after
	// a close, whichever is higher; 0 unless the breaker is closed without
	// an override (in shadow mode it is reported and not enforced).
	Applied float64
	// Ramp is the ramp's part of Applied (the snapshot's RampProbability):
	// how much of the traffic the ramp after a close still refuses.
	Ramp float64
	// MaxInFlight is the policy's concurrency.maxInFlight (0: no limit).
	MaxInFlight int
	// Share is this node's share of MaxInFlight.
	Share int
	// InFlight is the scope's calls in flight, as the rows last reported them.
	InFlight uint64
	// NodeInFlight is this node's (SetInFlight).
	NodeInFlight uint64
}

// Shape returns dep's throttle and concurrency state, and false if the
// engine does not track dep.
func (e *Engine) Shape(dep string) (Shape, bool) {
	d := e.deps.load(dep)
	if d == nil {
		return Shape{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sh := Shape{
		ThrottleEnabled: d.pol.Throttle.Enabled, ThrottleProbability: d.shaped.rawThrottle,
		MaxInFlight: d.pol.Concurrency.MaxInFlight, Share: d.shaped.share,
		InFlight: d.shaped.inFlight, NodeInFlight: d.inFlight.Load(),
	}
	if s := d.snap.Load(); s != nil {
		sh.Applied, sh.Ramp = s.ThrottleProbability, s.RampProbability
	}
	return sh, true
}

// Throttled reports whether a first attempt the breaker allows is refused by
// adaptive throttling, for a uniform draw u in [0,1). It reads only the
// snapshot: no lock, no allocation.
func (s *Snapshot) Throttled(u float64) bool {
	return s != nil && u < s.ThrottleProbability
}

// DecideFirstAt is DecideFirst followed by adaptive throttling and the ramp
// after a close with the uniform draw u in [0,1): a first attempt the
// breaker allows (Allow with no reason) is refused when u <
// ThrottleProbability, with ReasonRamp when u < RampProbability (the ramp
// alone refuses it), else ReasonThrottled (in shadow mode allowed, with
// the reason kept).
func (s *Snapshot) DecideFirstAt(u float64) Decision {
	d := s.DecideFirst()
	if d != allow || !s.Throttled(u) {
		return d
	}
	why := ReasonThrottled
	if u < s.RampProbability {
		why = ReasonRamp
	}
	if s.Shadow() {
		return Decision{Verdict: Allow, Reason: why}
	}
	return reject(why)
}

// uniform is the engine's draw for a throttling decision. The engine's own
// Rand is guarded by a lock; throttling draws from the lock-free runtime
// source instead (deterministic tests use Snapshot.DecideFirstAt).
func uniform() float64 { return rand.Float64() }

// shapeTick recomputes the shape at a Tick; it scans the rows only when the
// policy throttles or limits concurrency. Caller holds d.mu.
func (d *depState) shapeTick(e *Engine, now int64) {
	if !d.pol.Throttle.Enabled && d.pol.Concurrency.MaxInFlight <= 0 {
		d.shaped = shapeState{}
		return
	}
	d.shape(e, d.scan(e, now, d.rec(e).Generation))
}
