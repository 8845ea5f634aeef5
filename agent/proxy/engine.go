package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Engine is the agent's engine, in process: the proxy makes its calls
// through clientlib's attempt loop (clientlib.NewInProcess), which decides
// and counts through it (clientlib.Engine), and reads a dependency's
// policy to say how long a refusal lasts (Retry-After). The agent
// implements it; LocalEngine adapts a bare sharedstate.Engine.
//
// All methods must be safe for concurrent use and must not block.
type Engine interface {
	clientlib.Engine
	// Policy is dep's effective policy (asked on refusals only).
	Policy(dep string) sharedstate.Policy
}

// LocalEngine adapts a sharedstate.Engine to Engine for a proxy that is
// the engine's only caller (tests, tools): the proxy's concurrency share
// is the node's, and Release forgets nothing (the engine evicts idle
// dependencies itself). The engine's methods that Engine shares
// (Snapshot, Policy, AcquireRetry, AcquireProbe, AddCounts) are its own.
// Make it with NewLocalEngine, which makes the engine's OnChange call
// Watch's hook. The agent has its own Engine, which shares the node's
// limit with its clientlib sessions and gossips probe transitions at once.
type LocalEngine struct {
	*sharedstate.Engine
	watch atomic.Pointer[func(string)]
}

var _ Engine = (*LocalEngine)(nil)

// NewLocalEngine returns a LocalEngine on a new engine made of cfg, whose
// OnChange (cfg's, if any, is called first) calls the Watch hook.
func NewLocalEngine(cfg sharedstate.EngineConfig) (*LocalEngine, error) {
	l := &LocalEngine{}
	prev := cfg.OnChange
	cfg.OnChange = func(dep string) {
		if prev != nil {
			prev(dep)
		}
		l.Changed(dep)
	}
	e, err := sharedstate.NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	l.Engine = e
	return l, nil
}

// Changed calls the Watch hook with dep: the engine's OnChange.
func (l *LocalEngine) Changed(dep string) {
	if f := l.watch.Load(); f != nil {
		(*f)(dep)
	}
}

// Watch implements clientlib.Engine.
func (l *LocalEngine) Watch(f func(dep string)) {
	if f == nil {
		l.watch.Store(nil)
		return
	}
	l.watch.Store(&f)
}

// Track implements clientlib.Engine.
func (l *LocalEngine) Track(dep string) error {
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return err
	}
	if l.Snapshot(dep) != nil {
		return nil
	}
	return l.AddCounts(dep, sharedstate.Counts{})
}

// Release implements clientlib.Engine.
func (*LocalEngine) Release(string) {}

// Decide implements clientlib.Engine.
func (l *LocalEngine) Decide(dep string) sharedstate.Decision {
	return l.Engine.Decide(dep, sharedstate.FirstAttempt)
}

// ProbeOutcome implements clientlib.Engine.
func (l *LocalEngine) ProbeOutcome(dep string, o sharedstate.Outcome) { l.Engine.ProbeOutcome(dep, o) }

// ConcurrencyLimit implements clientlib.Engine: the node's share.
func (l *LocalEngine) ConcurrencyLimit(dep string) int {
	if s := l.Snapshot(dep); s != nil {
		return s.ConcurrencyLimit
	}
	return 0
}

// ReportInFlight implements clientlib.Engine.
func (l *LocalEngine) ReportInFlight(dep string, _, n uint64) { _ = l.SetInFlight(dep, n) }

// retryAfter is the Retry-After of a refusal of dep, in whole seconds
// rounded up: until the breaker turns half-open when it is open (policy's
// openDuration for its openCount), until a forced-open override expires,
// else one second; at least one second and at most the policy's
// maxOpenDuration.
func retryAfter(s *sharedstate.Snapshot, pol sharedstate.BreakerPolicy, r sharedstate.Reason, now time.Time) string {
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
	d = max(d, time.Second)
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
