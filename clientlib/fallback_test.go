package clientlib

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// testBreaker is a policy's breaker part with minimumRequests 5 (the
// built-in default is 20).
func testBreaker() sharedstate.BreakerPolicy {
	b := sharedstate.DefaultPolicy().Breaker
	b.MinimumRequests = 5
	b.FailureRateThreshold = 0.6
	b.OpenDuration = sharedstate.Duration(time.Minute) // stays open for the test
	b.MaxOpenDuration = sharedstate.Duration(time.Hour)
	b.Confidence = 0 // the classic rule: trips on the 5th failure in a row
	return b
}

// The agent pushed a policy with minimumRequests 5 and maxAttempts 2, then
// went away: the local fallback breaker trips on the 5th failure (not the
// 20th of the built-in default), retries follow the pushed maxAttempts, and
// a dependency the agent never pushed follows the Welcome's default.
func TestLocalFallbackAdoptsPushedPolicy(t *testing.T) {
	const name, other, unpushed = "inventory", "inventory-retry", "pricing"
	if got := sharedstate.DefaultPolicy().Breaker.MinimumRequests; got != 20 {
		t.Fatalf("built-in minimumRequests %d: the test assumes 20", got)
	}
	f := newFakeAgent(t)
	def := sharedstate.DefaultPolicy()
	def.Breaker.MinimumRequests = 7
	f.welcome = convert.SnapshotToProto(convert.PolicySnapshot(sharedstate.DefaultPolicyName, def))
	f.welcome.PolicyJson, _ = json.Marshal(def)
	c := agentClient(t, f, Config{})
	dep, retried := c.Dependency(name), c.Dependency(other)

	for _, d := range []string{name, other} {
		s := snapshot(d, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
		f.push(withPolicy(s, func(p *sharedstate.Policy) {
			p.Breaker = testBreaker()
			p.Retry.MaxAttempts = 2
		}))
	}
	sstest.Eventually(t, 10*time.Second, "the pushed policies in the local breaker", func() bool {
		return c.engine.Policy(name).Breaker == testBreaker() && c.engine.Policy(other).Breaker == testBreaker() &&
			dep.Status().FromAgent && retried.Status().FromAgent
	})
	if got := c.engine.Policy(name).Retry.MaxAttempts; got != 2 {
		t.Errorf("local retry maxAttempts %d, want the pushed 2", got)
	}
	if got := c.engine.Policy(unpushed).Breaker.MinimumRequests; got != 7 {
		t.Errorf("a dependency never pushed: minimumRequests %d, want the Welcome's 7", got)
	}

	f.stop()
	sstest.Eventually(t, 10*time.Second, "the client to notice the agent is gone", func() bool { return !c.AgentConnected() })
	if dep.Status().FromAgent {
		t.Fatal("still deciding from the dead agent's snapshot")
	}

	// Retries: the pushed maxAttempts (2), decided by the local budget.
	attempts := 0
	err := retried.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		attempts++
		return errUnavailable
	})
	if attempts != 2 || !errors.Is(err, errUnavailable) {
		t.Errorf("%d attempts (err %v), want the pushed maxAttempts 2", attempts, err)
	}

	// The breaker: one failure at a time, each counted and evaluated by the
	// local breaker before the next.
	errDown := status.Error(codes.Internal, "down") // a failure, not retried
	for i := 1; i <= 5; i++ {
		if s := dep.Status(); s.State != Closed {
			t.Fatalf("local breaker %v after %d failures, want closed before 5", s.State, i-1)
		}
		if err := dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error { return errDown }); !errors.Is(err, errDown) {
			t.Fatalf("failure %d: %v", i, err)
		}
		sstest.Eventually(t, 10*time.Second, "the local breaker to count the failure", func() bool {
			ft, ok := c.engine.Fleet(name)
			return ok && ft.Node.Failures == uint64(i)
		})
		c.engine.Tick() // evaluate the trip rule now (the flusher ticks too)
	}
	if s := dep.Status(); s.State != Open || s.FromAgent {
		t.Fatalf("after 5 failures: %+v, want the local breaker open", s)
	}
	called := false
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil }); !errors.Is(err, ErrOpen) || called {
		t.Errorf("err %v, called %v: want the local breaker's refusal", err, called)
	}
}

// An answer's snapshot newer than the pushed one is installed at once; a
// pushed snapshot older than it that arrives afterwards is dropped; a newer
// push decides again.
func TestLateSnapshotIsDropped(t *testing.T) {
	f := newFakeAgent(t)
	const name = "ledger"
	at := func(version uint64, state fuseboxv1.BreakerState) *fuseboxv1.DecisionSnapshot {
		s := snapshot(name, state)
		s.Version = version
		return s
	}
	f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
		return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT, Reason: fuseboxv1.RejectReason_REJECT_REASON_OPEN,
			Snapshot: at(7, fuseboxv1.BreakerState_BREAKER_STATE_OPEN)}, nil
	}
	c := agentClient(t, f, Config{})
	dep := c.Dependency(name)
	f.push(at(5, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED))
	sstest.Eventually(t, 10*time.Second, "version 5", func() bool { return dep.Status().FromAgent })

	err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return errUnavailable })
	if !errors.Is(err, ErrOpen) {
		t.Fatalf("err %v, want the retry refused as open", err)
	}
	if s := dep.Status(); s.State != Open || !s.FromAgent {
		t.Fatalf("status %+v: the answer's newer snapshot (open, version 7) is not installed", s)
	}

	// Version 6 was on its way when version 7 came with the answer: late.
	// A snapshot of another dependency after it marks when it was read.
	marker := c.Dependency("marker")
	f.push(at(6, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED))
	f.push(snapshot("marker", fuseboxv1.BreakerState_BREAKER_STATE_OPEN))
	sstest.Eventually(t, 10*time.Second, "the marker", func() bool { return marker.Status().State == Open })
	if s := dep.Status(); s.State != Open {
		t.Fatalf("status %+v: the late version 6 replaced version 7", s)
	}

	f.push(at(8, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED))
	sstest.Eventually(t, 10*time.Second, "version 8", func() bool { return dep.Status().State == Closed })

	// An answer no newer than the pushed snapshot changes nothing.
	f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
		return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_ALLOW,
			Snapshot: at(8, fuseboxv1.BreakerState_BREAKER_STATE_OPEN)}, nil
	}
	n := 0
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		if n++; n == 1 {
			return errUnavailable
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s := dep.Status(); s.State != Closed {
		t.Errorf("status %+v: an answer as old as the pushed snapshot replaced it", s)
	}
}

// A node-local half-open breaker without a permit is refused as
// half-open-no-permit (the wire used to say only "node-local open").
func TestNodeLocalHalfOpenWithoutPermit(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("dns")
	s := snapshot("dns", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	s.NodeLocalOpen = true
	s.LocalState = fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN
	s.OpenCount = 3
	s.ProbeRound = 2
	withPolicy(s, func(p *sharedstate.Policy) { p.Breaker.SlowCallDuration = sharedstate.Duration(time.Second) })
	f.push(s)
	sstest.Eventually(t, 10*time.Second, "the snapshot", func() bool { return dep.Status().LocalState == HalfOpen })
	var rej *RejectedError
	if _, err := dep.Allow(First); !errors.As(err, &rej) || rej.Reason != "half-open-no-permit" || !errors.Is(err, ErrOpen) {
		t.Errorf("Allow: %v, want a half-open-no-permit refusal", err)
	}
	if got := dep.st.dec.Load().snap; got.OpenCount != 3 || got.ProbeRound != 2 || got.Policy.Breaker.SlowCallDuration != sharedstate.Duration(time.Second) {
		t.Errorf("snapshot %+v: fields lost", *got)
	}
}
