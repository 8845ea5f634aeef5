package scale

import (
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
)

// Time dilation (DieCast, time-warped network emulation): a fleet runs K
// times slower than the protocol it simulates. Every timer of the agents,
// of memberlist, of the simulated network and of the simulated clients is
// multiplied by K, and the agents' engines run on a clock that advances
// 1/K second per second, so the protocol goes through the same rounds with
// K times the CPU per round. Reported times are divided by K, rates
// multiplied by K; counts (packets of a transition, proposers, rows known)
// are unchanged.
//
// What is dilated, and how:
//
//   - agent.Config, by DilateAgent: every field of real time (the tick, the
//     gossip, probe and push-pull intervals, the probe and TCP timeouts,
//     dead-node reclaim, the rejoin interval, the join backoff, the leave
//     and shutdown timeouts, and the heal's own timers). memberlist's
//     suspicion timeout (SuspicionMult × log N × ProbeInterval) and its
//     gossip-to-the-dead time (10 × ProbeInterval) follow ProbeInterval,
//     push-pull's scaling above 32 members follows PushPullInterval, and
//     its timers' random start offsets follow their intervals.
//   - The engine (policy window and its buckets, heartbeats every window/2,
//     row expiry after 2 × window, open durations, probe timeouts, the
//     proposer delay, the idle retention of forgotten dependencies, the
//     local API's report-rate bucket, the fast path's suffixes): by the
//     clock (Clock), not
//     by changing the policy, so every time the engine decides by is
//     dilated, its hidden constants included.
//   - The network: simnet link latency and jitter (DilateLink); a stream
//     dial takes a dilated round trip.
//   - The simulated clients' report period (ReportEvery), and every wait
//     and poll of the scenarios.
//
// What is not dilated, and why:
//
//   - Go's scheduler, the garbage collector and the CPU each message
//     costs: they are what dilation makes room for. The table's timer lag
//     column says how late a timer fired, in protocol time: it should stay
//     well below the protocol's shortest interval (the 100 ms tick).
//   - agent.Config.MemberTTL, KeyringReloadInterval and the etcd
//     timeouts: no etcd and no keyring in the simulation (DilateAgent
//     multiplies the first two anyway).
//   - memberlist's QueueCheckInterval (a metrics sample, no effect on the
//     protocol) and its 10 ms "slow packet handler" log threshold.
//   - simnet's delivery of a packet that is due (at once) and its queue
//     length (a count).
//   - gossip's hour-long keep of a departed member's key (retiredKeyTTL:
//     longer than any run), its once-a-minute log limiter (logs only), the
//     key directory's lookups (no registry of keys in the simulation: keys
//     travel in member metadata) and the TCP transport's read deadline
//     (simnet replaces the transport).

// DilateAgent multiplies every real-time timing of c by k (k ≥ 1). The
// engine's own times (ProposerDelay, the policy) are left to the clock.
func DilateAgent(c *agent.Config, k float64) {
	for _, d := range agentTimings(c) {
		*d = dilate(*d, k)
	}
}

// agentTimings lists every real-time duration of c (TestEveryTimingIsDilated
// checks that it names every time.Duration field of agent.Config but
// those left to the engine's clock).
func agentTimings(c *agent.Config) []*time.Duration {
	return []*time.Duration{
		&c.TickInterval, &c.GossipInterval, &c.PushPullInterval, &c.ProbeInterval, &c.ProbeTimeout,
		&c.GossipTCPTimeout, &c.DeadNodeReclaimTime, &c.RejoinInterval, &c.HealRejoinInterval, &c.JoinRetryMin, &c.JoinRetryMax,
		&c.LeaveTimeout, &c.ShutdownTimeout, &c.MemberTTL, &c.KeyringReloadInterval,
	}
}

// engineTimings names the time.Duration fields of agent.Config that the
// engine measures on its clock (the proposer delay, how long an idle
// dependency is kept): a dilated clock dilates them.
var engineTimings = []string{"ProposerDelay", "IdleRetention"}

// DilateLink multiplies a link's latency and jitter by k.
func DilateLink(l simnet.Link, k float64) simnet.Link {
	l.Latency, l.Jitter = dilate(l.Latency, k), dilate(l.Jitter, k)
	return l
}

func dilate(d time.Duration, k float64) time.Duration {
	if k == 1 {
		return d
	}
	return time.Duration(float64(d) * k)
}

// Clock is the engines' clock of a dilated fleet: a sharedstate
// MonotonicClock that advances 1/K second per real second from its start.
// All agents of a fleet share one, as hosts synchronised by NTP share the
// time.
type Clock struct {
	k     float64
	wall0 time.Time // wall time at the start
	start time.Time // real time at the start (monotonic reading)
}

// NewClock returns a clock running k times slower than real time, reading
// the current time now.
func NewClock(k float64) *Clock {
	now := time.Now()
	return &Clock{k: k, wall0: now.Round(0), start: now}
}

// Monotonic returns the dilated time elapsed since the clock started.
func (c *Clock) Monotonic() time.Duration {
	return time.Duration(float64(time.Since(c.start)) / c.k)
}

// Now returns the dilated time.
func (c *Clock) Now() time.Time { return c.wall0.Add(c.Monotonic()) }
