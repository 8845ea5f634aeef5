package clientlib

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Engine is an agent's decision engine in the process of the Client that
// decides through it (NewInProcess): how the agent's egress proxy makes
// its calls, through the same attempt loop as every Go service, without a
// session. It is the agent's API: a service uses New and reaches its agent
// over gRPC.
//
// The counting rule is sharedstate.Engine's: AcquireRetry and AcquireProbe
// count the attempt they admit (or the refusal); AddCounts adds the rest
// (first attempts decided from snapshots, outcomes, refusals).
//
// All methods must be safe for concurrent use and must not block: the
// Client calls them on its attempt path and from its flusher.
type Engine interface {
	// Track makes the engine track dep, so that it has a Snapshot, and
	// counts this Client among dep's callers (for its share of a
	// concurrency limit). On an error (an invalid name, the engine's cap)
	// the Client decides dep with its local breaker.
	Track(dep string) error
	// Release undoes a Track that succeeded, once the Client forgot dep
	// (Client.Forget) or closed.
	Release(dep string)
	// Snapshot is dep's current snapshot; nil when the engine does not
	// track it (then the Client keeps deciding from the last one it saw
	// until its next counts make the engine track dep again).
	Snapshot(dep string) *sharedstate.Snapshot
	// Decide decides a first attempt without counting it (StrictConsult).
	Decide(dep string) sharedstate.Decision
	// AcquireRetry takes a retry from the fleet's retry budget.
	AcquireRetry(dep string) sharedstate.Decision
	// AcquireProbe takes a half-open probe permit.
	AcquireProbe(dep string) sharedstate.Decision
	// ProbeOutcome reports the outcome of a probe AcquireProbe admitted,
	// slow or not (half-open judges a probe as the closed rules would).
	ProbeOutcome(dep string, o sharedstate.Outcome)
	// AddCounts adds the Client's count deltas of dep (every
	// Config.FlushInterval while there is traffic). An error makes the
	// Client decide dep with its local breaker.
	AddCounts(dep string, c sharedstate.Counts) error
	// ConcurrencyLimit is the Client's share of dep's concurrency limit
	// (0: none); asked when the Snapshot sets a limit.
	ConcurrencyLimit(dep string) int
	// ReportInFlight says that the Client has n calls to dep in flight
	// (while there is a limit); old is what it reported before (0 at
	// first). Forgetting dep reports 0.
	ReportInFlight(dep string, old, n uint64)
	// Watch makes f the engine's change hook, replacing the previous one
	// (nil: none): f(dep) when dep's Snapshot or the Client's
	// ConcurrencyLimit may have changed, f("") when every dependency's may
	// have. f may be called from any goroutine, concurrently, never with
	// a lock of the engine held: it calls back into the engine. The
	// Client calls Watch(f) in NewInProcess and Watch(nil) in Close.
	Watch(f func(dep string))
}

// NewInProcess returns a Client that decides through eng, an agent's
// engine in the same process, instead of a session with an agent: eng's
// snapshots are installed as they change (Engine.Watch), retries, probes
// and strict checks are asked of eng directly, and the counts go into eng
// every Config.FlushInterval. Everything else is New's: the attempt loop,
// the classes, the in-process hot path, handles and the RoundTripper. For
// a name eng refuses, the Client's local breaker decides, as for a name an
// agent refuses. The agent's egress proxy calls through one; services use
// New. cfg's agent fields (AgentAddress, NoAgent, AgentWait, ReconnectMin,
// ReconnectMax, DialOptions) do not apply. Close releases every dependency
// the Client tracked in eng.
func NewInProcess(cfg Config, eng Engine) (*Client, error) {
	if eng == nil {
		return nil, errNilEngine
	}
	return build(cfg, eng)
}

// engineFleet is the fleet of an engine in process.
type engineFleet struct {
	c      *Client
	eng    Engine
	closed atomic.Bool
}

var _ fleet = (*engineFleet)(nil)

func newEngineFleet(c *Client, eng Engine) *engineFleet {
	f := &engineFleet{c: c, eng: eng}
	eng.Watch(f.changed)
	return f
}

// start implements fleet: the engine needs no link.
func (f *engineFleet) start(context.Context) {}

// finish implements fleet: the engine forgets this Client (after the last
// flush reported its counts).
func (f *engineFleet) finish(time.Duration) {
	f.eng.Watch(nil)
	f.closed.Store(true)
	f.c.each(f.forget)
}

// up implements fleet: until Close.
func (f *engineFleet) up() bool { return !f.closed.Load() }

// follow implements fleet.
func (f *engineFleet) follow(st *depState) {
	if err := f.eng.Track(st.name); err != nil {
		f.c.refusedByFleet(st, err.Error())
		return
	}
	st.mu.Lock()
	st.fleetTracked = true
	st.mu.Unlock()
	f.refresh(st)
}

// forget implements fleet (the flusher, or finish after it).
func (f *engineFleet) forget(st *depState) {
	if st.sentInFlight != 0 {
		f.eng.ReportInFlight(st.name, uint64(st.sentInFlight), 0)
		st.sentInFlight = 0
	}
	st.mu.Lock()
	tracked := st.fleetTracked
	st.fleetTracked = false
	st.mu.Unlock()
	if tracked {
		f.eng.Release(st.name)
	}
}

// report implements fleet.
func (f *engineFleet) report(st *depState, c sharedstate.Counts) {
	if err := f.eng.AddCounts(st.name, c); err != nil && !st.refused.Load() {
		f.c.refusedByFleet(st, err.Error())
	}
}

// setInFlight implements fleet.
func (f *engineFleet) setInFlight(st *depState, old, n uint64) { f.eng.ReportInFlight(st.name, old, n) }

// flushed implements fleet: nothing is queued.
func (f *engineFleet) flushed() {}

// acquireRetry implements fleet.
func (f *engineFleet) acquireRetry(_ context.Context, st *depState) (sharedstate.Decision, bool) {
	return f.eng.AcquireRetry(st.name), true
}

// acquireProbe implements fleet.
func (f *engineFleet) acquireProbe(_ context.Context, st *depState, _ uint64) (sharedstate.Decision, uint64, bool) {
	return f.eng.AcquireProbe(st.name), 0, true
}

// check implements fleet.
func (f *engineFleet) check(_ context.Context, st *depState) (sharedstate.Decision, bool) {
	return f.eng.Decide(st.name), true
}

// probeResult implements fleet.
func (f *engineFleet) probeResult(st *depState, _ uint64, success, slow bool) {
	f.eng.ProbeOutcome(st.name, sharedstate.OutcomeOf(!success, slow))
}

// changed is the engine's change hook.
func (f *engineFleet) changed(dep string) {
	if dep == "" {
		f.c.each(f.refresh)
		return
	}
	if st := f.c.lookup(dep); st != nil {
		f.refresh(st)
	}
}

// refresh installs the engine's current snapshot of st, with the Client's
// share of the concurrency limit. It reads the engine under st.mu, so the
// last refresh to run installs the latest snapshot, whatever order the
// hooks ran in.
func (f *engineFleet) refresh(st *depState) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.fleetTracked {
		return
	}
	src := f.eng.Snapshot(st.name)
	if src == nil { // not tracked meanwhile (idle): the next counts bring it back
		return
	}
	limit := src.ConcurrencyLimit
	if limit > 0 {
		limit = f.eng.ConcurrencyLimit(st.name)
	}
	if src == st.fleetSrc && limit == st.fleetLimit && st.agentSnap != nil {
		return
	}
	snap := src
	if limit != src.ConcurrencyLimit {
		s := *src
		s.ConcurrencyLimit = limit
		snap = &s
	}
	st.fleetSrc, st.fleetLimit = src, limit
	st.installLocked(snap)
}
