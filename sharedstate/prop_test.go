package sharedstate

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// message is one gossip delivery: a row or a record.
type message struct {
	row *NodeWindow
	rec *BreakerRecord
}

func (m message) deliver(e *Engine) {
	if m.row != nil {
		e.ApplyRow(*m.row)
	} else {
		e.ApplyRecord(*m.rec)
	}
}

// TestReplicasConverge: two replicas that receive the same rows and records
// in any order, with duplicates, and with drops followed by redelivery, end in
// the same state.
func TestReplicasConverge(t *testing.T) {
	deps := []string{"d1", "d2"}
	rapid.Check(t, func(t *rapid.T) {
		var msgs []message
		// Rows: a node is the only writer of its rows, so (node, dependency,
		// seq) determines the content.
		nRows := rapid.IntRange(0, 25).Draw(t, "rows")
		for i := range nRows {
			node := rapid.SampledFrom([]string{"n1", "n2", "n3", "n4"}).Draw(t, fmt.Sprint("node", i))
			d := rapid.SampledFrom(deps).Draw(t, fmt.Sprint("rowdep", i))
			seq := rapid.Uint64Range(1, 6).Draw(t, fmt.Sprint("seq", i))
			h := probeScore(d, seq, 0, node)
			r := NodeWindow{Node: node, Zone: "z" + node[1:], Dependency: d, Seq: seq, Generation: h % 3, LocalOpen: h%5 == 0,
				Counts: Counts{FirstAttempts: h % 50, Failures: (h >> 8) % 50, Successes: (h >> 16) % 50, Rejected: (h >> 24) % 7}}
			msgs = append(msgs, message{row: &r})
		}
		nRecs := rapid.IntRange(0, 15).Draw(t, "records")
		prev := genRecord().Draw(t, "rec-seed")
		for i := range nRecs {
			r := genNear(t, prev, fmt.Sprint("rec", i))
			prev = r
			r.Dependency = rapid.SampledFrom(deps).Draw(t, fmt.Sprint("recdep", i))
			msgs = append(msgs, message{rec: &r})
		}

		// Replica A: one order, with duplicates.
		orderA := rapid.Permutation(msgs).Draw(t, "orderA")
		dupA := rapid.SliceOfN(rapid.IntRange(0, max(len(msgs)-1, 0)), 0, len(msgs)).Draw(t, "dupA")
		// Replica B: another order; some deliveries lost, then redelivered at the end.
		orderB := rapid.Permutation(msgs).Draw(t, "orderB")
		lost := rapid.SliceOfN(rapid.Bool(), len(orderB), len(orderB)).Draw(t, "lost")

		clock := NewManualClock(t0.Add(7 * time.Second))
		a := newTestEngine(t, "replica", "z1", clock, nil)
		b := newTestEngine(t, "replica", "z1", clock, nil)
		for _, m := range orderA {
			m.deliver(a)
		}
		if len(msgs) > 0 {
			for _, i := range dupA {
				orderA[i].deliver(a)
			}
		}
		var redeliver []message
		for i, m := range orderB {
			if lost[i] {
				redeliver = append(redeliver, m)
				continue
			}
			m.deliver(b)
			if i%3 == 0 {
				m.deliver(b) // duplicate
			}
		}
		for _, m := range slices.Backward(redeliver) {
			m.deliver(b)
		}

		ra, rb := a.Records(), b.Records()
		if len(ra) != len(rb) {
			t.Fatalf("records differ: %+v vs %+v", ra, rb)
		}
		for i := range ra {
			if !SameRecord(ra[i], rb[i]) {
				t.Fatalf("records differ: %+v vs %+v", ra[i], rb[i])
			}
		}
		if !slices.Equal(a.Dependencies(), b.Dependencies()) {
			t.Fatalf("dependencies differ")
		}
		for _, d := range a.Dependencies() {
			if !slices.Equal(a.Rows(d), b.Rows(d)) {
				t.Fatalf("rows of %s differ:\n%+v\n%+v", d, a.Rows(d), b.Rows(d))
			}
			sa, sb := *a.Snapshot(d), *b.Snapshot(d)
			sa.Version, sb.Version = 0, 0
			if sa.State != sb.State || sa.Generation != sb.Generation || sa.ProbePermit != sb.ProbePermit ||
				sa.OpenCount != sb.OpenCount || !sa.Since.Equal(sb.Since) {
				t.Fatalf("snapshots of %s differ:\n%+v\n%+v", d, sa, sb)
			}
			fa, _ := a.Fleet(d)
			fb, _ := b.Fleet(d)
			if fa != fb {
				t.Fatalf("fleet totals of %s differ", d)
			}
		}
	})
}

// budgetFleet is a fleet of engines at a total outage with the breaker forced
// closed, so that only the retry budget limits retries.
type budgetFleet struct {
	nodes            []*Engine
	first, retries   int
	ratio, floorSecs float64
}

func newBudgetFleet(t *rapid.T) *budgetFleet {
	n, ratio, floor := drawBudget(t)
	clock := NewManualClock(t0)
	f := &budgetFleet{ratio: ratio, floorSecs: floor}
	for i := range n {
		e := newTestEngine(t, fmt.Sprintf("n%d", i), "", clock, func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Retry.Budget = BudgetPolicy{Ratio: ratio, MinRetriesPerSecond: floor} })
		})
		if err := e.SetOverride(dep, &Override{State: ForcedClosed}); err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, e)
	}
	return f
}

// op runs one caller action at node i: a failed first attempt, or a retry if
// the budget admits it.
func (f *budgetFleet) op(t *rapid.T, i int, retry bool) {
	e := f.nodes[i]
	if !retry {
		if err := e.Record(dep, FirstAttempt, Failure); err != nil {
			t.Fatal(err)
		}
		f.first++
		return
	}
	if e.AcquireRetry(dep).Allowed() {
		f.retries++
		if err := e.Record(dep, Retry, Failure); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *budgetFleet) bound(floors int) float64 {
	window := DefaultPolicy().Breaker.Window.Std().Seconds()
	return f.ratio*float64(f.first) + float64(floors)*f.floorSecs*window + float64(len(f.nodes))
}

func drawBudget(t *rapid.T) (n int, ratio, floor float64) {
	return rapid.IntRange(1, 5).Draw(t, "nodes"),
		rapid.SampledFrom([]float64{0, 0.1, 0.5, 1}).Draw(t, "ratio"),
		rapid.SampledFrom([]float64{0, 0.3, 1, 3}).Draw(t, "minRetriesPerSecond")
}

// TestRetryBudgetBound: at a total outage, over any interleaving of the
// nodes' first attempts and retries, with each node's row reaching the others
// before their next decision (gossip faster than decisions), admitted retries
// stay within ratio × firstAttempts + minRetriesPerSecond × window, plus one
// per node for rounding — after every step, not only at the end.
func TestRetryBudgetBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newBudgetFleet(t)
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for s := range steps {
			i := rapid.IntRange(0, len(f.nodes)-1).Draw(t, fmt.Sprint("node", s))
			f.op(t, i, rapid.Bool().Draw(t, fmt.Sprint("retry", s)))
			gossip(f.nodes[i], f.nodes...)
			if float64(f.retries) > f.bound(1) {
				t.Fatalf("step %d: %d retries for %d first attempts exceed the budget %.1f",
					s, f.retries, f.first, f.bound(1))
			}
		}
	})
}

// TestRetryBudgetBoundUnderArbitraryGossip: with gossip delayed, dropped or
// never delivered, the ratio part still holds exactly (each node's share of
// ratio × firstAttempts is ratio × its own first attempts, whatever it knows),
// and the floor degrades at worst to one floor per node.
func TestRetryBudgetBoundUnderArbitraryGossip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newBudgetFleet(t)
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for s := range steps {
			i := rapid.IntRange(0, len(f.nodes)-1).Draw(t, fmt.Sprint("node", s))
			switch rapid.IntRange(0, 2).Draw(t, fmt.Sprint("action", s)) {
			case 0:
				f.op(t, i, false)
			case 1:
				f.op(t, i, true)
			case 2: // deliver i's current row to a random subset of the others
				rows := f.nodes[i].RowsToSend()
				for j, e := range f.nodes {
					if j != i && rapid.Bool().Draw(t, fmt.Sprint("deliver", s, j)) {
						for _, r := range rows {
							e.ApplyRow(r)
						}
					}
				}
			}
			if float64(f.retries) > f.bound(len(f.nodes)) {
				t.Fatalf("step %d: %d retries exceed %.1f", s, f.retries, f.bound(len(f.nodes)))
			}
			if f.floorSecs == 0 && float64(f.retries) > f.bound(0) {
				t.Fatalf("step %d: %d retries exceed ratio × first attempts + nodes = %.1f", s, f.retries, f.bound(0))
			}
		}
	})
}
