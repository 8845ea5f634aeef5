package sharedstate

import (
	"sync"
	"testing"
	"time"
)

// TestCumulativeCountsEveryRecord: this node's cumulative counts hold every
// Record and AddCounts made while goroutines count and time passes (the
// window's buckets are reused under them), across replacements of the
// window (a new window length, a close under a new generation) between
// bursts, and an add that picked a bucket of the window just replaced; a
// reading never goes back.
func TestCumulativeCountsEveryRecord(t *testing.T) {
	clock := NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := newTestEngine(t, "a", "z", clock, nil)
	const dep = "ledger-api"
	const bursts, workers, each = 5, 4, 600
	var last Counts
	for burst := range bursts {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					if w == 0 && i%2 == 0 {
						_ = e.AddCounts(dep, Counts{FirstAttempts: 1, Failures: 1, SlowCalls: 1})
					} else {
						_ = e.Record(dep, FirstAttempt, Success)
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for moving := true; moving; {
			select {
			case <-done:
				moving = false
			default:
				clock.Advance(700 * time.Millisecond)
			}
			c, _ := e.Cumulative(dep)
			if _, ok := c.Node.minus(last); !ok {
				t.Fatalf("the cumulative counts went back: %+v after %+v", c.Node, last)
			}
			last = c.Node
		}
		// A new window length replaces the window; an add that picked a
		// bucket of the old one lands after the swap.
		d := e.deps.load(dep)
		b := d.win.Load().slot(e.recordNanos())
		_ = e.SetPolicy(dep, *policyWith(func(p *Policy) { p.Breaker.Window = Duration(time.Duration(10+burst) * time.Second) }))
		b.add(Counts{FirstAttempts: 1, Successes: 1})
	}
	c, ok := e.Cumulative(dep)
	if !ok {
		t.Fatal("the dependency is not tracked")
	}
	n := uint64(bursts * each)
	want := Counts{FirstAttempts: workers*n + bursts, Successes: workers*n - n/2 + bursts, Failures: n / 2, SlowCalls: n / 2}
	if c.Node != want || c.Fleet != want {
		t.Fatalf("cumulative %+v (fleet %+v), want %+v", c.Node, c.Fleet, want)
	}
	if row := e.Rows(dep)[0]; row.Cumulative.Counts != want || row.Cumulative.Since != c.Since || row.Cumulative.At < row.Cumulative.Since {
		t.Errorf("own row's cumulative counts %+v, want %+v since %d", row.Cumulative, want, c.Since)
	}
}

func TestIncrease(t *testing.T) {
	c := func(since int64, first uint64) Cumulative {
		return Cumulative{Counts: Counts{FirstAttempts: first, Successes: first}, Since: since, At: since + 1}
	}
	for _, tc := range []struct {
		name       string
		prev       Cumulative
		held       bool
		next       Cumulative
		want       uint64
		watchedFor int64
	}{
		{"the same series: the difference", c(100, 10), true, c(100, 15), 5, 50},
		{"a restart: the new series from zero", c(100, 10), true, c(200, 3), 3, 50},
		{"a count that went back: a new series", c(100, 10), true, c(100, 4), 4, 50},
		{"first seen, began after the sum watched: all of it", Cumulative{}, false, c(100, 7), 7, 50},
		{"first seen, began before: a baseline", Cumulative{}, false, c(100, 7), 0, 150},
		{"a previous row without counts: as first seen", Cumulative{}, true, c(100, 7), 7, 50},
		{"a row without counts adds nothing", c(100, 10), true, Cumulative{}, 0, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Increase(tc.prev, tc.held, tc.next, tc.watchedFor)
			if got.FirstAttempts != tc.want || got.Successes != tc.want {
				t.Errorf("Increase = %+v, want %d", got, tc.want)
			}
		})
	}
}

// TestFleetCumulativeSurvivesRestartsAndDepartures: the fleet's cumulative
// counts an agent exports add up what every node counted while it watched,
// and never go back: a node that restarts starts a series from zero (its
// old total stays in the sum), a node whose row went stale or that died
// and comes back with the same series adds only what is new, a node of
// 0.1.x (no cumulative counts) adds nothing, and a malformed series is
// refused.
func TestFleetCumulativeSurvivesRestartsAndDepartures(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := NewManualClock(t0)
	a := newTestEngine(t, "a", "z", clock, nil)
	const dep = "ledger-api"
	record(t, a, dep, FirstAttempt, Success, 2)
	since := t0.Add(time.Second).UnixMilli() // b began after a did
	row := func(node string, seq uint64, since int64, n uint64) NodeWindow {
		return NodeWindow{Node: node, Dependency: dep, Seq: seq, Counts: Counts{FirstAttempts: 1, Successes: 1},
			Cumulative: Cumulative{Counts: Counts{FirstAttempts: n, Successes: n}, Since: since, At: since + 10}}
	}
	fleet := func() uint64 {
		t.Helper()
		c, ok := a.Cumulative(dep)
		if !ok {
			t.Fatal("not tracked")
		}
		return c.Fleet.FirstAttempts
	}
	steps := []struct {
		name string
		do   func()
		want uint64
	}{
		{"b's first series, begun after a watched", func() { a.ApplyRow(row("b", 1, since, 10)) }, 12},
		{"b counts on", func() { a.ApplyRow(row("b", 2, since, 15)) }, 17},
		{"b restarts", func() { a.ApplyRow(row("b", 3, since+60_000, 3)) }, 20},
		{"b's row goes stale and is dropped", func() { clock.Advance(25 * time.Second); a.Tick() }, 20},
		{"b comes back with the same series", func() { a.ApplyRow(row("b", 4, since+60_000, 8)) }, 25},
		{"b dies", func() { a.MemberDead("b") }, 25},
		{"b is alive again, same series", func() { a.MemberAlive("b", "z"); a.ApplyRow(row("b", 5, since+60_000, 9)) }, 26},
		{"c, a node that counted before a watched: a baseline", func() { a.ApplyRow(row("c", 1, t0.Add(-time.Hour).UnixMilli(), 1000)) }, 26},
		{"c counts on", func() { a.ApplyRow(row("c", 2, t0.Add(-time.Hour).UnixMilli(), 1004)) }, 30},
		{"d of 0.1.x sends no cumulative counts", func() {
			r := row("d", 1, 0, 0)
			r.Cumulative = Cumulative{}
			a.ApplyRow(r)
		}, 30},
	}
	for _, s := range steps {
		s.do()
		if got := fleet(); got != s.want {
			t.Fatalf("%s: fleet first attempts %d, want %d", s.name, got, s.want)
		}
	}
	bad := row("e", 1, since, 5)
	bad.Cumulative.At = bad.Cumulative.Since - 1
	if _, err := a.MergeRow(bad); err == nil {
		t.Error("a row read before its series began was taken")
	}
	bad = row("e", 1, 0, 5)
	if _, err := a.MergeRow(bad); err == nil {
		t.Error("cumulative counts without a series start were taken")
	}
}

// TestFleetCumulativeForgetsBoundedly: a dependency remembers the last
// counts of at most max(64, 2×live rows) nodes whose rows went; one it
// forgot counts from its next row on, never twice.
func TestFleetCumulativeForgetsBoundedly(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := NewManualClock(t0)
	a := newTestEngine(t, "a", "z", clock, nil)
	const dep = "ledger-api"
	since := t0.Add(time.Second).UnixMilli()
	row := func(i int, seq uint64, n uint64) NodeWindow {
		return NodeWindow{Node: "n" + string(rune('A'+i/26)) + string(rune('a'+i%26)), Dependency: dep, Seq: seq,
			Counts:     Counts{Successes: 1},
			Cumulative: Cumulative{Counts: Counts{Successes: n}, Since: since, At: since + int64(seq)}}
	}
	const nodes = 64 + 10
	for i := range nodes {
		a.ApplyRow(row(i, 1, 5))
	}
	for i := range nodes {
		a.MemberDead(row(i, 1, 0).Node)
	}
	clock.Advance(2 * time.Duration(DefaultPolicy().Breaker.Window)) // their rows stale: not put back
	for i := range nodes {
		a.MemberAlive(row(i, 1, 0).Node, "z")
	}
	c, _ := a.Cumulative(dep)
	if c.Fleet.Successes != 5*nodes {
		t.Fatalf("fleet successes %d, want %d", c.Fleet.Successes, 5*nodes)
	}
	d := a.deps.load(dep)
	d.mu.Lock()
	kept := len(d.fleet.gone)
	d.mu.Unlock()
	if kept != 64 {
		t.Fatalf("remembers %d gone nodes, want %d", kept, 64)
	}
	// Every node comes back with 2 more: the remembered add 2, the
	// forgotten ones (the first to go) are a baseline, never 7.
	for i := range nodes {
		a.ApplyRow(row(i, 2, 7))
	}
	c, _ = a.Cumulative(dep)
	if want := uint64(5*nodes + 2*64); c.Fleet.Successes != want {
		t.Fatalf("fleet successes %d, want %d", c.Fleet.Successes, want)
	}
}
