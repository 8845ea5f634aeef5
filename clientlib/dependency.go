package clientlib

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// Dependency is a handle on one dependency of this service. Get it once with
// Client.Dependency and keep it: it is cheap to copy and safe for concurrent
// use. Its calls decide first attempts in process, from the snapshot the
// agent pushed (or the local breaker's while the agent is away).
type Dependency struct {
	st       *depState
	defaults []CallOption
}

// Name returns the dependency's name.
func (d *Dependency) Name() string { return d.st.name }

// Err returns the error every call of this handle fails with when its name
// is invalid (ErrInvalidDependency), else nil.
func (d *Dependency) Err() error { return d.st.err }

// Untracked reports whether the calls of this handle go through untracked:
// the client already tracked Config.MaxDependencies names when the handle
// was made. Such a call is never refused: it makes one attempt (whatever
// its class), under the default policy's per-attempt timeout, with no
// breaker, budget or concurrency limit; nothing of it is reported, and it
// counts in fusebox_client_untracked_calls_total. A handle made once the
// client has room again (see Client.Forget) is tracked.
func (d *Dependency) Untracked() bool { return d.st.untracked }

// With returns a handle on the same dependency whose calls apply opts before
// their own options, e.g. c.Dependency("ledger").With(NestedRetries(true)).
func (d *Dependency) With(opts ...CallOption) *Dependency {
	return &Dependency{st: d.st, defaults: slices.Concat(d.defaults, opts)}
}

// Status returns the breaker as this client currently decides from it (see
// Status for what each field says).
func (d *Dependency) Status() Status { return d.st.dec.Load().status(d.st.name) }

// BreakerState is a breaker's state: Closed, Open or HalfOpen.
type BreakerState = sharedstate.BreakerState

// OverrideState is an operator override: OverrideNone, ForcedOpen, ForcedClosed.
type OverrideState = sharedstate.OverrideState

// Breaker states and overrides, re-exported from package sharedstate.
const (
	Closed       = sharedstate.Closed
	Open         = sharedstate.Open
	HalfOpen     = sharedstate.HalfOpen
	OverrideNone = sharedstate.OverrideNone
	ForcedOpen   = sharedstate.ForcedOpen
	ForcedClosed = sharedstate.ForcedClosed
)

// Status is a dependency's breaker as one client decides from it now:
// the agent's last pushed snapshot while FromAgent is true, the client's
// local fallback breaker while it is false. A first attempt is refused
// (Rejecting) when Override is ForcedOpen, or, without an override and
// outside shadow mode, when State or LocalState is not Closed.
//
// For example {State:open LocalState:closed FromAgent:true} is the fleet's
// breaker open (every host refuses); {State:closed LocalState:open
// FromAgent:true} is this host's own breaker open while the fleet's is
// closed (only this host's calls fail: its network, its DNS); and
// {State:open LocalState:closed FromAgent:false} is the agent away and
// this process's local breaker open on its own calls' failures.
type Status struct {
	// Dependency is the dependency's name.
	Dependency string
	// State is the state of the breaker that governs the dependency. With
	// FromAgent, the one the policy's scope names, as the agent last pushed
	// it: the fleet's (scope fleet), the zone's (scope zone) or the agent
	// host's own (scope node). Without, the local fallback breaker's, which
	// counts only this process's calls: it starts from the state the agent
	// last gave (its generation and since included) and goes on by its own
	// rules.
	State BreakerState
	// LocalState is the agent host's node-local breaker under scope fleet
	// or zone: Open or HalfOpen when this host's traffic to the dependency
	// fails while the fleet's (or zone's) does not; it refuses this host's
	// first attempts while State is Closed. Closed under scope node (State
	// is that breaker). Without FromAgent it is the local fallback's own
	// node-local breaker: with this process as the local breaker's only
	// node, State trips first and LocalState normally stays Closed.
	LocalState BreakerState
	// Override is an operator's override (fuseboxctl force-open,
	// force-closed): ForcedOpen refuses every first attempt, ForcedClosed
	// none, whatever State and LocalState say. The client keeps it, with
	// its expiry, while the agent is away.
	Override OverrideState
	// Shadow is true when the policy's mode is shadow: transitions are
	// computed and reported, nothing is refused.
	Shadow bool
	// Generation is the generation of the governing breaker's record: one
	// more with each fleet (or zone) transition; the local fallback
	// breaker's starts from the agent's last and goes up with its own
	// transitions. 0 under scope node.
	Generation uint64
	// Since is when State last changed (zero when it never did).
	Since time.Time
	// FromAgent is true when the agent's pushed snapshot decides, false
	// when the local fallback breaker does: the agent is away (not yet
	// connected, restarting, unreachable), refused the dependency's name,
	// or has not pushed the dependency's snapshot yet.
	FromAgent bool
}

// Rejecting reports whether a first attempt would be refused now (probes
// aside).
func (s Status) Rejecting() bool {
	if s.Override == ForcedOpen {
		return true
	}
	if s.Override == ForcedClosed || s.Shadow {
		return false
	}
	return s.State != Closed || s.LocalState != Closed
}

// StateChange tells OnStateChange that a dependency's Status changed in a
// way that matters to callers (state, local state, override, shadow mode or
// the deciding side).
type StateChange struct {
	Dependency string
	From, To   Status
}

// retrySettings are the retry part of a decision, converted once.
type retrySettings struct {
	maxAttempts int
	perAttempt  time.Duration
	backoff     backoff.Policy
	hedgeDelay  time.Duration // with maxHedges > 0: hedge after this long
	maxHedges   int
}

func retryFrom(r sharedstate.RetryPolicy) retrySettings {
	return retrySettings{
		maxAttempts: max(r.MaxAttempts, 1),
		perAttempt:  max(r.PerAttemptTimeout.Std(), 0),
		backoff: backoff.Policy{Base: r.Backoff.Base.Std(), Max: r.Backoff.Max.Std(),
			Jitter: backoff.JitterNamed(string(r.Backoff.Jitter))},
		hedgeDelay: r.Hedge.Delay.Std(),
		maxHedges:  max(r.Hedge.MaxHedges, 0),
	}
}

// decision is what the hot path reads: an immutable snapshot plus what is
// derived from it once. A new one is published (atomic pointer) whenever the
// agent pushes a snapshot, the local breaker changes, or the agent comes or
// goes.
type decision struct {
	snap      *sharedstate.Snapshot
	first     sharedstate.Decision
	rejErr    error // when first rejects
	retry     retrySettings
	slow      time.Duration
	fromAgent bool
	// throttleCut: a first attempt is throttled when the top 53 bits of a
	// random draw are below it (probability × 2^53; 0: no throttling).
	throttleCut uint64
	// shadowCut is throttleCut in shadow mode: a hit is counted, not refused.
	shadowCut uint64
	// rampCut is the ramp's part of throttleCut (the agent's snapshot's
	// RampProbability): a draw below it is the ramp's refusal.
	rampCut uint64
	// limit is this process's share of the concurrency limit (0: none).
	limit int64
}

func (d *decision) status(name string) Status {
	s := d.snap
	return Status{
		Dependency: name, State: s.State, LocalState: s.LocalState, Override: s.Override,
		Shadow: s.Shadow(), Generation: s.Generation, Since: s.Since,
		FromAgent: d.fromAgent,
	}
}

// stripe holds the hot-path counters of one dependency for a subset of the
// goroutines, and a share of its concurrency slots: calls spread over the
// stripes, so no cache line is written by every core. Exactly one cache
// line (TestStripeSize).
type stripe struct {
	first    atomic.Uint64 // first attempts admitted in process (snapshot or Check)
	success  atomic.Uint64
	failure  atomic.Uint64
	slow     atomic.Uint64
	rejected atomic.Uint64 // refused in process
	free     atomic.Int64  // concurrency slots free in this stripe (see slots)
	_        [16]byte
}

func (s *stripe) record(failure, slow bool) {
	if failure {
		s.failure.Add(1)
	} else {
		s.success.Add(1)
	}
	if slow {
		s.slow.Add(1)
	}
}

// rareCounters count what the agent or the local engine admitted or refused
// (retries, probes): these paths already wait on an RPC or a lock.
type rareCounters struct {
	retriesAgent, retriesLocal   atomic.Uint64
	probesAgent, probesLocal     atomic.Uint64
	rejectedAgent, rejectedLocal atomic.Uint64
	shadowThrottled              atomic.Uint64 // first attempts shadow mode let through that throttling would refuse
}

// totals is a sum over the stripes and rare counters.
type totals struct {
	first, success, failure, slow, rejected              uint64
	retriesAgent, retriesLocal, probesAgent, probesLocal uint64
	rejectedAgent, rejectedLocal                         uint64
}

// depState is the shared state behind every handle of one dependency.
type depState struct {
	c         *Client
	name      string
	err       error // non-nil: every call fails with it
	untracked bool  // past MaxDependencies: one attempt, no breaker, not reported
	dec       atomic.Pointer[decision]
	stripes   []stripe
	mask      uint32
	_         [64]byte // keep the rare counters off dec's cache line
	rare      rareCounters

	// The handle's refusals, built once so that refusing allocates
	// nothing: by sharedstate.Reason (rej[ReasonNone] is nil), and the
	// concurrency limit's.
	rej      [sharedstate.ReasonRamp + 1]*RejectedError
	rejLimit *RejectedError

	_     [64]byte // keep the semaphore off the read-mostly fields
	slots slots

	mu        sync.Mutex // guards the fields below; never taken by a first attempt
	agentSnap *sharedstate.Snapshot
	// agentSnapAnswer: agentSnap came with an answer (AcquireRetry…), not
	// on the stream; a pushed snapshot older than it is late.
	agentSnapAnswer bool
	localPol        *sharedstate.Policy   // the last policy pushed (agentSnap's), for the local breaker
	localPolJSON    []byte                // localPol as it was pushed (policy_json)
	localOverride   *sharedstate.Override // the agent's last override, for the local breaker
	fallbackSnap    *sharedstate.Snapshot // closed under localPol, while the engine tracks nothing
	refusedMsg      string                // why the agent refused this name
	kept            keptShaping           // the agent's last shaping, while the local breaker decides
	// Of an engine in process (engineFleet): Track succeeded, and the
	// engine's snapshot and concurrency share agentSnap was made of.
	fleetTracked bool
	fleetSrc     *sharedstate.Snapshot
	fleetLimit   int

	refused atomic.Bool // the agent refused this name: decide locally
	// keptUntil is kept.throttleUntil in Unix nanoseconds (0: none), for
	// the flusher to republish when it passes without taking mu.
	keptUntil atomic.Int64

	// The local breaker follows the agent's breakers while the agent
	// decides (sharedstate.Engine.Follow), so that it starts from the
	// fleet's present state when the agent goes away: followSnap is the
	// agent's latest snapshot with another breaker state than the one
	// before, kept once the agent stops deciding; following says whether
	// the agent decides now.
	followSnap *sharedstate.Snapshot
	following  bool

	// syncMu orders the updates of the local engine (policy, followed
	// breakers, override): whoever holds it applies the latest ones (see
	// syncLocal).
	syncMu          sync.Mutex
	syncedPol       *sharedstate.Policy   // what the engine was last given (guarded by syncMu)
	syncedOv        *sharedstate.Override // likewise
	syncedOvOnce    bool                  // syncedOv has been applied once
	syncedFollow    *sharedstate.Snapshot // likewise
	syncedFollowing bool                  // the engine follows st

	// Owned by the flusher goroutine.
	sentAgent, sentLocal totals
	sentInFlight         int64
	inFlightSent         bool
}

// newDepState returns the state of dependency name with nstripes stripes
// (a power of two), or one whose calls fail with err.
func newDepState(c *Client, name string, err error, nstripes int) *depState {
	st := &depState{c: c, name: name, err: err}
	if err != nil {
		return st
	}
	st.stripes = make([]stripe, nstripes)
	st.mask = uint32(nstripes - 1)
	for r, sentinel := range [len(st.rej)]error{sharedstate.ReasonOpen: ErrOpen, sharedstate.ReasonForcedOpen: ErrForcedOpen,
		sharedstate.ReasonHalfOpenNoPermit: ErrOpen, sharedstate.ReasonBudgetExhausted: ErrBudgetExhausted,
		sharedstate.ReasonThrottled: ErrThrottled, sharedstate.ReasonRamp: ErrThrottled} {
		if sentinel != nil {
			st.rej[r] = &RejectedError{Dependency: name, Reason: sharedstate.Reason(r).String(), Err: sentinel}
		}
	}
	st.rejLimit = &RejectedError{Dependency: name, Reason: "concurrency-limit", Err: ErrConcurrencyLimit}
	st.slots.stripes = st.stripes
	st.slots.freed = make(chan struct{}, 1)
	return st
}

// rejection is the refusal for reason r (open for a reason it does not know).
func (st *depState) rejection(r sharedstate.Reason) error {
	if int(r) < len(st.rej) && st.rej[r] != nil {
		return st.rej[r]
	}
	return st.rej[sharedstate.ReasonOpen]
}

// anyStripe picks a stripe for a call that holds no token.
func (st *depState) anyStripe() *stripe {
	return &st.stripes[uint32(rand.Uint64())&st.mask]
}

func (st *depState) sum() totals {
	var t totals
	for i := range st.stripes {
		s := &st.stripes[i]
		t.first += s.first.Load()
		t.success += s.success.Load()
		t.failure += s.failure.Load()
		t.slow += s.slow.Load()
		t.rejected += s.rejected.Load()
	}
	r := &st.rare
	t.retriesAgent, t.retriesLocal = r.retriesAgent.Load(), r.retriesLocal.Load()
	t.probesAgent, t.probesLocal = r.probesAgent.Load(), r.probesLocal.Load()
	t.rejectedAgent, t.rejectedLocal = r.rejectedAgent.Load(), r.rejectedLocal.Load()
	return t
}

// keptShaping is what the agent's last snapshot shaped traffic with, kept
// for the local fallback when the agent goes away (dropAgentSnapLocked): the
// process's concurrency share until the agent decides again, the throttle
// probability until throttleUntil.
type keptShaping struct {
	throttle      float64
	throttleUntil time.Time
	limit         int
}

// dropAgentSnapLocked hands st to the local fallback: the agent's
// snapshot goes, and the decision is published again. What the snapshot
// shaped traffic with is kept: the concurrency share (a capacity does not
// change because an agent restarts) until the agent decides again, and
// the throttle probability for one breaker window, the span it was
// computed over (later it would describe traffic no window holds any
// more), unless it is the ramp's after a close (a ramp lasts
// rampDuration, not a window). Caller holds st.mu.
func (st *depState) dropAgentSnapLocked() {
	if s := st.agentSnap; s != nil {
		st.kept = keptShaping{limit: s.ConcurrencyLimit}
		if s.ThrottleProbability > s.RampProbability {
			st.kept.throttle = s.ThrottleProbability
		}
		st.keptUntil.Store(0)
		if st.kept.throttle > 0 {
			st.kept.throttleUntil = time.Now().Add(st.policyLocked().Breaker.Window.Std())
			st.keptUntil.Store(st.kept.throttleUntil.UnixNano())
		}
	}
	st.agentSnap = nil
	st.publishLocked()
}

// policyLocked is the policy the local breaker decides st under: the last
// one pushed, else the engine's (the fleet default's). Caller holds st.mu.
func (st *depState) policyLocked() sharedstate.Policy {
	if st.localPol != nil {
		return *st.localPol
	}
	return st.c.engine.Policy(st.name)
}

// installLocked makes snap, the fleet's, decide st: the fleet no longer
// refuses st's name, and the shaping kept for its absence is dropped.
// Caller holds st.mu.
func (st *depState) installLocked(snap *sharedstate.Snapshot) {
	st.agentSnap = snap
	st.refusedMsg = ""
	st.refused.Store(false)
	st.kept = keptShaping{}
	st.keptUntil.Store(0)
	st.publishLocked()
}

// publish recomputes the decision from the current sources: the agent's
// snapshot while the session is up and the agent pushed one, else the local
// breaker's, with the shaping kept from the agent's last snapshot. Caller
// holds st.mu.
func (st *depState) publishLocked() {
	var (
		snap      *sharedstate.Snapshot
		fromAgent bool
	)
	if st.agentSnap != nil && st.c.fleet.up() {
		snap, fromAgent = st.agentSnap, true
	} else {
		snap = st.c.localSnapshot(st)
	}
	throttle, limit := snap.ThrottleProbability, snap.ConcurrencyLimit
	if !fromAgent {
		k := &st.kept
		if limit == 0 {
			limit = k.limit
		}
		if throttle == 0 && k.throttle > 0 && snap.Override == OverrideNone && time.Now().Before(k.throttleUntil) {
			throttle = k.throttle
		}
	}
	var tc, sc, rc uint64
	var lim int64
	if !snap.Shadow() { // shadow mode reports, never refuses
		tc, lim = throttleCut(throttle), int64(max(limit, 0))
		rc = min(throttleCut(snap.RampProbability), tc)
	} else {
		sc = throttleCut(throttle)
	}
	old := st.dec.Load()
	if old != nil && old.snap == snap && old.fromAgent == fromAgent && old.throttleCut == tc && old.shadowCut == sc && old.rampCut == rc && old.limit == lim {
		return
	}
	d := &decision{snap: snap, first: snap.DecideFirst(), retry: retryFrom(snap.Policy.Retry),
		slow: snap.Policy.Breaker.SlowCallDuration.Std(), fromAgent: fromAgent, throttleCut: tc, shadowCut: sc, rampCut: rc, limit: lim}
	if d.first.Verdict == sharedstate.Reject {
		d.rejErr = st.rejection(d.first.Reason)
	}
	st.dec.Store(d)
	if old != nil && d.limit != old.limit {
		st.slots.wake() // a waiting call re-reads the limit: a new share may make room
	}
	if old != nil {
		from, to := old.status(st.name), d.status(st.name)
		if from.State != to.State || from.LocalState != to.LocalState || from.Override != to.Override ||
			from.Shadow != to.Shadow || from.FromAgent != to.FromAgent {
			st.c.emit(StateChange{Dependency: st.name, From: from, To: to})
		}
	}
}

// newUntracked returns the state of an untracked handle on name: one
// stripe, and a fixed decision that admits every first attempt under the
// policy the local breaker would give name, with no concurrency limit.
func newUntracked(c *Client, name string) *depState {
	st := newDepState(c, name, nil, 1)
	st.untracked = true
	snap := convert.PolicySnapshot(name, c.engine.Policy(name))
	st.dec.Store(&decision{snap: snap, first: sharedstate.Decision{Verdict: sharedstate.Allow},
		retry: retryFrom(snap.Policy.Retry), slow: snap.Policy.Breaker.SlowCallDuration.Std()})
	return st
}

func (st *depState) publish() {
	st.mu.Lock()
	st.publishLocked()
	st.mu.Unlock()
}
