package sharedstate

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// The overload simulation (issue 14): a dependency that answers at most
// shapeCapacity requests per second (served in shapeLatency) and fails the
// rest at once, behind a fleet of shapeNodes nodes offering twice that. Four
// configurations are compared on goodput, load on the dependency and
// rejections. Everything runs in one goroutine on a fake clock from a seeded
// random source, so each run is identical; the table it produces is the one
// in clientlib/README.md (TestShapeSimulationTableInREADME).

const (
	shapeNodes    = 10
	shapeCapacity = 1000 // requests per second the dependency serves
	shapeOffered  = 2 * shapeCapacity
	shapeLatency  = 50 * time.Millisecond // of a served request; refusals answer at once
	shapeStep     = 10 * time.Millisecond
	shapeTick     = 100 * time.Millisecond
	shapeDuration = 60 * time.Second
	shapeWarmup   = 20 * time.Second // measured: [warmup, duration)
	shapeK        = 1.5
	shapeDep      = "overloaded-api"
)

type shapeConfig struct {
	name        string
	breaker     bool // decide through the breaker (else every request is sent)
	classic     bool // the classic trip rule (breaker.confidence 0): the point estimate
	noRamp      bool // breaker.rampDuration 0: full traffic at once after each close
	throttle    bool
	maxInFlight int
}

var shapeConfigs = []shapeConfig{
	{name: "none"},
	{name: "breaker only", breaker: true},
	{name: "breaker only, classic trip rule", breaker: true, classic: true},
	{name: "breaker only, classic trip rule, no ramp", breaker: true, classic: true, noRamp: true},
	{name: "throttle", breaker: true, throttle: true},
	// The limit is what the dependency can hold (capacity × latency) plus
	// 10%, as an operator would set it.
	{name: "throttle + concurrency limit", breaker: true, throttle: true,
		maxInFlight: int(1.1 * shapeCapacity * shapeLatency.Seconds())},
}

type shapeResult struct {
	goodput   float64 // successes per second
	load      float64 // attempts that reached the dependency, per second
	rejection float64 // refused / offered
	maxP      float64 // highest throttle probability published
}

type shapeDone struct {
	at    time.Time
	node  int
	ok    bool
	probe bool
}

func runShapeSim(t *testing.T, cfg shapeConfig, seed uint64) shapeResult {
	t.Helper()
	clock := NewManualClock(t0)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	pol := policyWith(func(p *Policy) {
		p.Throttle = ThrottlePolicy{Enabled: cfg.throttle, K: shapeK, MinRequests: 20}
		p.Concurrency.MaxInFlight = cfg.maxInFlight
		if cfg.classic {
			p.Breaker.Confidence = 0
		}
		if cfg.noRamp {
			p.Breaker.RampDuration = 0
		}
	})
	nodes := make([]*Engine, shapeNodes)
	for i := range nodes {
		e, err := NewEngine(EngineConfig{Node: fmt.Sprintf("node-%02d", i), Clock: clock,
			Rand: rand.New(rand.NewPCG(seed, uint64(i))), DefaultPolicy: pol})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AddCounts(shapeDep, Counts{}); err != nil {
			t.Fatal(err)
		}
		nodes[i] = e
	}
	var (
		pending                          []shapeDone
		inFlight                         = make([]int, shapeNodes)
		offered, sent, succeeded, refuse int
		res                              shapeResult
	)
	perStep := shapeOffered * int(shapeStep) / int(time.Second) // fleet arrivals per step
	capStep := shapeCapacity * int(shapeStep) / int(time.Second)
	order := make([]int, perStep)
	for i := range order {
		order[i] = i % shapeNodes
	}
	for step := 0; step < int(shapeDuration/shapeStep); step++ {
		now := clock.Now()
		measured := now.Sub(t0) >= shapeWarmup
		// Completions due now.
		rest := pending[:0]
		for _, d := range pending {
			if d.at.After(now) {
				rest = append(rest, d)
				continue
			}
			e := nodes[d.node]
			o := Failure
			if d.ok {
				o = Success
			}
			kind := FirstAttempt
			if d.probe {
				kind = Probe
			}
			if err := e.Record(shapeDep, kind, o); err != nil {
				t.Fatal(err)
			}
			if d.probe {
				e.ProbeResult(shapeDep, d.ok)
			}
			inFlight[d.node]--
		}
		pending = rest
		// Arrivals, in a random node order.
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		served := 0
		for _, n := range order {
			e := nodes[n]
			if measured {
				offered++
			}
			probe := false
			if cfg.breaker {
				s := e.Snapshot(shapeDep)
				dec := s.DecideFirstAt(rng.Float64())
				if dec.Verdict == AllowProbe {
					dec = e.AcquireProbe(shapeDep)
					probe = dec.Verdict == AllowProbe
				} else if dec.Verdict == Allow && s.ConcurrencyLimit > 0 && inFlight[n] >= s.ConcurrencyLimit {
					dec = Decision{Verdict: Reject}
				}
				res.maxP = max(res.maxP, s.ThrottleProbability)
				if !dec.Allowed() {
					if dec.Verdict == Reject && (probe || dec.Reason == ReasonHalfOpenNoPermit || dec.Reason == ReasonOpen ||
						dec.Reason == ReasonThrottled || dec.Reason == ReasonRamp || dec.Reason == ReasonNone) {
						if err := e.Record(shapeDep, FirstAttempt, Rejected); err != nil {
							t.Fatal(err)
						}
					}
					if measured {
						refuse++
					}
					continue
				}
			}
			if measured {
				sent++
			}
			inFlight[n]++
			if served < capStep {
				served++
				pending = append(pending, shapeDone{at: now.Add(shapeLatency), node: n, ok: true, probe: probe})
				if measured {
					succeeded++
				}
			} else {
				pending = append(pending, shapeDone{at: now, node: n, ok: false, probe: probe})
			}
		}
		// Refusals answer at once: complete them in this step.
		rest = pending[:0]
		for _, d := range pending {
			if d.ok || d.at.After(now) {
				rest = append(rest, d)
				continue
			}
			kind := FirstAttempt
			if d.probe {
				kind = Probe
			}
			if err := nodes[d.node].Record(shapeDep, kind, Failure); err != nil {
				t.Fatal(err)
			}
			if d.probe {
				nodes[d.node].ProbeResult(shapeDep, false)
			}
			inFlight[d.node]--
		}
		pending = rest
		for i, e := range nodes {
			if err := e.SetInFlight(shapeDep, uint64(inFlight[i])); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(shapeStep)
		if (step+1)%int(shapeTick/shapeStep) == 0 {
			shapeGossip(nodes)
		}
	}
	secs := (shapeDuration - shapeWarmup).Seconds()
	res.goodput = float64(succeeded) / secs
	res.load = float64(sent) / secs
	res.rejection = float64(refuse) / float64(offered)
	return res
}

// shapeGossip is one agent tick everywhere, with lossless instant gossip.
func shapeGossip(nodes []*Engine) {
	var rows []NodeWindow
	var recs []BreakerRecord
	for _, e := range nodes {
		recs = append(recs, e.Tick()...)
		rows = append(rows, e.RowsToSend()...)
	}
	for _, e := range nodes {
		for _, r := range recs {
			e.ApplyRecord(r)
		}
		for _, r := range rows {
			if r.Node != e.Node() {
				e.ApplyRow(r)
			}
		}
	}
}

func shapeTable(results []shapeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| configuration | goodput (successes/s) | load on the dependency (attempts/s) | rejected by Fusebox |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- |\n")
	for i, r := range results {
		fmt.Fprintf(&b, "| %s | %.0f (%.0f%% of C) | %.0f (%.2f × C) | %.0f%% |\n", shapeConfigs[i].name,
			r.goodput, 100*r.goodput/shapeCapacity, r.load, r.load/shapeCapacity, 100*r.rejection)
	}
	return b.String()
}

func runShapeSims(t *testing.T) []shapeResult {
	var out []shapeResult
	for _, cfg := range shapeConfigs {
		out = append(out, runShapeSim(t, cfg, 14))
	}
	return out
}

func TestShapeSimulation(t *testing.T) {
	rs := runShapeSims(t)
	t.Logf("C = %d/s, offered %d/s from %d nodes, K = %.1f\n%s", shapeCapacity, shapeOffered, shapeNodes, shapeK, shapeTable(rs))
	none, brk, classic, noRamp, thr, conc := rs[0], rs[1], rs[2], rs[3], rs[4], rs[5]
	c := float64(shapeCapacity)
	// Without anything the dependency takes everything offered.
	if none.load < 1.9*c {
		t.Errorf("none: load %.0f/s, want the offered ~%d/s", none.load, shapeOffered)
	}
	// The throttle keeps goodput near capacity and the load within (K+0.2)·C.
	for _, tc := range []struct {
		name string
		r    shapeResult
	}{{"throttle", thr}, {"throttle + concurrency", conc}} {
		if tc.r.goodput < 0.9*c {
			t.Errorf("%s: goodput %.0f/s, want ≥ 90%% of C = %.0f", tc.name, tc.r.goodput, 0.9*c)
		}
		if tc.r.load > (shapeK+0.2)*c {
			t.Errorf("%s: load %.0f/s, want ≤ (K+0.2)·C = %.0f", tc.name, tc.r.load, (shapeK+0.2)*c)
		}
		if tc.r.maxP <= 0 {
			t.Errorf("%s: the throttle never refused", tc.name)
		}
	}
	// The concurrency limit (C × latency in flight) brings the load down to
	// close to what the dependency serves.
	if conc.load > 1.3*c || conc.load >= thr.load {
		t.Errorf("throttle + concurrency: load %.0f/s, want ≤ 1.3·C and below the throttle's %.0f", conc.load, thr.load)
	}
	// The breaker alone cannot do both: a binary breaker mostly stays closed
	// (the dependency drowns) or flaps open and closed (goodput collapses).
	for _, r := range []struct {
		name string
		r    shapeResult
	}{{"breaker only", brk}, {"breaker only, classic rule", classic}, {"breaker only, classic rule, no ramp", noRamp}} {
		if r.r.goodput >= 0.9*c && r.r.load <= (shapeK+0.2)*c {
			t.Errorf("%s: goodput %.0f/s and load %.0f/s: it met the throttle's bounds on its own", r.name, r.r.goodput, r.r.load)
		}
	}
	// Without the ramp, the classic rule's breaker flaps: each close lets
	// the whole offered load in at once, and goodput collapses. The ramp
	// after each close keeps the goodput.
	if noRamp.goodput >= 0.5*c {
		t.Errorf("breaker only, classic rule, no ramp: goodput %.0f/s, want the collapse of a flapping breaker (< 50%% of C)", noRamp.goodput)
	}
	if classic.goodput < 0.9*c {
		t.Errorf("breaker only, classic rule, with the ramp: goodput %.0f/s, want ≥ 90%% of C = %.0f", classic.goodput, 0.9*c)
	}
}

// TestShapeSimulationTableInREADME keeps clientlib/README.md's table equal
// to what the simulation produces (it is deterministic).
func TestShapeSimulationTableInREADME(t *testing.T) {
	readme, err := os.ReadFile("../clientlib/README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := shapeTable(runShapeSims(t))
	if !strings.Contains(string(readme), want) {
		t.Fatalf("clientlib/README.md lacks the simulation's table; it is:\n%s", want)
	}
}
