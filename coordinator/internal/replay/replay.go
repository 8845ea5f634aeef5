package replay

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// MaxVirtualNodes is how many engines a replay runs at most.
const MaxVirtualNodes = 16

// MaxSteps bounds the slots one replay runs (a week of 1 s slots).
const MaxSteps = 7 * 24 * 3600

// ErrTooLong is returned for a replay of more than MaxSteps slots.
var ErrTooLong = errors.New("replay: too long")

// Input is one replay.
type Input struct {
	Dependency string
	// Policy is the effective policy replayed (required, valid).
	Policy sharedstate.Policy
	// Fleet is the policy the fleet ran under: the fleet's half-open states
	// are derived with it (optional, default Policy).
	Fleet *sharedstate.Policy
	// Segments are the history's slots, oldest first; they may begin before
	// From (a warm-up: counted into the engines, not into the totals).
	Segments []history.Segment
	// Records are the history's records (breaker records, overrides) over
	// the segments, and the last of each kind before them.
	Records []history.Record
	// From and To bound what the result reports.
	From, To time.Time
}

// Totals are what a replay (or the fleet) did over a range.
type Totals struct {
	// Demand is the first attempts the callers asked for.
	Demand uint64
	// Refused is the first attempts refused (open, half-open without a
	// permit, forced open, throttled); RefusedWouldFail those of them that
	// would have failed (by the outcome model).
	Refused          uint64
	RefusedWouldFail uint64
	// FailedLetThrough is the attempts made that failed: first attempts,
	// probes and retries.
	FailedLetThrough uint64
	// RetriesAllowed and RetriesRefused are the retries the budget (and the
	// breaker) admitted and refused.
	RetriesAllowed uint64
	RetriesRefused uint64
	// Probes is the probes sent while half-open.
	Probes uint64
	// ShadowRefused is the first attempts a shadow-mode policy would have
	// refused and let through.
	ShadowRefused uint64
	// Opens is how many times the breaker opened (trips and failed probes).
	Opens int
}

func (t *Totals) add(o Totals) {
	t.Demand += o.Demand
	t.Refused += o.Refused
	t.RefusedWouldFail += o.RefusedWouldFail
	t.FailedLetThrough += o.FailedLetThrough
	t.RetriesAllowed += o.RetriesAllowed
	t.RetriesRefused += o.RetriesRefused
	t.Probes += o.Probes
	t.ShadowRefused += o.ShadowRefused
	t.Opens += o.Opens
}

// Result is what a policy would have done.
type Result struct {
	// States is the breaker's timeline over [From, To), overrides laid over it.
	States []Interval
	// Transitions are the records the virtual fleet took, in order.
	Transitions []Transition
	// Totals over [From, To).
	Totals Totals
	// Steps are the slots replayed within [From, To), with what the policy
	// did in each: the base of Compare.
	Steps []Step
}

// Step is one slot of a replay.
type Step struct {
	At   time.Time
	Dur  time.Duration
	Slot history.Slot
	Did  Totals
}

// step is one slot to replay.
type step struct {
	at  time.Time
	dur time.Duration
	s   history.Slot
}

func flatten(segs []history.Segment) []step {
	var out []step
	var end time.Time
	for _, seg := range segs {
		for i, s := range seg.Slots {
			at := seg.From.Add(time.Duration(i) * seg.Step)
			if !end.IsZero() && at.Before(end) {
				continue // overlapping segments: the first wins
			}
			out = append(out, step{at: at, dur: seg.Step, s: s})
		}
		if to := seg.To(); to.After(end) {
			end = to
		}
	}
	return out
}

// diffuser deals out a rate over calls without randomness: each call adds
// the rate, and a whole one is a hit.
type diffuser struct{ acc float64 }

func (d *diffuser) hit(rate float64) bool {
	d.acc += rate
	if d.acc >= 1-1e-9 {
		d.acc--
		return true
	}
	return false
}

// take returns how many of n calls are hits at rate.
func (d *diffuser) take(n uint64, rate float64) uint64 {
	if n == 0 || rate <= 0 {
		return 0
	}
	if rate >= 1 {
		return n
	}
	x := d.acc + rate*float64(n)
	k := math.Floor(x + 1e-9)
	d.acc = x - k
	return uint64(k)
}

type vnode struct {
	e                  *sharedstate.Engine
	fail, slow, refuse diffuser
	share              uint64 // this step's calls
	failRate, slowRate float64
}

type runner struct {
	in      Input
	dep     string
	pol     sharedstate.Policy
	clock   *sharedstate.ManualClock
	nodes   []*vnode
	bitNode [history.NodeBits]int                // node bit -> virtual node
	recs    map[uint64]sharedstate.BreakerRecord // fleet-wide records proposed, by generation
	// local, for scope node: per step, whether any node's own breaker was
	// not closed (and why).
	local    []Interval
	did      Totals // the current step's
	shadow   bool
	retry    bool   // the fleet\'s callers retried
	realOpen []bool // per step: the fleet's breaker was not closed
	// evidence is what the fleet's own breaker learned of the dependency:
	// failing when it opened (a trip or a failed probe), answering when
	// it closed (its probes succeeded).
	evidence []evidence
}

type evidence struct {
	at     time.Time
	failed bool
}

func probeEvidence(ts []Transition) []evidence {
	out := make([]evidence, 0, len(ts))
	for _, t := range ts {
		out = append(out, evidence{at: t.At, failed: t.State == sharedstate.Open})
	}
	slices.SortFunc(out, func(a, b evidence) int { return a.at.Compare(b.at) })
	return out
}

// nearestEvidence is the fleet's breaker's evidence nearest to t.
func (r *runner) nearestEvidence(t time.Time) (evidence, bool) {
	i, _ := slices.BinarySearchFunc(r.evidence, t, func(e evidence, t time.Time) int { return e.at.Compare(t) })
	var best evidence
	found := false
	for _, j := range []int{i - 1, i} {
		if j < 0 || j >= len(r.evidence) {
			continue
		}
		e := r.evidence[j]
		if !found || absDur(e.at.Sub(t)) < absDur(best.at.Sub(t)) {
			best, found = e, true
		}
	}
	return best, found
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Run replays in.Segments under in.Policy.
func Run(in Input) (*Result, error) {
	if err := in.Policy.Validate(); err != nil {
		return nil, err
	}
	steps := flatten(in.Segments)
	if len(steps) > MaxSteps {
		return nil, fmt.Errorf("%w: %d slots, at most %d", ErrTooLong, len(steps), MaxSteps)
	}
	fleetPol := in.Policy
	if in.Fleet != nil {
		fleetPol = *in.Fleet
	}
	r := &runner{in: in, dep: in.Dependency, pol: in.Policy, recs: map[uint64]sharedstate.BreakerRecord{},
		shadow: in.Policy.Breaker.Mode == sharedstate.ModeShadow}
	res := &Result{}
	if len(steps) == 0 {
		res.States = timeline(nil, overrides(in.Records), in.Policy.Breaker, in.From, in.To)
		return res, nil
	}
	reality := Reality(in.Records, fleetPol.Breaker, steps[0].at, steps[len(steps)-1].at.Add(steps[len(steps)-1].dur))
	r.realOpen = make([]bool, len(steps))
	for i, st := range steps {
		r.realOpen[i] = stateAt(reality, st.at) != StateClosed && stateAt(reality, st.at) != StateForcedClosed
	}
	if err := r.start(steps); err != nil {
		return nil, err
	}
	// Callers that never retried (no retry, and no rejection while the
	// fleet was closed, which would be the budget refusing one) do not
	// retry in the replay either.
	for i, st := range steps {
		if st.s.Retries > 0 || (!r.realOpen[i] && st.s.Rejected > 0) {
			r.retry = true
			break
		}
	}
	known := nearestOutcomes(steps)
	r.evidence = probeEvidence(breakerTransitions(in.Records))
	ovs := overrides(in.Records)
	nextOv := 0
	// Quiet stretches (nothing counted for two windows, every breaker
	// closed) cost no ticks: time alone changes nothing then.
	var quiet time.Duration
	settled := 2 * in.Policy.Breaker.Window.Std()
	for i, st := range steps {
		for nextOv < len(ovs) && !ovs[nextOv].At.After(st.at) {
			r.setOverride(ovs[nextOv])
			nextOv++
			quiet = 0
		}
		r.did = Totals{}
		if st.s.IsZero() {
			quiet += st.dur
		} else {
			quiet = 0
		}
		if quiet > settled && r.allClosed() {
			r.clock.Advance(st.dur)
			if in.Policy.Breaker.Scope == sharedstate.ScopeNode {
				r.sampleLocal(st)
			}
			if !st.at.Before(in.From) && st.at.Before(in.To) {
				res.Steps = append(res.Steps, Step{At: st.at, Dur: st.dur, Slot: st.s})
			}
			continue
		}
		r.traffic(st, steps[known[i]], r.realOpen[i])
		r.clock.Advance(st.dur)
		r.tick()
		if in.Policy.Breaker.Scope == sharedstate.ScopeNode {
			r.sampleLocal(st)
		}
		if !st.at.Before(in.From) && st.at.Before(in.To) {
			res.Totals.add(r.did)
			res.Steps = append(res.Steps, Step{At: st.at, Dur: st.dur, Slot: st.s, Did: r.did})
		}
	}
	res.Transitions = r.transitions()
	for _, t := range res.Transitions {
		if t.State == sharedstate.Open && !t.At.Before(in.From) && t.At.Before(in.To) {
			res.Totals.Opens++
		}
	}
	if in.Policy.Breaker.Scope == sharedstate.ScopeNode {
		res.States = clip(r.local, in.From, in.To)
		for i, iv := range res.States {
			if iv.State == StateOpen && (i == 0 || res.States[i-1].State == StateClosed) && !iv.From.Before(in.From) {
				res.Totals.Opens++
			}
		}
	} else {
		res.States = timeline(res.Transitions, ovs, in.Policy.Breaker, in.From, in.To)
	}
	return res, nil
}

// start builds the virtual fleet: one node per node bit seen in the
// history, at most MaxVirtualNodes (bits beyond share nodes).
func (r *runner) start(steps []step) error {
	var seen uint64
	for _, st := range steps {
		seen |= st.s.ActiveNodes
	}
	n := bits.OnesCount64(seen)
	if n == 0 {
		n = 1
	}
	n = min(n, MaxVirtualNodes)
	k := 0
	for b := range history.NodeBits {
		if seen&(1<<b) != 0 {
			r.bitNode[b] = k % n
			k++
		} else {
			r.bitNode[b] = b % n
		}
	}
	r.clock = sharedstate.NewManualClock(steps[0].at)
	h := fnv.New64a()
	_, _ = h.Write([]byte(r.dep))
	seed := h.Sum64()
	def := r.pol
	def.Dependency = sharedstate.DefaultPolicyName
	for i := range n {
		e, err := sharedstate.NewEngine(sharedstate.EngineConfig{
			Node: fmt.Sprintf("replay-%02d", i), Clock: r.clock, Rand: rand.New(rand.NewPCG(seed, uint64(i))),
			DefaultPolicy: &def, MaxDependencies: 4,
		})
		if err != nil {
			return err
		}
		if err := e.SetPolicy(r.dep, r.pol); err != nil {
			return err
		}
		r.nodes = append(r.nodes, &vnode{e: e})
	}
	return nil
}

// nearestOutcomes returns, per step, the nearest step with outcomes (the
// step itself when it has some; earlier on a tie).
func nearestOutcomes(steps []step) []int {
	out := make([]int, len(steps))
	last := -1
	prev := make([]int, len(steps))
	for i, st := range steps {
		if st.s.Requests() > 0 {
			last = i
		}
		prev[i] = last
	}
	next := -1
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].s.Requests() > 0 {
			next = i
		}
		p := prev[i]
		switch {
		case p == i:
			out[i] = i
		case p < 0 && next < 0:
			out[i] = i
		case p < 0:
			out[i] = next
		case next < 0:
			out[i] = p
		case steps[i].at.Sub(steps[p].at) <= steps[next].at.Sub(steps[i].at):
			out[i] = p
		default:
			out[i] = next
		}
	}
	return out
}

func (r *runner) setOverride(o override) {
	for _, n := range r.nodes {
		if o.State == sharedstate.ForcedOpen || o.State == sharedstate.ForcedClosed {
			_ = n.e.SetOverride(r.dep, &sharedstate.Override{State: o.State, Reason: o.Reason, Actor: "replay", Expires: o.Expires})
		} else {
			_ = n.e.SetOverride(r.dep, nil)
		}
	}
}

// traffic deals one step's calls out to the virtual nodes and makes them.
// ref is the step whose outcomes the calls take.
func (r *runner) traffic(st, ref step, realOpen bool) {
	s := st.s
	demand := uint64(s.FirstAttempts)
	if realOpen {
		demand += uint64(s.Rejected)
	}
	if demand == 0 {
		return
	}
	active := r.nodesOf(s.ActiveNodes)
	if len(active) == 0 {
		active = r.nodesOf(ref.s.ActiveNodes)
	}
	if len(active) == 0 {
		active = r.all()
	}
	failing := r.nodesOf(ref.s.FailingNodes)
	var pf, ps float64
	if req := ref.s.Requests(); req > 0 {
		pf = float64(ref.s.Failures) / float64(req)
		ps = min(1, float64(ref.s.SlowCalls)/float64(req))
	}
	if realOpen {
		// The fleet sent only probes: what its breaker learned of the
		// dependency, nearest in time, says more than a few calls.
		if ev, ok := r.nearestEvidence(st.at); ok {
			pf, ps, failing = 0, 0, active
			if ev.failed {
				pf = 1
			}
		}
	}
	if len(failing) == 0 {
		failing = active
	}
	// Failures on the failing nodes, at the rate that gives the step its
	// failures overall.
	boost := float64(len(active)) / float64(len(failing))
	for _, n := range r.nodes {
		n.share, n.failRate, n.slowRate = 0, 0, 0
	}
	isFailing := map[*vnode]bool{}
	for _, n := range failing {
		isFailing[n] = true
	}
	base, extra := demand/uint64(len(active)), demand%uint64(len(active))
	off := int(uint64(st.at.UnixNano()/int64(max(st.dur, 1))) % uint64(len(active)))
	for i, n := range active {
		n.share = base
		if uint64((i+len(active)-off)%len(active)) < extra {
			n.share++
		}
		if isFailing[n] {
			n.failRate, n.slowRate = min(1, pf*boost), min(1, ps*boost)
		}
	}
	r.did.Demand += demand
	for _, n := range active {
		r.calls(n, n.share)
	}
}

func (r *runner) nodesOf(mask uint64) []*vnode {
	var out []*vnode
	seen := map[int]bool{}
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		mask &^= 1 << b
		if k := r.bitNode[b]; !seen[k] {
			seen[k] = true
			out = append(out, r.nodes[k])
		}
	}
	return out
}

func (r *runner) all() []*vnode { return r.nodes }

// calls makes n first attempts at node v, each decided from its snapshot.
func (r *runner) calls(v *vnode, n uint64) {
	dep := r.dep
	e := v.e
	for n > 0 {
		snap := e.Snapshot(dep)
		d := snap.DecideFirst()
		switch {
		case d.Verdict == sharedstate.Reject:
			r.refuse(v, n)
			return
		case d.Verdict == sharedstate.AllowProbe:
			p := e.AcquireProbe(dep)
			n--
			switch p.Verdict {
			case sharedstate.Reject:
				// AcquireProbe counted the rejection; the rest of the step's
				// calls here meet the same answer.
				r.did.Refused++
				if v.refuse.hit(v.failRate) {
					r.did.RefusedWouldFail++
				}
				r.refuse(v, n)
				return
			case sharedstate.AllowProbe:
				failed := v.fail.hit(v.failRate)
				slow := v.slow.hit(v.slowRate)
				_ = e.Record(dep, sharedstate.Probe, outcome(failed, slow))
				r.did.Probes++
				if failed {
					r.did.FailedLetThrough++
				}
				if rec, ok := e.ProbeResult(dep, !failed); ok {
					r.deliver(e, rec)
				}
			default: // closed meanwhile: a normal call, counted by AcquireProbe
				failed := v.fail.hit(v.failRate)
				_ = e.Record(dep, sharedstate.Probe, outcome(failed, v.slow.hit(v.slowRate)))
				if failed {
					r.did.FailedLetThrough++
					r.retries(v, 1)
				}
			}
		default:
			if d.Reason != sharedstate.ReasonNone {
				r.did.ShadowRefused += n // shadow mode: would have refused
			}
			throttled := uint64(0)
			if p := snap.ThrottleProbability; p > 0 && !r.shadow {
				throttled = v.refuse.take(n, p)
			}
			if throttled > 0 {
				_ = e.AddCounts(dep, sharedstate.Counts{Rejected: throttled})
				r.did.Refused += throttled
				r.did.RefusedWouldFail += v.fail.take(throttled, v.failRate)
			}
			m := n - throttled
			f := v.fail.take(m, v.failRate)
			sl := v.slow.take(m, v.slowRate)
			c := sharedstate.Counts{FirstAttempts: m, Successes: m - f, Failures: f, SlowCalls: min(sl, m)}
			for _, part := range split(c) { // a step may hold more than one delta
				_ = e.AddCounts(dep, part)
			}
			r.did.FailedLetThrough += f
			r.retries(v, f)
			return
		}
	}
}

// split cuts c into equal parts of at most sharedstate.MaxDelta per count.
func split(c sharedstate.Counts) []sharedstate.Counts {
	big := max(c.FirstAttempts, c.Retries, c.Successes, c.Failures, c.SlowCalls, c.Rejected)
	k := (big + sharedstate.MaxDelta - 1) / sharedstate.MaxDelta
	if k <= 1 {
		return []sharedstate.Counts{c}
	}
	out := make([]sharedstate.Counts, 0, k)
	part := func(v uint64, i uint64) uint64 { return v*(i+1)/k - v*i/k }
	for i := range k {
		p := sharedstate.Counts{FirstAttempts: part(c.FirstAttempts, i), Retries: part(c.Retries, i),
			Successes: part(c.Successes, i), Failures: part(c.Failures, i), SlowCalls: part(c.SlowCalls, i), Rejected: part(c.Rejected, i)}
		p.SlowCalls = min(p.SlowCalls, p.Successes+p.Failures)
		out = append(out, p)
	}
	return out
}

func outcome(failed, slow bool) sharedstate.Outcome {
	switch {
	case failed && slow:
		return sharedstate.SlowFailure
	case failed:
		return sharedstate.Failure
	case slow:
		return sharedstate.Slow
	}
	return sharedstate.Success
}

// refuse counts n first attempts refused at v.
func (r *runner) refuse(v *vnode, n uint64) {
	if n == 0 {
		return
	}
	for _, part := range split(sharedstate.Counts{Rejected: n}) {
		_ = v.e.AddCounts(r.dep, part)
	}
	r.did.Refused += n
	r.did.RefusedWouldFail += v.refuse.take(n, v.failRate)
}

// retries asks for a retry of each of n failed attempts at v, and of each
// retry that fails, up to maxAttempts attempts per request. Once the budget
// refuses one, the step's other retries at v are refused too (the budget
// does not grow within a step).
func (r *runner) retries(v *vnode, n uint64) {
	if !r.retry {
		return
	}
	for attempt := 2; n > 0 && attempt <= r.pol.Retry.MaxAttempts; attempt++ {
		var failed uint64
		for k := range n {
			if !v.e.AcquireRetry(r.dep).Allowed() {
				rest := n - k - 1 // AcquireRetry counted this one
				if rest > 0 {
					_ = v.e.AddCounts(r.dep, sharedstate.Counts{Rejected: rest})
				}
				r.did.RetriesRefused += n - k
				n = 0
				break
			}
			r.did.RetriesAllowed++
			f := v.fail.hit(v.failRate)
			_ = v.e.Record(r.dep, sharedstate.Retry, outcome(f, v.slow.hit(v.slowRate)))
			if f {
				r.did.FailedLetThrough++
				failed++
			}
		}
		if n == 0 {
			return
		}
		n = failed
	}
}

// tick ticks every virtual node and exchanges what they send, at once.
func (r *runner) tick() {
	var recs []sharedstate.BreakerRecord
	var rows []sharedstate.NodeWindow
	from := map[int]int{} // index in rows -> node
	for i, n := range r.nodes {
		recs = append(recs, n.e.Tick()...)
		for _, row := range n.e.RowsToSend() {
			from[len(rows)] = i
			rows = append(rows, row)
		}
		n.e.UrgentRows()
	}
	for _, rec := range recs {
		r.note(rec)
	}
	for i, n := range r.nodes {
		for _, rec := range recs {
			_ = n.e.ApplyRecord(rec)
		}
		for k, row := range rows {
			if from[k] != i {
				_ = n.e.ApplyRow(row)
			}
		}
	}
}

// deliver takes a record one node proposed out of its Tick (a probe's
// result) to every other node at once.
func (r *runner) deliver(from *sharedstate.Engine, rec sharedstate.BreakerRecord) {
	r.note(rec)
	for _, n := range r.nodes {
		if n.e != from {
			_ = n.e.ApplyRecord(rec)
		}
	}
}

func (r *runner) note(rec sharedstate.BreakerRecord) {
	if rec.Zone != "" || rec.Dependency != r.dep {
		return
	}
	if old, ok := r.recs[rec.Generation]; ok {
		rec = sharedstate.Merge(old, rec) // several nodes proposed it: the one that wins
	}
	r.recs[rec.Generation] = rec
}

// transitions are the records noted, in generation order.
func (r *runner) transitions() []Transition {
	gens := make([]uint64, 0, len(r.recs))
	for g := range r.recs {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	out := make([]Transition, 0, len(gens))
	for _, g := range gens {
		b := r.recs[g]
		out = append(out, Transition{At: b.Since, State: b.State, Generation: b.Generation, OpenCount: b.OpenCount, Reason: b.Reason})
	}
	return out
}

// allClosed reports whether every virtual node's breakers are closed and
// no override is in force.
func (r *runner) allClosed() bool {
	for _, n := range r.nodes {
		if s := n.e.Snapshot(r.dep); s != nil && (s.State != sharedstate.Closed || s.LocalState != sharedstate.Closed || s.Override != sharedstate.OverrideNone) {
			return false
		}
	}
	return true
}

// sampleLocal notes the worst state of the virtual nodes' own breakers
// after step st (scope node).
func (r *runner) sampleLocal(st step) {
	state := StateClosed
	for _, n := range r.nodes {
		snap := n.e.Snapshot(r.dep)
		if snap == nil {
			continue
		}
		switch {
		case snap.Override == sharedstate.ForcedOpen:
			state = StateForcedOpen
		case snap.Override == sharedstate.ForcedClosed && state == StateClosed:
			state = StateForcedClosed
		case snap.State == sharedstate.Open && state != StateForcedOpen:
			state = StateOpen
		case snap.State == sharedstate.HalfOpen && (state == StateClosed || state == StateForcedClosed):
			state = StateHalfOpen
		}
	}
	from, to := st.at.Add(st.dur), st.at.Add(2*st.dur)
	if n := len(r.local); n > 0 && r.local[n-1].State == state {
		r.local[n-1].To = to
		return
	}
	r.local = append(r.local, Interval{State: state, From: from, To: to})
}

func clip(ivs []Interval, from, to time.Time) []Interval {
	var out []Interval
	for _, iv := range ivs {
		iv.From, iv.To = maxTime(iv.From, from), minTime(iv.To, to)
		if iv.From.Before(iv.To) {
			out = append(out, iv)
		}
	}
	return out
}
