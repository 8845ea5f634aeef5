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
		if !found || e.at.Sub(t).Abs() < best.at.Sub(t).Abs() {
			best, found = e, true
		}
	}
	return best, found
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
		busy := quiet <= settled || !r.allClosed()
		if busy {
			r.traffic(st, steps[known[i]], r.realOpen[i])
		}
		r.clock.Advance(st.dur)
		if busy {
			r.tick()
		}
		if in.Policy.Breaker.Scope == sharedstate.ScopeNode {
			r.sampleLocal(st)
		}
		if !st.at.Before(in.From) && st.at.Before(in.To) {
			res.Totals.add(r.did)
			res.Steps = append(res.Steps, Step{At: st.at, Dur: st.dur, Slot: st.s, Did: r.did})
		}
	}
	res.Transitions = transitionsOf(r.recs)
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
