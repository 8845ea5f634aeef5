package sharedstate

import (
	"errors"
	"testing"
	"time"
)

// A row sent again after its copy went stale is refused as a replay, for
// any dependency: a node's sequence numbers only grow. Copies of what is
// held are known (the gossip layer skips their signature check).
func TestReplayedRowsRefused(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "self", "", clock, nil)
	row := func(dep string, seq uint64) NodeWindow {
		return NodeWindow{Node: "a", Dependency: dep, Seq: seq, Counts: Counts{FirstAttempts: 40, Failures: 40}}
	}
	if ok, err := e.MergeRow(row("d", 100)); !ok || err != nil {
		t.Fatalf("first row: %v, %v", ok, err)
	}
	if !e.RowKnown("a", "d", 100) || !e.RowKnown("a", "d", 99) || e.RowKnown("a", "d", 101) || e.RowKnown("a", "e", 1) {
		t.Fatal("RowKnown disagrees with the held row")
	}
	clock.Advance(2*DefaultPolicy().Breaker.Window.Std() + time.Second)
	e.Tick()
	if ft, _ := e.Fleet("d"); ft.FleetNodes != 0 {
		t.Fatalf("the stale row still counts: %+v", ft)
	}
	for _, r := range []NodeWindow{row("d", 100), row("d", 60), row("other", 99)} {
		ok, err := e.MergeRow(r)
		if ok || !errors.Is(err, ErrReplayed) || RefusalReason(err) != "replayed" {
			t.Fatalf("replay of %s seq %d: %v, %v; want ErrReplayed", r.Dependency, r.Seq, ok, err)
		}
	}
	if ft, _ := e.Fleet("d"); ft.FleetNodes != 0 {
		t.Fatalf("a replayed row counts: %+v", ft)
	}
	if ok, err := e.MergeRow(row("d", 101)); !ok || err != nil {
		t.Fatalf("the node's next row: %v, %v", ok, err)
	}
}

func TestRecordKnown(t *testing.T) {
	e := newTestEngine(t, "self", "", NewManualClock(t0), nil)
	r := BreakerRecord{Dependency: "d", Generation: 3, State: Open, Since: t0, OpenCount: 1, Origin: "a"}
	if e.RecordKnown(r) {
		t.Fatal("a record of an unknown dependency is known")
	}
	if _, err := e.MergeRecord(r); err != nil {
		t.Fatal(err)
	}
	older, closed := r, r
	older.Generation = 2
	closed.State, closed.OpenCount = Closed, 0
	newer := r
	newer.Generation = 4
	if !e.RecordKnown(r) || !e.RecordKnown(older) || !e.RecordKnown(closed) || e.RecordKnown(newer) {
		t.Fatal("RecordKnown disagrees with the merge")
	}
}

// Rows go stale one by one, each at 2×window after its own receipt: a
// Tick drops the stale ones (raising their nodes' floors) and keeps the
// rest, whichever order they came in.
func TestStaleRowsDroppedInTurn(t *testing.T) {
	clock := NewManualClock(t0)
	e := newTestEngine(t, "self", "", clock, nil)
	stale := 2 * DefaultPolicy().Breaker.Window.Std()
	row := func(node string, seq uint64) NodeWindow {
		return NodeWindow{Node: node, Dependency: "d", Seq: seq, Counts: Counts{FirstAttempts: 1, Successes: 1}}
	}
	merge := func(r NodeWindow) {
		t.Helper()
		if ok, err := e.MergeRow(r); !ok || err != nil {
			t.Fatalf("row of %s seq %d: %v, %v", r.Node, r.Seq, ok, err)
		}
	}
	replayed := func(node string, seq uint64) bool {
		_, err := e.MergeRow(row(node, seq))
		return errors.Is(err, ErrReplayed)
	}
	merge(row("a", 10))
	clock.Advance(stale / 2)
	merge(row("b", 20))
	merge(row("a", 11)) // a's row is now the newer one
	clock.Advance(stale/2 + time.Second)
	e.Tick()
	if replayed("a", 11) || replayed("b", 20) {
		t.Fatal("a row dropped before it was stale")
	}
	if got := len(e.Rows("d")); got != 3 { // own row included
		t.Fatalf("%d rows, want 3", got)
	}
	clock.Advance(stale / 2)
	e.Tick()
	if !replayed("b", 20) || !replayed("a", 11) {
		t.Fatal("the stale rows were not dropped")
	}
	merge(row("c", 30))
	clock.Advance(stale - time.Second)
	e.Tick()
	if replayed("c", 30) {
		t.Fatal("c's row dropped before it was stale")
	}
	clock.Advance(time.Second)
	e.Tick()
	if !replayed("c", 30) {
		t.Fatal("c's row was not dropped")
	}
}
