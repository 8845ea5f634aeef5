package clientlib

import (
	"context"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// fleet is where a Client's fleet-wide decisions come from and where its
// counts go. Two implement it: session, the local agent reached over gRPC
// (New), and engineFleet, an agent's engine in the same process
// (NewInProcess: the agent's egress proxy). The attempt loop (run), the
// hot path and the local fallback are the same for both. While the fleet
// is down, and for a dependency it refused, the client's local breaker
// decides.
//
// All methods are safe for concurrent use. None blocks longer than
// Config.AgentWait, except finish (bounded by its argument).
type fleet interface {
	// start starts what keeps the link up until ctx ends; its goroutines
	// count in Client.wg.
	start(ctx context.Context)
	// finish sends what is queued and ends the link, waiting at most wait
	// (Close, after the last flush).
	finish(wait time.Duration)
	// up reports whether the fleet decides: its snapshots are installed
	// and its answers asked for.
	up() bool
	// follow starts following st, a dependency new to the client: its
	// snapshots are installed as they come.
	follow(st *depState)
	// forget stops following st (Client.Forget); called by the flusher
	// after st's last counts were reported.
	forget(st *depState)
	// report hands over st's count deltas (the flusher, while up), by the
	// counting rule of sharedstate.Engine.AddCounts: retries and probes the
	// fleet admitted are not in them.
	report(st *depState, c sharedstate.Counts)
	// setInFlight reports st's calls in flight, old being the previous
	// report (the flusher, while up).
	setInFlight(st *depState, old, n uint64)
	// flushed ends a flush: what report and setInFlight queued may go.
	flushed()
	// acquireRetry, acquireProbe and check ask the fleet for a retry from
	// its budget, a half-open probe permit, or a first attempt (strict
	// mode); ok is false when it did not answer, and the local breaker
	// decides. acquireProbe's generation is the probed breaker's (gen when
	// the answer names none).
	acquireRetry(ctx context.Context, st *depState) (d sharedstate.Decision, ok bool)
	acquireProbe(ctx context.Context, st *depState, gen uint64) (d sharedstate.Decision, generation uint64, ok bool)
	check(ctx context.Context, st *depState) (d sharedstate.Decision, ok bool)
	// probeResult reports the result of a probe acquireProbe admitted.
	probeResult(st *depState, generation uint64, success, slow bool)
}

// viaFleet reports whether st's retries, probes and strict checks are
// asked of the fleet (else the local breaker decides).
func (c *Client) viaFleet(st *depState) bool {
	return c.fleet.up() && !st.refused.Load()
}

// refusedByFleet makes the local breaker decide st: the fleet refused its
// name (invalid there, or past its cap). It says so once per refusal.
func (c *Client) refusedByFleet(st *depState, why string) {
	c.metrics.agentRefusals.Add(1)
	c.leaveOff(st)
	st.mu.Lock()
	if st.refusedMsg == "" { // once per refusal, not per message
		c.logger().Warn("clientlib: the agent refused a dependency; deciding it locally",
			"dependency", st.name, "service", c.service, "reason", why)
	}
	st.refusedMsg = why
	st.dropAgentSnapLocked()
	st.mu.Unlock()
	st.refused.Store(true)
}

// leaveOff hands st to the local breaker, which goes on from the fleet's
// last snapshot of it (the one it followed, or, in process, the engine's
// last; given again, in case it moved on its own since), before the
// decision that follows it is published.
func (c *Client) leaveOff(st *depState) {
	st.mu.Lock()
	if st.agentSnap != nil {
		st.followSnap = st.agentSnap
	}
	st.following = false
	st.mu.Unlock()
	c.syncLocal(st)
}
