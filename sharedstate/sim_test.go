package sharedstate

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fleet simulation: 50 engines on one fake clock, exchanging rows and
// records through an in-memory network with delay and loss, with callers
// that decide first attempts from snapshots (as clientlib does) and ask the
// engine for retries and probes (as the agent's API does). Everything runs in
// one goroutine from a seeded random source, so each run is identical.

const (
	simNodes    = 50
	simStep     = 10 * time.Millisecond
	simTick     = 100 * time.Millisecond // the agent's gossip tick
	simPushPull = time.Second
	simFanout   = 3 // peers a node re-broadcasts a record new to it to
	simLoss     = 0.05
	simMinDelay = 5 * time.Millisecond
	simMaxDelay = 50 * time.Millisecond
	simProbeRTT = 300 * time.Millisecond // slow enough for probes of different holders to overlap
)

type simMsg struct {
	at  time.Time
	seq uint64
	to  int
	msg message
}

type simQueue []simMsg

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simMsg)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

type simProbe struct {
	node int
	at   time.Time
	o    Outcome
}

// simOptions are the knobs of the fleet simulation beyond its defaults.
type simOptions struct {
	nodes int // default simNodes
	// gossip: rows travel as memberlist broadcasts do (a queue per node,
	// simGossipNodes random peers every simGossipInterval, at most
	// simRowsPerPacket rows per packet, fewest transmits first, each row
	// sent at most RetransmitMult × ⌈log10(N+1)⌉ times, receivers
	// re-broadcasting rows new to them) instead of straight to every node.
	gossip bool
	// flush: callers' outcomes reach the engine in batches every flush (as
	// clientlib's count deltas do) instead of one by one at once.
	flush time.Duration
	// isolated: nothing travels between nodes (per-instance breakers).
	isolated bool
	// backoff: a retry waits the policy's full-jitter backoff before it
	// asks for the budget (as clientlib does) instead of following at once.
	backoff bool
}

type simRetry struct {
	node, attempt int
	at            time.Time
}

// The memberlist model of simOptions.gossip: the agent's defaults.
const (
	simGossipInterval = 200 * time.Millisecond
	simGossipNodes    = 3
	simRowsPerPacket  = 14 // rows of ~90 bytes in a 1,400-byte packet
	simRetransmitMult = 4
)

type simQueued struct {
	row       NodeWindow
	transmits int
}

type sim struct {
	t      *testing.T
	opts   simOptions
	clock  *ManualClock
	rng    *rand.Rand
	nodes  []*Engine
	queue  simQueue
	seq    uint64
	policy Policy
	start  time.Time

	rate    float64                          // requests per node per second
	healthy func(node int, t time.Time) bool // does a call from node succeed at t?
	// slow, when set: does a call from node at t take at least
	// slowCallDuration? Its outcome is then Slow or SlowFailure.
	slow func(node int, t time.Time) bool

	// accounting
	calls, firstCalls, retryCalls, probeCalls int
	callsByNode                               []int
	rejectedByNode                            []int
	firstPerSec, retriesPerSec                map[int64]int // by whole second since start
	probes                                    []simProbe
	probesInFlight, maxProbesInFlight         int
	proposals                                 []BreakerRecord // distinct proposals
	proposed                                  map[string]bool
	firstOpenAt                               time.Time
	callsBeforeFirstOpen                      int
	onTick                                    func(s *sim)

	queues     []map[string]*simQueued // gossip: per node, rows to broadcast by origin
	pending    []Counts                // flush: per node, outcomes not yet reported
	phase      []time.Duration         // per node, offset of its gossip rounds and flushes
	retries    []simRetry              // backoff: retries waiting, by time
	urgentSent int                     // urgent rows sent straight to every node
}

func newSim(t *testing.T, seed uint64, mutate func(p *Policy)) *sim {
	return newSimWith(t, simOptions{}, seed, mutate)
}

func newSimWith(t *testing.T, opts simOptions, seed uint64, mutate func(p *Policy)) *sim {
	if opts.nodes == 0 {
		opts.nodes = simNodes
	}
	n := opts.nodes
	s := &sim{t: t, opts: opts, clock: NewManualClock(t0), rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), start: t0,
		callsByNode: make([]int, n), rejectedByNode: make([]int, n),
		firstPerSec: map[int64]int{}, retriesPerSec: map[int64]int{}, proposed: map[string]bool{},
		pending: make([]Counts, n)}
	s.policy = *policyWith(mutate)
	for range n {
		s.queues = append(s.queues, map[string]*simQueued{})
		s.phase = append(s.phase, time.Duration(s.rng.Int64N(int64(simGossipInterval/simStep)))*simStep)
	}
	for i := range n {
		e, err := NewEngine(EngineConfig{Node: fmt.Sprintf("node-%02d", i), Zone: fmt.Sprintf("z%d", i%3),
			Clock: s.clock, Rand: rand.New(rand.NewPCG(seed, uint64(i))), DefaultPolicy: &s.policy})
		if err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, e)
	}
	return s
}

func (s *sim) now() time.Time { return s.clock.Now() }

func (s *sim) send(to int, m message) {
	if s.opts.isolated || s.rng.Float64() < simLoss {
		return
	}
	delay := simMinDelay + time.Duration(s.rng.Int64N(int64(simMaxDelay-simMinDelay)))
	s.seq++
	heap.Push(&s.queue, simMsg{at: s.now().Add(delay), seq: s.seq, to: to, msg: m})
}

func (s *sim) sendAll(from int, m message) {
	for j := range s.nodes {
		if j != from {
			s.send(j, m)
		}
	}
}

func (s *sim) sendSome(from int, m message, n int) {
	for range n {
		if j := s.rng.IntN(len(s.nodes)); j != from {
			s.send(j, m)
		}
	}
}

// call makes one attempt from node and returns its outcome.
func (s *sim) call(node int, kind AttemptKind) Outcome {
	s.calls++
	s.callsByNode[node]++
	sec := int64(s.now().Sub(s.start) / time.Second)
	switch kind {
	case FirstAttempt:
		s.firstCalls++
		s.firstPerSec[sec]++
	case Retry:
		s.retryCalls++
		s.retriesPerSec[sec]++
	case Probe:
		s.probeCalls++
	}
	ok := s.healthy(node, s.now())
	if s.slow != nil && s.slow(node, s.now()) {
		if ok {
			return Slow
		}
		return SlowFailure
	}
	return outcome(ok)
}

// report counts one finished attempt of node i's callers, at once or at
// the next flush.
func (s *sim) report(i int, kind AttemptKind, o Outcome) {
	if s.opts.flush == 0 || kind == Probe {
		if err := s.nodes[i].Record(dep, kind, o); err != nil {
			s.t.Fatal(err)
		}
		return
	}
	c := &s.pending[i]
	switch {
	case o == Rejected:
		c.Rejected++
		return
	case kind == FirstAttempt:
		c.FirstAttempts++
	}
	if o == Success || o == Slow {
		c.Successes++
	} else {
		c.Failures++
	}
	if o == Slow || o == SlowFailure {
		c.SlowCalls++
	}
}

func failed(o Outcome) bool { return o == Failure || o == SlowFailure }

func outcome(ok bool) Outcome {
	if ok {
		return Success
	}
	return Failure
}

// request is one caller request at node i: a first attempt decided from the
// snapshot, then retries while the budget allows.
func (s *sim) request(i int) {
	e := s.nodes[i]
	snap := e.Snapshot(dep)
	d := snap.DecideFirst()
	if snap != nil && snap.ThrottleProbability > 0 { // the ramp after a close (or throttling): draw only then
		d = snap.DecideFirstAt(s.rng.Float64())
	}
	switch d.Verdict {
	case Reject:
		s.rejectedByNode[i]++
		s.report(i, FirstAttempt, Rejected)
		return
	case AllowProbe:
		switch p := e.AcquireProbe(dep); p.Verdict {
		case AllowProbe:
			o := s.call(i, Probe)
			s.probes = append(s.probes, simProbe{node: i, at: s.now().Add(simProbeRTT), o: o})
			if s.probesInFlight++; s.probesInFlight > s.maxProbesInFlight {
				s.maxProbesInFlight = s.probesInFlight
			}
			return
		case Reject:
			s.rejectedByNode[i]++
			return // AcquireProbe counted the rejection
		}
		// Allow: the breaker closed meanwhile; a normal call, counted by AcquireProbe.
		if err := e.Record(dep, Probe, s.call(i, FirstAttempt)); err != nil {
			s.t.Fatal(err)
		}
		return
	}
	o := s.call(i, FirstAttempt)
	s.report(i, FirstAttempt, o)
	if s.opts.backoff {
		s.scheduleRetry(i, 2, !failed(o))
		return
	}
	for attempt := 2; failed(o) && attempt <= s.policy.Retry.MaxAttempts; attempt++ {
		if !e.AcquireRetry(dep).Allowed() {
			return
		}
		o = s.call(i, Retry)
		s.report(i, Retry, o)
	}
}

// scheduleRetry schedules attempt number attempt of a request at node i
// after the last one failed (ok false), after a full-jitter backoff.
func (s *sim) scheduleRetry(i, attempt int, ok bool) {
	if ok || attempt > s.policy.Retry.MaxAttempts {
		return
	}
	b := s.policy.Retry.Backoff
	wait := min(b.Max.Std(), b.Base.Std()<<(attempt-2))
	at := s.now().Add(time.Duration(s.rng.Int64N(int64(wait) + 1)))
	k, _ := slices.BinarySearchFunc(s.retries, at, func(r simRetry, at time.Time) int { return r.at.Compare(at) })
	s.retries = slices.Insert(s.retries, k, simRetry{node: i, attempt: attempt, at: at})
}

func (s *sim) propose(from int, recs []BreakerRecord) {
	for _, r := range recs {
		s.sendAll(from, message{rec: &r}) // SendBestEffort to every live member
		key := fmt.Sprint(r.Generation, r.State, r.Origin)
		if s.proposed[key] {
			continue
		}
		s.proposed[key] = true
		if r.State == Open && s.firstOpenAt.IsZero() {
			s.firstOpenAt = s.now()
			s.callsBeforeFirstOpen = s.calls
		}
		s.proposals = append(s.proposals, r)
	}
}

func (s *sim) step() {
	now := s.clock.Advance(simStep)
	for len(s.queue) > 0 && !s.queue[0].at.After(now) {
		m := heap.Pop(&s.queue).(simMsg)
		e := s.nodes[m.to]
		if m.msg.row != nil {
			if e.ApplyRow(*m.msg.row) && s.opts.gossip {
				s.enqueue(m.to, *m.msg.row) // epidemic re-broadcast
			}
		} else if e.ApplyRecord(*m.msg.rec) {
			s.sendSome(m.to, m.msg, simFanout) // epidemic re-broadcast
		}
	}
	for len(s.probes) > 0 && !s.probes[0].at.After(now) {
		p := s.probes[0]
		s.probes = s.probes[1:]
		s.probesInFlight--
		e := s.nodes[p.node]
		if err := e.Record(dep, Probe, p.o); err != nil {
			s.t.Fatal(err)
		}
		if rec, ok := e.ProbeOutcome(dep, p.o); ok {
			s.propose(p.node, []BreakerRecord{rec}) // at once; the next Tick returns it again for gossip
		}
	}
	for len(s.retries) > 0 && !s.retries[0].at.After(now) {
		r := s.retries[0]
		s.retries = s.retries[1:]
		if s.nodes[r.node].AcquireRetry(dep).Allowed() {
			o := s.call(r.node, Retry)
			s.report(r.node, Retry, o)
			s.scheduleRetry(r.node, r.attempt+1, !failed(o))
		}
	}
	for i := range s.nodes {
		if s.rng.Float64() < s.rate*simStep.Seconds() {
			s.request(i)
		}
	}
	elapsed := now.Sub(s.start)
	for i, e := range s.nodes {
		if s.opts.flush > 0 && (elapsed+s.phase[i])%s.opts.flush == 0 && s.pending[i] != (Counts{}) {
			if err := e.AddCounts(dep, s.pending[i]); err != nil {
				s.t.Fatal(err)
			}
			s.pending[i] = Counts{}
		}
		if s.opts.gossip && (elapsed+s.phase[i])%simGossipInterval == 0 {
			s.gossipRound(i)
		}
	}
	if elapsed%simTick == 0 {
		for i, e := range s.nodes {
			s.propose(i, e.Tick())
			for _, r := range e.RowsToSend() {
				if s.opts.gossip {
					s.enqueue(i, r)
				} else {
					s.sendAll(i, message{row: &r})
				}
			}
			for _, r := range e.UrgentRows() {
				if s.opts.gossip {
					s.urgentSent++
					s.sendAll(i, message{row: &r})
				}
			}
		}
		if s.onTick != nil {
			s.onTick(s)
		}
	}
	if elapsed%simPushPull == 0 {
		for i, e := range s.nodes {
			j := s.rng.IntN(len(s.nodes))
			if j == i {
				continue
			}
			for _, r := range e.Records() {
				s.send(j, message{rec: &r})
			}
			for _, r := range e.LocalRows() {
				s.send(j, message{row: &r})
			}
		}
	}
}

// enqueue queues a row for node i's gossip rounds; it replaces a queued
// older row of the same origin.
func (s *sim) enqueue(i int, r NodeWindow) {
	s.queues[i][r.Node] = &simQueued{row: r}
}

// gossipRound is one memberlist gossip round of node i: a packet of the
// queued rows with the fewest transmits to each of simGossipNodes random
// peers.
func (s *sim) gossipRound(i int) {
	q := s.queues[i]
	if len(q) == 0 || len(s.nodes) < 2 {
		return
	}
	limit := simRetransmitMult * int(math.Ceil(math.Log10(float64(len(s.nodes)+1))))
	for range simGossipNodes {
		to := s.rng.IntN(len(s.nodes) - 1)
		if to >= i {
			to++
		}
		items := slices.Collect(maps.Values(q))
		slices.SortFunc(items, func(a, b *simQueued) int {
			return cmp.Or(cmp.Compare(a.transmits, b.transmits), strings.Compare(a.row.Node, b.row.Node))
		})
		for _, it := range items[:min(len(items), simRowsPerPacket)] {
			r := it.row
			s.send(to, message{row: &r})
			if it.transmits++; it.transmits >= limit {
				delete(q, it.row.Node)
			}
		}
	}
}

func (s *sim) runUntil(d time.Duration) {
	for s.now().Before(s.start.Add(d)) {
		s.step()
	}
}

// snap returns node i's snapshot; a node that has not heard of the
// dependency yet reads as an all-closed zero snapshot.
func (s *sim) snap(i int) Snapshot {
	if p := s.nodes[i].Snapshot(dep); p != nil {
		return *p
	}
	return Snapshot{}
}

func (s *sim) states() map[BreakerState]int {
	out := map[BreakerState]int{}
	for i := range s.nodes {
		out[s.snap(i).State]++
	}
	return out
}

// (a) The fleet opens after about minimumRequests failed calls fleet-wide,
// not 50× that.
func TestSimFleetDetectsDeadDependency(t *testing.T) {
	s := newSim(t, 1, func(p *Policy) { p.Retry.MaxAttempts = 1 }) // detection alone; retries are (d)
	s.rate = 1                                                     // 50 requests/s fleet-wide
	s.healthy = func(int, time.Time) bool { return false }
	var allOpenAt time.Time
	callsWhenAllOpen := 0
	s.onTick = func(s *sim) {
		if allOpenAt.IsZero() && s.states()[Open] == simNodes {
			allOpenAt, callsWhenAllOpen = s.now(), s.calls
		}
	}
	s.runUntil(s.policy.Breaker.FleetOpenDurationFor(1)) // the trip comes after 0.5 s at least: no probing yet
	if s.firstOpenAt.IsZero() || allOpenAt.IsZero() {
		t.Fatalf("fleet did not open: first %v, all %v, states %v", s.firstOpenAt, allOpenAt, s.states())
	}
	minReq := s.policy.Breaker.MinimumRequests
	propagation := callsWhenAllOpen - s.callsBeforeFirstOpen
	t.Logf("first open proposal after %v and %d calls; all %d nodes open after %v more and %d more calls; %d calls in all (local breakers would allow up to %d)",
		s.firstOpenAt.Sub(s.start), s.callsBeforeFirstOpen, simNodes, allOpenAt.Sub(s.firstOpenAt), propagation, s.calls, simNodes*minReq)
	if s.callsBeforeFirstOpen < minReq {
		t.Errorf("opened after %d calls, before minimumRequests %d", s.callsBeforeFirstOpen, minReq)
	}
	if s.calls >= 3*minReq+propagation {
		t.Errorf("%d calls to the dead dependency, want < 3 × minimumRequests + %d made during propagation", s.calls, propagation)
	}
	if s.calls != callsWhenAllOpen {
		t.Errorf("%d calls after every node knew the breaker was open", s.calls-callsWhenAllOpen)
	}
	gens := map[uint64]bool{}
	for i := range s.nodes {
		gens[s.snap(i).Generation] = true
	}
	if len(gens) != 1 {
		t.Errorf("nodes disagree on the generation: %v", gens)
	}
}

// (b) One failing node opens only its node-local breaker; the other 49 stay
// closed and see its local open in its row.
func TestSimOneSickNodeOpensOnlyItself(t *testing.T) {
	const sick = 7
	s := newSim(t, 2, nil)
	s.rate = 5
	sickFrom := 3 * time.Second
	s.healthy = func(node int, at time.Time) bool { return node != sick || at.Before(s.start.Add(sickFrom)) }
	sickOpened := false
	s.onTick = func(s *sim) {
		for i := range s.nodes {
			snap := s.snap(i)
			if snap.State != Closed || snap.Generation != 0 {
				t.Fatalf("%v: node %d sees the fleet breaker %v at generation %d", s.now().Sub(s.start), i, snap.State, snap.Generation)
			}
			if i != sick && snap.LocalState != Closed {
				t.Fatalf("%v: healthy node %d opened its local breaker", s.now().Sub(s.start), i)
			}
			if i == sick && snap.LocalState != Closed {
				sickOpened = true
			}
		}
	}
	s.runUntil(30 * time.Second)
	if !sickOpened || s.snap(sick).LocalState == Closed {
		t.Fatalf("the sick node's local breaker is %v (opened at some point: %v)", s.snap(sick).LocalState, sickOpened)
	}
	if len(s.proposals) != 0 {
		t.Fatalf("fleet records proposed: %+v", s.proposals)
	}
	for i := range s.nodes {
		if i != sick && s.rejectedByNode[i] != 0 {
			t.Errorf("healthy node %d had %d calls rejected", i, s.rejectedByNode[i])
		}
	}
	seen := 0
	for i, e := range s.nodes {
		for _, r := range e.Rows(dep) {
			if r.Node == s.nodes[sick].Node() && r.LocalOpen && i != sick {
				seen++
			}
		}
	}
	t.Logf("sick node: %d calls, %d rejected; %d of %d peers see its local open", s.callsByNode[sick], s.rejectedByNode[sick], seen, simNodes-1)
	if seen < simNodes-5 {
		t.Errorf("only %d peers see the sick node's local open", seen)
	}
}

// (c) Half-open sends at most halfOpenProbes concurrent probes fleet-wide,
// and the fleet closes once the dependency recovers. Ten successes to close
// keep the first holder probing until the others' turns come (each holder
// probes from its turn in the round on), so that probes overlap.
func TestSimHalfOpenProbesFleetWide(t *testing.T) {
	s := newSim(t, 3, func(p *Policy) { p.Breaker.ProbeSuccessThreshold = 10 })
	s.rate = 5
	down, up := 5*time.Second, 40*time.Second
	s.healthy = func(_ int, at time.Time) bool {
		d := at.Sub(s.start)
		return d < down || d >= up
	}
	s.runUntil(70 * time.Second)
	k := s.policy.Breaker.HalfOpenProbes
	opens, closes := 0, 0
	for _, p := range s.proposals {
		if p.State == Open {
			opens++
		} else {
			closes++
		}
	}
	t.Logf("%d probes, at most %d concurrent; %d open and %d close proposals; states at the end %v",
		s.probeCalls, s.maxProbesInFlight, opens, closes, s.states())
	if s.probeCalls == 0 {
		t.Fatal("no probes were sent")
	}
	if s.maxProbesInFlight > k {
		t.Errorf("%d concurrent probes fleet-wide, want at most halfOpenProbes = %d", s.maxProbesInFlight, k)
	}
	if s.maxProbesInFlight < 2 {
		t.Errorf("probes never overlapped (max %d in flight): the test does not exercise the limit", s.maxProbesInFlight)
	}
	if st := s.states(); st[Closed] != simNodes {
		t.Errorf("fleet did not close after recovery: %v", st)
	}
	last := s.snap(0)
	if last.Generation < 3 {
		t.Errorf("generation %d: expected a trip, at least one reopen and a close", last.Generation)
	}
}

// (d) At a total outage the fleet's retries stay within the budget. The
// breaker is forced closed so that only the budget limits retries.
func TestSimRetryBudgetAtTotalOutage(t *testing.T) {
	s := newSim(t, 4, nil)
	for _, e := range s.nodes {
		if err := e.SetOverride(dep, &Override{State: ForcedClosed, Reason: "budget test"}); err != nil {
			t.Fatal(err)
		}
	}
	s.rate = 5
	outage := 10 * time.Second
	s.healthy = func(_ int, at time.Time) bool { return at.Sub(s.start) < outage }
	s.runUntil(40 * time.Second)

	b := s.policy.Retry.Budget
	w := s.policy.Breaker.Window.Std()
	wSecs := int64(w / time.Second)
	floor := b.MinRetriesPerSecond * w.Seconds()
	sum := func(m map[int64]int, from, to int64) (n int) {
		for sec := from; sec < to; sec++ {
			n += m[sec]
		}
		return n
	}
	worst := 0.0
	for end := wSecs; end <= 40; end++ {
		retries := sum(s.retriesPerSec, end-wSecs, end)
		// The engine's window spans 9 to 10 one-second buckets, so a retry
		// admitted in [end-10s, end) was judged against first attempts from
		// as early as end-11s.
		first := sum(s.firstPerSec, end-wSecs-1, end)
		limit := b.Ratio*float64(first) + floor + simNodes
		if float64(retries) > limit {
			t.Errorf("window ending at %ds: %d retries, budget %.0f (ratio × %d first attempts + floor %.0f + %d nodes)",
				end, retries, limit, first, floor, simNodes)
		}
		worst = max(worst, float64(retries)/limit)
	}
	outFirst := sum(s.firstPerSec, 10, 40)
	outRetries := sum(s.retriesPerSec, 10, 40)
	t.Logf("outage: %d first attempts, %d retries (%.2fx load; without a budget up to %dx); worst window used %.0f%% of its budget",
		outFirst, outRetries, float64(outFirst+outRetries)/float64(outFirst), s.policy.Retry.MaxAttempts, 100*worst)
	if outRetries == 0 {
		t.Fatal("no retries at all: the budget is not being used")
	}
	if float64(outRetries) > 0.2*float64(outFirst) {
		t.Errorf("%d retries for %d first attempts: amplification not contained", outRetries, outFirst)
	}
}
