package sharedstate

import (
	"errors"
	"testing"
	"time"
)

// followed is a snapshot of dep as another engine publishes it.
func followed(state BreakerState, gen uint64, openCount uint32, since time.Time) *Snapshot {
	return &Snapshot{Dependency: dep, State: state, Generation: gen, OpenCount: openCount, Since: since}
}

func TestFollow(t *testing.T) {
	t.Run("a followed close replaces the engine's own trip, and its own rules stop until Unfollow", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		own := openBreaker(t, e) // generation 1, proposed by this engine
		clock.Advance(time.Minute)
		e.Tick()
		if s := e.Snapshot(dep); s.State != HalfOpen || s.Generation != own.Generation {
			t.Fatalf("the own trip a minute later: %+v, want half-open", s)
		}
		closed := clock.Now().Add(-time.Second)
		if err := e.Follow(followed(Closed, 4, 0, closed)); err != nil {
			t.Fatal(err)
		}
		s := e.Snapshot(dep)
		if s.State != Closed || s.Generation != 4 || !s.Since.Equal(closed) || s.OpenCount != 0 {
			t.Fatalf("after following a close: %+v, want closed, generation 4, since %v", s, closed)
		}
		if d := e.Decide(dep, FirstAttempt); d.Verdict != Allow {
			t.Errorf("Decide after following a close: %v", d)
		}
		// Failures that would trip it: no trip while followed.
		record(t, e, dep, FirstAttempt, Failure, 40)
		if props := e.Tick(); len(props) != 0 || e.Snapshot(dep).State != Closed {
			t.Fatalf("a followed breaker tripped on its own: %+v, %+v", props, e.Snapshot(dep))
		}
		e.Unfollow(dep)
		props := e.Tick()
		if len(props) != 1 || props[0].State != Open || props[0].Generation != 5 || props[0].Origin != "client" {
			t.Fatalf("after Unfollow: proposals %+v, want its own trip at generation 5", props)
		}
	})

	t.Run("a close less than one window ago starts the window afresh, with the ramp from the close", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		openBreaker(t, e)
		record(t, e, dep, FirstAttempt, Failure, 5)
		ramp := DefaultPolicy().Breaker.RampDuration.Std()
		closed := clock.Now().Add(-ramp / 2)
		if err := e.Follow(followed(Closed, 2, 0, closed)); err != nil {
			t.Fatal(err)
		}
		if f, _ := e.Fleet(dep); !f.Node.IsZero() {
			t.Errorf("window after a fresh close: %+v, want empty", f.Node)
		}
		e.Unfollow(dep)
		if props := e.Tick(); len(props) != 0 {
			t.Errorf("the failures the close ended tripped the breaker again: %+v", props)
		}
		if p := e.Snapshot(dep).ThrottleProbability; p <= 0 {
			t.Errorf("throttle probability %v half way through the %v ramp, want the ramp's refusal", p, ramp)
		}
	})

	t.Run("a close older than one window keeps the window", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		record(t, e, dep, FirstAttempt, Failure, 5)
		if err := e.Follow(followed(Closed, 2, 0, clock.Now().Add(-time.Minute))); err != nil {
			t.Fatal(err)
		}
		if f, _ := e.Fleet(dep); f.Node.Failures != 5 {
			t.Errorf("window after following an old close: %+v, want the 5 failures kept", f.Node)
		}
	})

	t.Run("an open breaker keeps its remaining time, then turns half-open", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		record(t, e, dep, FirstAttempt, Rejected, 1) // traffic: this node may probe
		open := DefaultPolicy().Breaker.OpenDuration.Std()
		opened := clock.Now().Add(-open / 2)
		if err := e.Follow(followed(Open, 3, 1, opened)); err != nil {
			t.Fatal(err)
		}
		e.Unfollow(dep)
		if s := e.Snapshot(dep); s.State != Open || s.Generation != 3 || !s.Since.Equal(opened) {
			t.Fatalf("after following an open breaker: %+v", s)
		}
		if d := e.Decide(dep, FirstAttempt); d.Reason != ReasonOpen {
			t.Errorf("Decide on the open breaker: %v", d)
		}
		clock.Advance(open/2 - time.Nanosecond) // the rest of the default open duration
		e.Tick()
		if s := e.Snapshot(dep); s.State != Open {
			t.Fatalf("before the open duration ended: %v", s.State)
		}
		clock.Advance(time.Nanosecond)
		e.Tick()
		if s := e.Snapshot(dep); s.State != HalfOpen || !s.ProbePermit {
			t.Fatalf("once the open duration ended: %+v, want half-open with the probe permit", s)
		}
		if d := e.AcquireProbe(dep); d.Verdict != AllowProbe {
			t.Fatalf("AcquireProbe: %v", d)
		}
		if r, ok := e.ProbeResult(dep, true); ok {
			t.Fatalf("one probe success of 3 proposed %+v", r)
		}
	})

	t.Run("a half-open breaker is followed as open whose time is up; a since in the future counts from now", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		if err := e.Follow(followed(HalfOpen, 3, 1, clock.Now().Add(-6*time.Second))); err != nil {
			t.Fatal(err)
		}
		if s := e.Snapshot(dep); s.State != HalfOpen || s.Generation != 3 {
			t.Fatalf("after following a half-open breaker: %+v", s)
		}
		if err := e.Follow(followed(Open, 4, 2, clock.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if s := e.Snapshot(dep); s.State != Open || !s.Since.Equal(clock.Now()) {
			t.Fatalf("after following a breaker opened in the future: %+v, want open since now", s)
		}
	})

	t.Run("scope node: this node's breaker is followed", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, func(c *EngineConfig) {
			c.DefaultPolicy = policyWith(func(p *Policy) { p.Breaker.Scope = ScopeNode })
		})
		opened := clock.Now().Add(-time.Second)
		if err := e.Follow(followed(Open, 0, 2, opened)); err != nil {
			t.Fatal(err)
		}
		if s := e.Snapshot(dep); s.State != Open || s.OpenCount != 2 || !s.Since.Equal(opened) {
			t.Fatalf("scope node, open: %+v", s)
		}
		clock.Advance(9 * time.Second) // 5 s doubled: 10 s in all
		e.Tick()
		if s := e.Snapshot(dep); s.State != HalfOpen {
			t.Fatalf("scope node, 10 s after the open: %v, want half-open", s.State)
		}
		if err := e.Follow(followed(Closed, 0, 0, time.Time{})); err != nil {
			t.Fatal(err)
		}
		if s := e.Snapshot(dep); s.State != Closed {
			t.Fatalf("scope node, closed: %+v", s)
		}
	})

	t.Run("scope fleet: this node's own breaker follows LocalState", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		s := followed(Closed, 0, 0, time.Time{})
		s.LocalState = Open
		if err := e.Follow(s); err != nil {
			t.Fatal(err)
		}
		if got := e.Snapshot(dep); got.State != Closed || got.LocalState != Open || got.DecideFirst().Verdict != Reject {
			t.Fatalf("local state open: %+v", got)
		}
		s.LocalState = HalfOpen
		if err := e.Follow(s); err != nil {
			t.Fatal(err)
		}
		if got := e.Snapshot(dep); got.LocalState != HalfOpen {
			t.Fatalf("local state half-open: %+v", got)
		}
		s.LocalState = Closed
		if err := e.Follow(s); err != nil {
			t.Fatal(err)
		}
		if got := e.Snapshot(dep); got.LocalState != Closed || got.DecideFirst().Verdict != Allow {
			t.Fatalf("local state closed: %+v", got)
		}
	})

	t.Run("a followed dependency is not forgotten as idle", func(t *testing.T) {
		clock := NewManualClock(t0)
		e := newTestEngine(t, "client", "", clock, nil)
		if err := e.Follow(followed(Closed, 0, 0, time.Time{})); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			clock.Advance(10 * time.Second)
			e.Tick()
		}
		if e.Snapshot(dep) == nil {
			t.Fatal("a followed dependency was forgotten")
		}
		e.Unfollow(dep)
		for range 3 {
			clock.Advance(10 * time.Second)
			e.Tick()
		}
		if e.Snapshot(dep) != nil {
			t.Fatal("an idle dependency no longer followed was kept")
		}
		e.Unfollow(dep) // untracked: nothing
	})

	t.Run("refusals", func(t *testing.T) {
		e := newTestEngine(t, "client", "", NewManualClock(t0), nil)
		if err := e.Follow(followed(Closed, MaxGeneration+1, 0, time.Time{})); !errors.Is(err, ErrGenerationMax) {
			t.Errorf("a generation past MaxGeneration: %v", err)
		}
		if err := e.Follow(&Snapshot{Dependency: "no spaces"}); err == nil {
			t.Error("an invalid name was followed")
		}
	})
}
