package sharedstate

import (
	"fmt"
	"testing"
)

func benchEngine(b *testing.B, clock Clock) *Engine {
	e := newTestEngine(b, "node-0000", "z1", clock, nil)
	if err := e.Record(dep, FirstAttempt, Success); err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkDecideClosed(b *testing.B) {
	e := benchEngine(b, SystemClock{})
	b.ReportAllocs()
	for b.Loop() {
		if e.Decide(dep, FirstAttempt) != allow {
			b.Fatal("not allowed")
		}
	}
}

func BenchmarkDecideClosedParallel(b *testing.B) {
	e := benchEngine(b, SystemClock{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if e.Decide(dep, FirstAttempt) != allow {
				b.Fatal("not allowed")
			}
		}
	})
}

// BenchmarkSnapshotDecideFirst is clientlib's hot path: one atomic load and DecideFirst.
func BenchmarkSnapshotDecideFirst(b *testing.B) {
	e := benchEngine(b, SystemClock{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if e.Snapshot(dep).DecideFirst() != allow {
				b.Fatal("not allowed")
			}
		}
	})
}

func BenchmarkRecord(b *testing.B) {
	for _, c := range []struct {
		name  string
		clock Clock
	}{{"system-clock", SystemClock{}}, {"manual-clock", NewManualClock(t0)}} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b, c.clock)
			b.ReportAllocs()
			for b.Loop() {
				if err := e.Record(dep, FirstAttempt, Failure); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	e := benchEngine(b, SystemClock{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Record(dep, FirstAttempt, Success); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// fleetOf1000 is an engine holding rows from 999 other nodes for dep.
func fleetOf1000(b *testing.B) (*Engine, []NodeWindow) {
	e := benchEngine(b, NewManualClock(t0))
	rows := make([]NodeWindow, 999)
	for i := range rows {
		rows[i] = NodeWindow{Node: fmt.Sprintf("node-%04d", i+1), Zone: fmt.Sprintf("z%d", i%3), Dependency: dep, Seq: 1,
			Counts:     Counts{FirstAttempts: 100, Retries: 3, Successes: 95, Failures: 5, SlowCalls: 1},
			Cumulative: Cumulative{Counts: Counts{FirstAttempts: 10_000, Retries: 300, Successes: 9_500, Failures: 500, SlowCalls: 100}, Since: 1, At: 2}}
		e.ApplyRow(rows[i])
	}
	return e, rows
}

func BenchmarkFleetTotals1000Nodes(b *testing.B) {
	e, _ := fleetOf1000(b)
	b.ReportAllocs()
	for b.Loop() {
		if f, _ := e.Fleet(dep); f.FleetNodes != 1000 {
			b.Fatalf("%d nodes", f.FleetNodes)
		}
	}
}

// BenchmarkApplyRowBatch1000 merges a batch of 1,000 rows (one per node, each
// newer than the one held): the work of one gossip round at a 1,000-node fleet.
func BenchmarkApplyRowBatch1000(b *testing.B) {
	e, rows := fleetOf1000(b)
	rows = append(rows, NodeWindow{Node: "node-1000", Dependency: dep, Seq: 1, Counts: Counts{Successes: 1}})
	b.ReportAllocs()
	for b.Loop() {
		for i := range rows {
			rows[i].Seq++
			if !e.ApplyRow(rows[i]) {
				b.Fatal("row not new")
			}
		}
	}
}

// BenchmarkTick1000Nodes evaluates the trip rule over 1,000 nodes' rows.
func BenchmarkTick1000Nodes(b *testing.B) {
	e, _ := fleetOf1000(b)
	b.ReportAllocs()
	for b.Loop() {
		if len(e.Tick()) != 0 {
			b.Fatal("tripped")
		}
	}
}

func BenchmarkAcquireRetry1000Nodes(b *testing.B) {
	e, _ := fleetOf1000(b)
	b.ReportAllocs()
	for b.Loop() {
		e.AcquireRetry(dep)
	}
}

func BenchmarkMergeRecords(b *testing.B) {
	x := BreakerRecord{Dependency: dep, Generation: 7, State: Open, Since: t0, Origin: "node-0001"}
	y := x
	y.Origin = "node-0002"
	b.ReportAllocs()
	for b.Loop() {
		x = Merge(x, y)
	}
}

func BenchmarkWindowTotals(b *testing.B) {
	w := NewWindow(10e9)
	w.Add(t0, Counts{FirstAttempts: 1})
	b.ReportAllocs()
	for b.Loop() {
		w.Totals(t0)
	}
}

// BenchmarkTick1000Deps500Rows is one agent tick at scale: 1,000
// dependencies, each with rows from 500 nodes (this node's own traffic
// included), healthy traffic (5% failures) so that nothing trips.
func BenchmarkTick1000Deps500Rows(b *testing.B) { benchTickAtScale(b, 0) }

// BenchmarkTick1000Deps500RowsStrayFailures is the same with one node in 50
// whose newest sub-bucket holds a lone failure: enough to make the fast path
// pool every dependency's suffixes at every tick, still without a trip.
func BenchmarkTick1000Deps500RowsStrayFailures(b *testing.B) { benchTickAtScale(b, 50) }

func benchTickAtScale(b *testing.B, strayEvery int) {
	clock := NewManualClock(t0)
	e := newTestEngine(b, "node-0000", "z0", clock, func(c *EngineConfig) { c.MaxDependencies = 1000 })
	for d := range 1000 {
		name := fmt.Sprintf("dep-%04d", d)
		for n := 1; n < 500; n++ {
			r := benchRow(n, name)
			if strayEvery > 0 && n%strayEvery == 0 {
				for k := range r.Recent {
					r.Recent[k].Failures++
				}
			}
			e.ApplyRow(r)
		}
		if err := e.AddCounts(name, Counts{FirstAttempts: 20, Successes: 19, Failures: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(e.Tick()) != 0 {
			b.Fatal("tripped")
		}
	}
}

// benchRow is node n's row for dep with healthy traffic (2 requests/s, 5%
// failures), its freshest suffixes included.
func benchRow(n int, dep string) NodeWindow {
	return NodeWindow{Node: fmt.Sprintf("node-%04d", n), Zone: fmt.Sprintf("z%d", n%3), Dependency: dep, Seq: 1,
		Counts: Counts{FirstAttempts: 20, Successes: 19, Failures: 1},
		Recent: Recent{{Successes: 1}, {Successes: 1}, {Successes: 1}, {Successes: 2}, {Successes: 3}, {Successes: 6}, {Successes: 12, Failures: 1}}}
}
