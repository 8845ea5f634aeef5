package scale

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Policy is the fleet default of the scenarios: DefaultPolicy (20
// requests, 50% failures, from 2 nodes, 10 s window) with an open duration
// long enough that no breaker turns half-open while a scenario watches it.
func Policy() sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Breaker.OpenDuration = sharedstate.Duration(10 * time.Minute)
	p.Breaker.MaxOpenDuration = sharedstate.Duration(20 * time.Minute)
	return p
}

// Spread picks k of n agents spread over the fleet (0, n/k, 2n/k, ...):
// the clients of the scenarios, here and in package procs.
func Spread(n, k int) []int {
	k = min(k, n)
	out := make([]int, k)
	for j := range k {
		out[j] = j * n / k
	}
	return out
}

// Percentiles of a sample (nearest rank).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s)) + 0.5)
	i = min(max(i-1, 0), len(s)-1)
	return s[i]
}

// TripResult is what scenario (a) (and (d) on a lossy network) measured.
type TripResult struct {
	// Rejecting counts the agents that rejected before the deadline (all N
	// when the scenario succeeded).
	Rejecting int
	// Spread holds, per agent, how long after the first agent rejected it
	// rejected too. P50, P99 and Max summarise it.
	Spread        []time.Duration
	P50, P99, Max time.Duration
	// Proposers counts the agents that proposed the open record themselves.
	Proposers int
	// Generations counts distinct (generation, origin) of the open records
	// the agents held when the last of them started rejecting: several
	// proposers may have raced (the merge picks one). Agree is how long
	// after that every agent held the same record.
	Generations int
	Agree       time.Duration
	// Packets and Bytes are what the network carried from the first failure
	// reported until every agent rejected, beyond the steady rate measured
	// just before (with healthy traffic): the cost of the transition.
	Packets, Bytes int64
	// Baseline is how many packets the steady rate accounts for meanwhile.
	Baseline int64
	// Dropped counts packets that found a receive queue full meanwhile: a
	// receiver that could not keep up (simnet's ServiceTime).
	Dropped uint64
	// Window is how long that took.
	Window time.Duration
}

// Trip runs scenario (a): k clients on agents spread over the fleet report
// successes for warm (the steady rate is measured meanwhile), then only
// failures until every agent rejects dep, or ctx ends. Time is measured by
// polling every agent's snapshot every millisecond (of the fleet's time:
// virtual time in a bubble).
func Trip(ctx context.Context, f *Fleet, dep string, k int, warm time.Duration) (TripResult, error) {
	if err := f.confirm(ctx, dep); err != nil {
		return TripResult{}, err
	}
	clients := Spread(f.Size(), k)
	stop := f.traffic(ctx, clients, []string{dep}, 10, 0)
	if !ctxtime.Sleep(ctx, warm/4) {
		stop()
		return TripResult{}, ctx.Err()
	}
	s0, t0 := f.Net().Stats(), time.Now()
	if !ctxtime.Sleep(ctx, warm) {
		stop()
		return TripResult{}, ctx.Err()
	}
	s1, t1 := f.Net().Stats(), time.Now()
	stop()
	rate := perSecond(s1.Sub(s0), t1.Sub(t0))

	stop = f.traffic(ctx, clients, []string{dep}, 0, 10)
	defer stop()
	s2, t2 := f.Net().Stats(), time.Now()
	first, err := f.watchRejects(ctx, dep, allAgents(f.Size()))
	s3, t3 := f.Net().Stats(), time.Now()
	var r TripResult
	var earliest, latest time.Time
	for _, at := range first {
		if at.IsZero() {
			continue
		}
		r.Rejecting++
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	for _, at := range first {
		if !at.IsZero() {
			r.Spread = append(r.Spread, at.Sub(earliest))
		}
	}
	r.P50, r.P99, r.Max = percentile(r.Spread, 0.50), percentile(r.Spread, 0.99), percentile(r.Spread, 1)
	r.Window = latest.Sub(earliest)
	d := s3.Sub(s2)
	secs := t3.Sub(t2).Seconds()
	r.Baseline = int64(rate.msgs * secs)
	r.Packets = int64(d.Messages()) - r.Baseline
	r.Bytes = int64(d.Bytes()) - int64(rate.bytes*secs)
	r.Dropped = d.PacketsDropped
	r.Proposers, r.Generations = f.proposers(dep)
	if err != nil {
		return r, err
	}
	agreeStart := time.Now()
	if err := f.WaitAll(ctx, "every agent holds agent-000's record of "+dep, func(i int) error {
		r0, _ := f.Record(0, dep)
		if ri, _ := f.Record(i, dep); !sharedstate.SameRecord(r0, ri) {
			return fmt.Errorf("%s holds another record than %s", Name(i), Name(0))
		}
		return nil
	}); err != nil {
		return r, err
	}
	r.Agree = time.Since(agreeStart)
	return r, nil
}

type rate struct{ msgs, bytes float64 }

func perSecond(s simnet.Stats, d time.Duration) rate {
	return rate{float64(s.Messages()) / d.Seconds(), float64(s.Bytes()) / d.Seconds()}
}

func allAgents(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// proposers counts the agents that proposed an open record of dep and the
// distinct open records the agents hold.
func (f *Fleet) proposers(dep string) (proposers, records int) {
	seen := map[[2]string]bool{}
	for i := range f.Size() {
		if f.Proposed(i, dep, "open") > 0 {
			proposers++
		}
		if r, ok := f.Record(i, dep); ok && r.State == sharedstate.Open {
			seen[[2]string{fmt.Sprint(r.Generation), r.Origin}] = true
		}
	}
	return proposers, len(seen)
}

// watchRejects polls the agents in idx every millisecond and returns when
// each of them first held dep's fleet breaker open and rejected (zero: not
// before ctx ended). (An agent whose own clients fail may reject earlier on its own
// node-local breaker: that is not the fleet's decision spreading.)
func (f *Fleet) watchRejects(ctx context.Context, dep string, idx []int) (first []time.Time, err error) {
	first = make([]time.Time, f.Size())
	left := len(idx)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for left > 0 {
		for _, i := range idx {
			if first[i].IsZero() && f.FleetOpen(i, dep) && f.Rejects(i, dep) {
				first[i] = time.Now()
				left--
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return first, fmt.Errorf("scale: %d of %d agents do not reject %s: %w", left, len(idx), dep, ctx.Err())
		case <-t.C:
		}
	}
	return first, nil
}

// SteadyResult is what scenarios (b) and (c) measured.
type SteadyResult struct {
	// Deps is how many dependencies had traffic; PerAgent how many of them
	// each agent's clients called.
	Deps, PerAgent int
	// BytesPerAgent and MsgsPerAgent are what the network carried per agent
	// per second (sent: packets and stream bytes).
	BytesPerAgent, MsgsPerAgent float64
	// PushPull is the largest push-pull state (encoded frame) of any agent,
	// in bytes; PushPullErr says why one did not encode (over the frame
	// limit; "": every one did).
	PushPull    int
	PushPullErr string
	// HeapPerAgent is the growth of the process's live heap (after a GC)
	// since before the fleet started, divided by N: agents, their share of
	// the simulated network, and the simulated clients.
	HeapPerAgent uint64
	// Known is the smallest number of these dependencies any agent tracks.
	Known int
	// Traffic is what the network carried while measuring (its packets
	// split into memberlist's own messages and user messages: rows and
	// records), over Seconds.
	Traffic simnet.Stats
	Seconds float64
	// CPUPerPacket is the process's CPU time while measuring divided by
	// the packets the agents received meanwhile: what one agent spends on
	// everything (its ticks, sending, its clients' reports, receiving) per
	// packet it receives, the simulated network's own work included.
	// The agents share one memo of signature checks (each signed batch is
	// checked once in the process); ChecksSavedPerPacket is how many
	// checks per packet received the memo answered meanwhile, which real
	// hosts each compute.
	CPUPerPacket         time.Duration
	ChecksSavedPerPacket float64
}

// OwnShare returns the share of the packet bytes sent that were
// memberlist's own (probes, acks, membership gossip, headers) rather than
// rows and records; 0 when nothing was sent.
func (r SteadyResult) OwnShare() float64 {
	if r.Traffic.PacketBytesSent == 0 {
		return 0
	}
	return float64(r.Traffic.OwnBytes()) / float64(r.Traffic.PacketBytesSent)
}

// Steady runs scenarios (b) and (c): deps dependencies named prefix-0…,
// each agent's clients calling perAgent of them (agent i calls i×perAgent,
// i×perAgent+1, … modulo deps, so every dependency has about
// N×perAgent/deps callers when N×perAgent ≥ deps;
// agent 0 calls first of them when first > 0: the push-pull worst case),
// all healthy, for warm and then for measure, during which the network's
// counters are read. The push-pull size is the largest of any agent.
func Steady(ctx context.Context, f *Fleet, prefix string, deps, perAgent, first int, warm, measure time.Duration) (SteadyResult, error) {
	perAgent = min(perAgent, deps)
	r := SteadyResult{Deps: deps, PerAgent: perAgent}
	var stops []func()
	for i := range f.Size() {
		var mine []string
		calls := perAgent
		if i == 0 && first > 0 {
			calls = min(first, deps)
		}
		for j := range calls {
			mine = append(mine, fmt.Sprintf("%s-%d", prefix, (i*perAgent+j)%deps))
		}
		stops = append(stops, f.traffic(ctx, []int{i}, mine, 10, 0))
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	if !ctxtime.Sleep(ctx, warm) {
		return r, ctx.Err()
	}
	s0, t0, c0, m0 := f.Net().Stats(), time.Now(), cpuTime(), f.ChecksSaved()
	if !ctxtime.Sleep(ctx, measure) {
		return r, ctx.Err()
	}
	s1, t1, c1, m1 := f.Net().Stats(), time.Now(), cpuTime(), f.ChecksSaved()
	d := s1.Sub(s0)
	if d.PacketsReceived > 0 {
		r.CPUPerPacket = (c1 - c0) / time.Duration(d.PacketsReceived)
		r.ChecksSavedPerPacket = float64(m1-m0) / float64(d.PacketsReceived)
	}
	rt := perSecond(d, t1.Sub(t0))
	r.BytesPerAgent, r.MsgsPerAgent = rt.bytes/float64(f.Size()), rt.msgs/float64(f.Size())
	r.Traffic, r.Seconds = d, t1.Sub(t0).Seconds()

	r.Known = -1
	for i := range f.Size() {
		a := f.Agent(i)
		st := f.PushPullState(i)
		frame, err := protocol.Codec{}.EncodePushPull(st)
		if err != nil && r.PushPullErr == "" {
			r.PushPullErr = fmt.Sprintf("%s: %v", Name(i), err)
		}
		r.PushPull = max(r.PushPull, len(frame))
		known := 0
		for _, d := range a.Engine().Dependencies() {
			if len(d) > len(prefix) && d[:len(prefix)+1] == prefix+"-" {
				known++
			}
		}
		if r.Known < 0 || known < r.Known {
			r.Known = known
		}
	}
	if h := heap(); h > f.heapBase {
		r.HeapPerAgent = (h - f.heapBase) / uint64(f.Size())
	}
	return r, nil
}

// cpuTime returns the process's user and system CPU time (every thread).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// PartitionResult is what scenario (e) measured.
type PartitionResult struct {
	// SickSideRejecting and HealthySideRejecting count the agents of each
	// half that rejected dep at the end of the split: all of the sick half
	// and none of the healthy half when each decided on its own evidence.
	SickSideRejecting, HealthySideRejecting int
	// HealthySideEverOpen counts healthy-half agents that held the fleet
	// breaker open at any poll during the split.
	HealthySideEverOpen int
	// Converged reports whether every agent counted N agents, held the same
	// record of dep and had the rows of every client within HealWait of
	// the heal; Converge is how long that took.
	Converged bool
	Converge  time.Duration
	// Members, Rows and Records count the agents that counted N agents,
	// had every client's row and held agent 0's record when the wait
	// ended without convergence.
	Members, Rows, Records int
}

// Partition runs scenario (e): k clients in each half report healthy
// traffic; the network splits the fleet into halves for split, during which
// the first half's clients report only failures; then the network heals.
func Partition(ctx context.Context, f *Fleet, dep string, k int, split, healWait time.Duration) (PartitionResult, error) {
	var r PartitionResult
	n := f.Size()
	half := n / 2
	sick := Spread(half, k)
	var healthy []int
	for _, i := range Spread(n-half, k) {
		healthy = append(healthy, half+i)
	}
	if err := f.confirm(ctx, dep); err != nil {
		return r, err
	}
	stopHealthy := f.traffic(ctx, healthy, []string{dep}, 10, 0)
	defer stopHealthy()
	stopSick := f.traffic(ctx, sick, []string{dep}, 10, 0)
	if !ctxtime.Sleep(ctx, time.Second) {
		stopSick()
		return r, ctx.Err()
	}
	var left, right []string
	for i := range n {
		if i < half {
			left = append(left, f.Addr(i))
		} else {
			right = append(right, f.Addr(i))
		}
	}
	if err := f.Net().Partition(map[string][]string{"sick": left, "healthy": right}); err != nil {
		stopSick()
		return r, err
	}
	stopSick()
	stopSick = f.traffic(ctx, sick, []string{dep}, 0, 10)
	defer stopSick()
	clients := append(append([]int(nil), sick...), healthy...)
	stopProgress := f.traceConvergence("split", 5*time.Second, dep, clients, time.Now())

	everOpen := make([]bool, n)
	end := time.Now().Add(split)
	t := time.NewTicker(10 * time.Millisecond)
	for time.Now().Before(end) {
		for i := half; i < n; i++ {
			if f.FleetOpen(i, dep) {
				everOpen[i] = true
			}
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return r, ctx.Err()
		case <-t.C:
		}
	}
	t.Stop()
	stopProgress()
	for i := range n {
		switch {
		case i < half && f.Rejects(i, dep):
			r.SickSideRejecting++
		case i >= half && f.Rejects(i, dep):
			r.HealthySideRejecting++
		}
		if everOpen[i] {
			r.HealthySideEverOpen++
		}
	}

	f.Net().Heal()
	healed := time.Now()
	stopProgress = f.traceConvergence("heal", 500*time.Millisecond, dep, clients, healed)
	defer stopProgress()
	wctx, cancel := context.WithTimeout(ctx, healWait)
	err := f.waitConverged(wctx, dep, clients)
	cancel()
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if err == nil {
		r.Converged, r.Converge = true, time.Since(healed)
	} else {
		r.Members, r.Rows, r.Records, _ = f.convergence(dep, clients)
	}
	return r, nil
}

// traceConvergence traces, every interval until stopped and labelled by
// what happened at since, how many agents count N agents, have every
// client's row and hold agent 0's record, and what the network carried
// meanwhile (nothing without a Trace).
func (f *Fleet) traceConvergence(label string, interval time.Duration, dep string, clients []int, since time.Time) (stop func()) {
	if f.cfg.Trace == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		prev := f.Net().Stats()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			members, rows, same, missing := f.convergence(dep, clients)
			s := f.Net().Stats()
			d := s.Sub(prev)
			prev = s
			f.cfg.Trace("%s +%v: %d of %d agents count them all (%d members missing in all), %d have every client's row, %d hold agent 0's record; packets %d (%d with user messages, %d user and %d memberlist messages: %d membership, %d of them suspect, %d dead), %d dropped, %d streams, %d dials timed out",
				label, time.Since(since).Round(time.Millisecond), members, f.Size(), missing, rows, same,
				d.PacketsSent, d.PacketsWithUser, d.UserMessages, d.OwnMessages, d.MembershipMessages, d.SuspectMessages, d.DeadMessages,
				d.PacketsDropped, d.StreamsOpened, d.StreamsTimedOut)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// convergence counts the agents that count N agents, have every client's
// row of dep and hold agent 0's record of it, and the members missing from
// the agents' counts in all.
func (f *Fleet) convergence(dep string, clients []int) (members, rows, same, missing int) {
	r0, _ := f.Record(0, dep)
	names := clientNames(clients)
	for i := range f.Size() {
		a := f.Agent(i)
		if a == nil {
			continue
		}
		if c := a.Gossip().NumAgents(); c == f.Size() {
			members++
		} else {
			missing += f.Size() - c
		}
		if rowsFrom(a, dep, names) == len(names) {
			rows++
		}
		if r, _ := f.Record(i, dep); sharedstate.SameRecord(r0, r) {
			same++
		}
	}
	return members, rows, same, missing
}

// clientNames is the set of the node names of the agents in clients.
func clientNames(clients []int) map[string]bool {
	names := make(map[string]bool, len(clients))
	for _, c := range clients {
		names[Name(c)] = true
	}
	return names
}

// rowsFrom counts the clients (by node name) whose row of dep agent a holds.
func rowsFrom(a *agent.Agent, dep string, names map[string]bool) int {
	n := 0
	for _, r := range a.Engine().Rows(dep) {
		if names[r.Node] {
			n++
		}
	}
	return n
}

// waitConverged waits until every agent counts N agents, holds the same
// fleet record of dep as agent 0 and has a live row of dep from every
// client agent.
func (f *Fleet) waitConverged(ctx context.Context, dep string, clients []int) error {
	names := clientNames(clients)
	return f.WaitAll(ctx, "the fleet converged on "+dep, func(i int) error {
		a := f.Agent(i)
		r0, ok0 := f.Record(0, dep)
		r, ok := f.Record(i, dep)
		if a.Gossip().NumAgents() != f.Size() || rowsFrom(a, dep, names) != len(names) || ok0 != ok || !sharedstate.SameRecord(r0, r) {
			return fmt.Errorf("%s: %d agents (want %d), rows from %d of the %d clients, record generation %d %v from %s",
				Name(i), a.Gossip().NumAgents(), f.Size(), rowsFrom(a, dep, names), len(names), r.Generation, r.State, r.Origin)
		}
		return nil
	})
}
