package sharedstate

import (
	"errors"
	"testing"
	"time"
)

// A dependency whose breaker moved is kept for IdleRetention without
// traffic, then forgotten whatever its record (open and half-open ones
// included); a copy of the record it held is refused as ErrEvicted, a newer
// one taken; after IdleRetention+TombstoneMargin more the tombstone is
// gone, and not before.
func TestIdleOnceTrippedEvicted(t *testing.T) {
	clock := NewManualClock(t0)
	const retention = time.Minute
	e := newTestEngine(t, "self", "", clock, func(c *EngineConfig) { c.IdleRetention = retention })
	window := DefaultPolicy().Breaker.Window.Std()
	recs := []BreakerRecord{
		{Dependency: "tripped-closed", Generation: 2, State: Closed, Since: t0, Origin: "a"},
		{Dependency: "open", Generation: 1, State: Open, Since: t0, OpenCount: 1, Origin: "a"},
		{Dependency: "never", Generation: 0, State: Closed, Origin: "a"},
	}
	for _, r := range recs {
		if _, err := e.MergeRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.MergeRow(NodeWindow{Node: "a", Dependency: "never", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	step := func(d time.Duration) {
		for end := clock.Now().Add(d); clock.Now().Before(end); {
			clock.Advance(time.Second)
			e.Tick()
		}
	}
	step(5 * window) // its row goes stale after 2 windows, then it idles 2 more
	if e.Snapshot("never") != nil || e.Snapshot("tripped-closed") == nil || e.Snapshot("open") == nil {
		t.Fatalf("after 5 windows: never %v, tripped %v, open %v; want only the never-tripped one gone",
			e.Snapshot("never") != nil, e.Snapshot("tripped-closed") != nil, e.Snapshot("open") != nil)
	}
	step(retention)
	if n := len(e.Dependencies()); n != 0 {
		t.Fatalf("%d dependencies kept after the retention without traffic: %v", n, e.Dependencies())
	}
	for _, r := range recs[:2] {
		ok, err := e.MergeRecord(r) // a peer's push-pull copy
		if ok || !errors.Is(err, ErrEvicted) || RefusalReason(err) != "evicted" {
			t.Fatalf("copy of the evicted %s: %v, %v; want ErrEvicted", r.Dependency, ok, err)
		}
	}
	if e.Snapshot("open") != nil {
		t.Fatal("a refused copy brought the dependency back")
	}
	newer := BreakerRecord{Dependency: "open", Generation: 1, State: Open, Since: clock.Now(), OpenCount: 1, Origin: "b"}
	if ok, err := e.MergeRecord(newer); !ok || err != nil {
		t.Fatalf("a new trip after the eviction: %v, %v", ok, err)
	}
	step(retention) // a late copy, within the margin: still refused
	if ok, err := e.MergeRecord(recs[0]); ok || !errors.Is(err, ErrEvicted) {
		t.Fatalf("a copy within the tombstone margin: %v, %v; want ErrEvicted", ok, err)
	}
	step(TombstoneMargin + 2*window)
	if ok, err := e.MergeRecord(recs[0]); !ok || err != nil {
		t.Fatalf("the tombstone outlived the retention: %v, %v", ok, err)
	}
}
