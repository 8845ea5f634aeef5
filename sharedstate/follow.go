package sharedstate

import (
	"fmt"
	"time"
)

// Follow makes the breakers of s.Dependency those s describes, another
// engine's snapshot of it, and keeps the engine from moving them on its
// own until Unfollow: a client's local fallback breaker follows the
// snapshots its agent pushes while the agent decides, so that when the
// agent goes away the fallback starts from the fleet's present state
// rather than from a trip of its own that the fleet has since left.
//
// s is read under the engine's policy for the dependency (give the engine
// the policy first; its scope says which breaker governs). Under scope
// fleet or zone, the record that governs this node becomes s's State
// (half-open is open whose open duration has passed), Generation, Since
// and OpenCount, whatever Merge would say; this node's own breaker takes
// s.LocalState, timed from now when it changes (a snapshot does not say
// since when). Under scope node, this node's breaker becomes s's State,
// Since and OpenCount. A Since in the future counts from now. When the
// governing breaker is closed anew (another generation, or it was not
// closed) less than one window ago, the window starts afresh, as it does
// when a close is merged: the failures it holds are the ones the
// followed engine closed on; the ramp runs from Since. A followed
// breaker's state changes by time (open turns half-open), by the next
// Follow and by the result of a probe this engine admitted, never by the
// counts: Tick applies no trip rule to the dependency, and does not forget
// it as idle. Decisions, counts and the retry budget work as usual.
// Overrides and policies are not in s: set them with SetOverride and
// SetPolicy.
//
// It fails only for a dependency the engine cannot track (an invalid
// name, MaxDependencies) and for a generation past MaxGeneration.
func (e *Engine) Follow(s *Snapshot) error {
	if s.Generation > MaxGeneration {
		return fmt.Errorf("%w: %s generation %d", ErrGenerationMax, s.Dependency, s.Generation)
	}
	d, err := e.state(s.Dependency)
	if err != nil {
		return err
	}
	now := e.now()
	d.mu.Lock()
	d.followed = true
	d.follow(e, s, now)
	changed := d.refresh(e, now)
	e.unlock(d, changed)
	return nil
}

// Unfollow ends Follow: the engine decides dep's breakers by its own rules
// again, from the state last followed. Unfollowing a dependency that is
// not followed, or not tracked, does nothing.
func (e *Engine) Unfollow(dep string) {
	d := e.deps.load(dep)
	if d == nil {
		return
	}
	d.mu.Lock()
	d.followed = false
	d.mu.Unlock()
}

// follow takes s's breakers (see Follow). Caller holds d.mu.
func (d *depState) follow(e *Engine, s *Snapshot, now time.Time) {
	b := &d.pol.Breaker
	since := s.Since
	if since.After(now) {
		since = now
	}
	var closed time.Time // when the governing breaker closed, if anew
	if d.shared() {
		cur := d.rec(e)
		r := BreakerRecord{Dependency: d.name, Zone: cur.Zone, Generation: s.Generation, State: Open,
			Since: since.Round(0).UTC(), OpenCount: s.OpenCount, Reason: "followed"}
		if s.State == Closed {
			r.State, r.OpenCount = Closed, 0
		}
		if !SameRecord(r, cur) {
			if r.State == Closed && (cur.State != Closed || cur.Generation != r.Generation) {
				closed = since
			}
			d.records[r.Zone] = r
			d.probe = fleetProbe{gen: r.Generation}
			d.permit.valid = false
			d.tripHeld.valid = false
		}
		d.followLocal(b, s.LocalState, now)
	} else {
		n := max(s.OpenCount, 1)
		switch l := &d.local; {
		case s.State != Closed && (l.state != Open || !l.since.Equal(since) || l.openCount != n):
			d.local = localBreaker{state: Open, since: since, openCount: n}
		case s.State == Closed && l.state != Closed:
			// A snapshot of a closed node breaker has no since: it closed
			// as this node learned it.
			d.local = localBreaker{closedAt: l.closedAt}
			closed = now
		}
	}
	if !closed.IsZero() && now.Sub(closed) < b.Window.Std() {
		d.resetWindow()
		d.local.closedAt = time.Time{}
		if now.Sub(closed) < b.RampDuration.Std() {
			d.local.closedAt = closed
		}
	}
}

// followLocal makes this node's own breaker (under scope fleet or zone)
// take state, from now when it changes. Caller holds d.mu.
func (d *depState) followLocal(b *BreakerPolicy, state BreakerState, now time.Time) {
	held := d.local.stateAt(b, now)
	if state == held {
		return
	}
	switch state {
	case Closed:
		d.local = localBreaker{closedAt: d.local.closedAt}
	case Open:
		n := uint32(1)
		if held == HalfOpen { // a probe failed
			n = d.local.openCount + 1
		}
		d.local = localBreaker{state: Open, since: now, openCount: n}
	case HalfOpen:
		n := max(d.local.openCount, 1)
		d.local = localBreaker{state: Open, since: now.Add(-b.OpenDurationFor(n)), openCount: n}
	}
}
