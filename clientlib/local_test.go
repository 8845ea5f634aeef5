package clientlib

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// The tests of the local fallback's memory of the agent run in a synctest
// bubble, with the fake agent in memory: time moves only when every
// goroutine waits, so an expiry passes at once and exactly. (Fake time
// still costs real time: a flush every 50 ms and every reconnect attempt
// run, hence slow reconnects and expiries of seconds.)

// slowReconnects keeps the reconnect attempts of a client few while the
// fake agent is away.
var slowReconnects = Config{ReconnectMin: time.Second, ReconnectMax: 10 * time.Second}

// pushed is a snapshot of dep as the agent pushes it, with the default
// policy's breaker settings but a window of window.
func pushed(dep string, window time.Duration) *fuseboxv1.DecisionSnapshot {
	s := snapshot(dep, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	b := sharedstate.DefaultPolicy().Breaker
	b.Window = sharedstate.Duration(window)
	withPolicy(s, func(p *sharedstate.Policy) { p.Breaker = b })
	s.Version = 1
	return s
}

// killAgent stops f and waits until c decides locally.
func killAgent(t *testing.T, f *fakeAgent, c *Client) {
	t.Helper()
	f.stop()
	sstest.Eventually(t, 10*time.Second, "the client to notice the agent is gone", func() bool { return !c.AgentConnected() })
}

// call makes one first attempt through Do and reports whether the
// dependency was called, with Do's error.
func call(dep *Dependency) (bool, error) {
	called := false
	err := dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error {
		called = true
		return nil
	})
	return called, err
}

// An override the agent pushed holds while the agent is away, until its
// expiry: no call reaches the dependency (first attempts, StrictConsult
// checks and retries alike), then calls flow again under the local breaker.
// One without an expiry holds until the agent is back and says otherwise.
func TestLocalFallbackKeepsOverrides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMemoryAgent(t)
		c := memoryClient(t, f, slowReconnects)
		payments, ledger, search := c.Dependency("payments"), c.Dependency("ledger"), c.Dependency("search")

		expires := time.Now().Add(30 * time.Second)
		p := pushed("payments", 10*time.Second)
		p.Override = fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN
		p.OverrideReason = "incident 42"
		p.OverrideExpires = timestamppb.New(expires)
		l := pushed("ledger", 10*time.Second)
		l.Override = fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN
		s := pushed("search", 10*time.Second)
		s.Override = fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED
		f.push(p, l, s)
		sstest.Eventually(t, 10*time.Second, "the overrides from the agent", func() bool {
			return payments.Status().Override == ForcedOpen && ledger.Status().Override == ForcedOpen &&
				search.Status().Override == ForcedClosed && payments.Status().FromAgent
		})

		killAgent(t, f, c)
		for _, d := range []*Dependency{payments, ledger} {
			if st := d.Status(); st.Override != ForcedOpen || st.FromAgent || !st.Rejecting() {
				t.Errorf("%s without the agent: %+v, want forced open by the local breaker", d.Name(), st)
			}
			if called, err := call(d); called || !errors.Is(err, ErrForcedOpen) {
				t.Errorf("%s: called %v, err %v; want ErrForcedOpen and no call", d.Name(), called, err)
			}
			called := false
			err := d.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil }, StrictConsult())
			if called || !errors.Is(err, ErrForcedOpen) {
				t.Errorf("%s with StrictConsult: called %v, err %v; want the local breaker's ErrForcedOpen", d.Name(), called, err)
			}
		}
		if st := search.Status(); st.Override != ForcedClosed || st.Rejecting() {
			t.Errorf("search without the agent: %+v, want forced closed", st)
		}

		// The expiry passes (and the flusher ticks the local breaker).
		time.Sleep(time.Until(expires) + time.Second)
		if st := payments.Status(); st.Override != OverrideNone || st.Rejecting() || st.FromAgent {
			t.Errorf("payments after its override expired: %+v, want the local breaker, closed", st)
		}
		if called, err := call(payments); !called || err != nil {
			t.Errorf("payments after the expiry: called %v, err %v; want the call made", called, err)
		}
		if called, err := call(ledger); called || !errors.Is(err, ErrForcedOpen) {
			t.Errorf("ledger (no expiry) after payments' expiry: called %v, err %v; want still forced open", called, err)
		}

		// The agent is back without the override: it decides again.
		f.push(pushed("ledger", 10*time.Second))
		f.start()
		sstest.Eventually(t, time.Minute, "the agent's snapshot without the override", func() bool {
			st := ledger.Status()
			return st.FromAgent && st.Override == OverrideNone
		})
		if called, err := call(ledger); !called || err != nil {
			t.Errorf("ledger after the agent cleared it: called %v, err %v", called, err)
		}
		killAgent(t, f, c)
		if st := ledger.Status(); st.Override != OverrideNone || st.Rejecting() {
			t.Errorf("ledger once the agent said none and left again: %+v", st)
		}
	})
}

// The throttle probability and concurrency share the agent pushed keep
// applying while it is away: the share until the agent is back, the
// probability for one breaker window (the span it was computed over).
func TestLocalFallbackKeepsShaping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMemoryAgent(t)
		c := memoryClient(t, f, slowReconnects) // Random 0: a positive throttle probability refuses every first attempt
		search, catalog, pricing := c.Dependency("search"), c.Dependency("catalog"), c.Dependency("pricing")
		const window = 10 * time.Second
		s := pushed("search", window)
		s.ThrottleProbability = 0.4
		l := pushed("catalog", window)
		l.ConcurrencyLimit = 2
		r := pushed("pricing", window) // ramping after a close: not kept, a ramp lasts rampDuration
		r.ThrottleProbability, r.RampProbability = 0.4, 0.4
		f.push(s, l, r)
		sstest.Eventually(t, 10*time.Second, "the shaping from the agent", func() bool {
			return search.Status().FromAgent && catalog.ConcurrencyLimit() == 2 && pricing.Status().FromAgent
		})
		if called, err := call(search); called || !errors.Is(err, ErrThrottled) {
			t.Fatalf("search from the agent's snapshot: called %v, err %v; want throttled", called, err)
		}
		var rej *RejectedError
		if called, err := call(pricing); called || !errors.As(err, &rej) || rej.Reason != "ramp" {
			t.Fatalf("pricing from the agent's snapshot: called %v, err %v; want the ramp's refusal", called, err)
		}

		killAgent(t, f, c)
		lost := time.Now()
		if called, err := call(pricing); !called || err != nil {
			t.Errorf("pricing without the agent: called %v, err %v; want the call made (the ramp is not kept)", called, err)
		}
		if called, err := call(search); called || !errors.Is(err, ErrThrottled) {
			t.Errorf("search without the agent: called %v, err %v; want still throttled", called, err)
		}
		if _, err := search.Allow(First); !errors.Is(err, ErrThrottled) {
			t.Errorf("search Allow without the agent: %v, want ErrThrottled", err)
		}
		if got := catalog.ConcurrencyLimit(); got != 2 {
			t.Errorf("catalog's limit without the agent %d, want the pushed 2", got)
		}
		var dones []func(Outcome)
		for range 2 {
			done, err := catalog.Allow(First)
			if err != nil {
				t.Fatalf("a call within the limit: %v", err)
			}
			dones = append(dones, done)
		}
		if called, err := call(catalog); called || !errors.Is(err, ErrConcurrencyLimit) {
			t.Errorf("a third call in flight without the agent: called %v, err %v; want ErrConcurrencyLimit", called, err)
		}
		dones[0](Success)
		if called, err := call(catalog); !called || err != nil {
			t.Errorf("a call once a slot is free: called %v, err %v", called, err)
		}
		done, err := catalog.Allow(First) // two held again
		if err != nil {
			t.Fatalf("a call within the limit: %v", err)
		}
		dones[0] = done

		// One window after the agent left, the throttle probability is
		// stale: the local breaker alone decides. The share stays.
		time.Sleep(window - time.Since(lost) - time.Millisecond)
		if called, err := call(search); called || !errors.Is(err, ErrThrottled) {
			t.Errorf("search just before a window passed: called %v, err %v; want still throttled", called, err)
		}
		time.Sleep(time.Second)
		if called, err := call(search); !called || err != nil {
			t.Errorf("search a window after the agent left: called %v, err %v; want the call made", called, err)
		}
		time.Sleep(time.Minute)
		if called, err := call(catalog); called || !errors.Is(err, ErrConcurrencyLimit) {
			t.Errorf("catalog a minute later with two calls in flight: called %v, err %v; want the share of 2 still applied", called, err)
		}
		dones[0](Success)
		dones[1](Success)

		// The agent is back: its snapshots decide, with no shaping left over.
		l.ConcurrencyLimit, l.Version = 0, 2
		s.ThrottleProbability, s.Version = 0, 2
		f.push(s, l)
		f.start()
		sstest.Eventually(t, time.Minute, "the agent's snapshots again", func() bool {
			return search.Status().FromAgent && catalog.Status().FromAgent
		})
		if got := catalog.ConcurrencyLimit(); got != 0 {
			t.Errorf("catalog's limit from the agent %d, want none", got)
		}
		if called, err := call(search); !called || err != nil {
			t.Errorf("search from the agent: called %v, err %v", called, err)
		}
	})
}
