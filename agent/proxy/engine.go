package proxy

import (
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Engine is the decision path the proxy asks for every request: the
// agent's engine, in process (the agent implements it; LocalEngine adapts
// a bare sharedstate.Engine). Its counting rule is sharedstate.Engine's:
// Decide counts nothing; AcquireRetry and AcquireProbe count the attempt
// they admit (or the rejection); Record counts a first attempt with its
// outcome, a retry's or probe's outcome alone, or one rejection.
//
// All methods must be safe for concurrent use; Decide, Snapshot and Record
// are called for every request and must not block.
type Engine interface {
	// Track makes the engine track dep (so that it has a snapshot) and
	// counts the proxy among dep's callers. It fails with an error matching
	// sharedstate.ErrInvalidDependencyName or ErrTooManyDependencies.
	Track(dep string) error
	// Release undoes Track once the proxy forgets an idle dep.
	Release(dep string)
	// Snapshot is dep's current snapshot (nil when untracked).
	Snapshot(dep string) *sharedstate.Snapshot
	// Policy is dep's effective policy (asked on refusals only: the
	// Retry-After of an open breaker).
	Policy(dep string) sharedstate.Policy
	// Decide decides a first attempt: breaker, override and adaptive
	// throttling. AllowProbe means "ask AcquireProbe".
	Decide(dep string) sharedstate.Decision
	// AcquireRetry takes a retry from the fleet budget.
	AcquireRetry(dep string) sharedstate.Decision
	// AcquireProbe takes this node's half-open probe permit.
	AcquireProbe(dep string) sharedstate.Decision
	// ProbeOutcome reports the outcome of a probe AcquireProbe admitted
	// (slow included: half-open judges a probe as the closed rules would).
	ProbeOutcome(dep string, o sharedstate.Outcome)
	// Record counts one outcome.
	Record(dep string, kind sharedstate.AttemptKind, o sharedstate.Outcome)
	// ConcurrencyLimit is the proxy's share of dep's concurrency limit (0:
	// none); asked only when the snapshot sets a limit.
	ConcurrencyLimit(dep string) int
	// ReportInFlight says that the proxy has n calls to dep in flight; old
	// is what it reported before (0 the first time).
	ReportInFlight(dep string, old, n uint64)
}

// LocalEngine adapts a sharedstate.Engine to Engine for a proxy that is
// the engine's only caller (tests, tools): the proxy's concurrency share is
// the node's, and Release forgets nothing (the engine evicts idle
// dependencies itself). The agent wraps it to share the node's limit with
// its clientlib sessions and to gossip probe transitions at once.
type LocalEngine struct{ E *sharedstate.Engine }

var _ Engine = LocalEngine{}

// Track implements Engine.
func (l LocalEngine) Track(dep string) error {
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return err
	}
	if l.E.Snapshot(dep) != nil {
		return nil
	}
	return l.E.AddCounts(dep, sharedstate.Counts{})
}

// Release implements Engine.
func (LocalEngine) Release(string) {}

// Snapshot implements Engine.
func (l LocalEngine) Snapshot(dep string) *sharedstate.Snapshot { return l.E.Snapshot(dep) }

// Policy implements Engine.
func (l LocalEngine) Policy(dep string) sharedstate.Policy { return l.E.Policy(dep) }

// Decide implements Engine.
func (l LocalEngine) Decide(dep string) sharedstate.Decision {
	return l.E.Decide(dep, sharedstate.FirstAttempt)
}

// AcquireRetry implements Engine.
func (l LocalEngine) AcquireRetry(dep string) sharedstate.Decision { return l.E.AcquireRetry(dep) }

// AcquireProbe implements Engine.
func (l LocalEngine) AcquireProbe(dep string) sharedstate.Decision { return l.E.AcquireProbe(dep) }

// ProbeOutcome implements Engine.
func (l LocalEngine) ProbeOutcome(dep string, o sharedstate.Outcome) { l.E.ProbeOutcome(dep, o) }

// Record implements Engine. An untracked name past the engine's cap is
// dropped (Track refused it already).
func (l LocalEngine) Record(dep string, kind sharedstate.AttemptKind, o sharedstate.Outcome) {
	_ = l.E.Record(dep, kind, o)
}

// ConcurrencyLimit implements Engine: the node's share.
func (l LocalEngine) ConcurrencyLimit(dep string) int {
	if s := l.E.Snapshot(dep); s != nil {
		return s.ConcurrencyLimit
	}
	return 0
}

// ReportInFlight implements Engine.
func (l LocalEngine) ReportInFlight(dep string, _, n uint64) { _ = l.E.SetInFlight(dep, n) }

// retryAfter is the Retry-After of a refusal of dep: until the breaker
// turns half-open when it is open (policy's openDuration for its
// openCount), until a forced-open override expires, else one second; at
// least one second and at most the policy's maxOpenDuration.
func retryAfter(s *sharedstate.Snapshot, pol sharedstate.BreakerPolicy, r sharedstate.Reason, now time.Time) time.Duration {
	d := time.Second
	switch {
	case s == nil:
	case r == sharedstate.ReasonForcedOpen && !s.OverrideExpires.IsZero():
		d = s.OverrideExpires.Sub(now)
	case r == sharedstate.ReasonOpen && s.State == sharedstate.Open:
		d = s.Since.Add(pol.OpenDurationFor(s.OpenCount)).Sub(now)
	case r == sharedstate.ReasonOpen || r == sharedstate.ReasonForcedOpen:
		d = pol.OpenDuration.Std()
	}
	if m := pol.MaxOpenDuration.Std(); m > 0 && d > m {
		d = m
	}
	return max(d, time.Second)
}
