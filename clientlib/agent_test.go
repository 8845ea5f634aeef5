package clientlib

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestSessionHelloCountsAndSubscribe(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{Service: "checkout", Instance: "checkout-7", Dependencies: []string{"shipping"}})
	f.mu.Lock()
	h := f.hellos[0]
	f.mu.Unlock()
	if h.GetService() != "checkout" || h.GetInstance() != "checkout-7" || len(h.GetDependencies()) != 1 ||
		h.GetDependencies()[0] != "shipping" || h.GetClientVersion() != Version {
		t.Errorf("hello %v", h)
	}
	dep := c.Dependency("shipping")
	for i := 0; i < 10; i++ {
		_ = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil })
	}
	_ = dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error { return errUnavailable })
	sstest.Eventually(t, 10*time.Second, "the deltas at the agent", func() bool {
		got := f.countsOf("shipping")
		return got.FirstAttempts == 11 && got.Successes == 10 && got.Failures == 1
	})
	// A dependency first used now is subscribed in the next deltas.
	_ = c.Dependency("billing").Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil })
	sstest.Eventually(t, 10*time.Second, "the subscription to billing", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range f.subscribed {
			if s == "billing" {
				return true
			}
		}
		return false
	})
}

// Breaker open (snapshot pushed by the agent): the fallback is called with
// ErrOpen and fn never is.
func TestBreakerOpenFromAgentCallsFallback(t *testing.T) {
	f := newFakeAgent(t)
	var changes []StateChange
	var mu sync.Mutex
	c := agentClient(t, f, Config{OnStateChange: func(sc StateChange) {
		mu.Lock()
		changes = append(changes, sc)
		mu.Unlock()
	}})
	dep := c.Dependency("shipping")
	f.push(snapshot("shipping", fuseboxv1.BreakerState_BREAKER_STATE_OPEN))
	sstest.Eventually(t, 10*time.Second, "the open snapshot", func() bool { s := dep.Status(); return s.State == Open && s.FromAgent })

	called := false
	var fbErr error
	err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		called = true
		return nil
	}, WithFallback(func(ctx context.Context, err error) error {
		fbErr = err
		return nil
	}))
	if err != nil || called || !errors.Is(fbErr, ErrOpen) {
		t.Errorf("err %v, fn called %v, fallback got %v; want the fallback with ErrOpen and no call", err, called, fbErr)
	}
	var rej *RejectedError
	if !errors.As(fbErr, &rej) || rej.Dependency != "shipping" || rej.Reason != "open" {
		t.Errorf("fallback error %#v: want a *RejectedError naming the dependency", fbErr)
	}
	if _, err := dep.Allow(First); !errors.Is(err, ErrOpen) {
		t.Errorf("Allow: %v, want ErrOpen", err)
	}

	forced := snapshot("shipping", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	forced.Override = fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN
	f.push(forced)
	sstest.Eventually(t, 10*time.Second, "the forced-open snapshot", func() bool { return dep.Status().Override == ForcedOpen })
	err = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil })
	if !errors.Is(err, ErrForcedOpen) || !errors.Is(err, ErrOpen) || called {
		t.Errorf("forced open: err %v, called %v", err, called)
	}

	f.push(snapshot("shipping", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED))
	sstest.Eventually(t, 10*time.Second, "the closed snapshot", func() bool { return !dep.Status().Rejecting() })
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil }); err != nil {
		t.Errorf("closed again: %v", err)
	}
	sstest.Eventually(t, 10*time.Second, "the rejections at the agent", func() bool { return f.countsOf("shipping").Rejected == 3 })
	sstest.Eventually(t, 10*time.Second, "the state-change callbacks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changes) >= 3
	})
	mu.Lock()
	if changes[0].To.State != Open || changes[0].From.State != Closed {
		t.Errorf("first change %+v, want closed → open", changes[0])
	}
	mu.Unlock()
}

func TestRetryAsksAgentBudget(t *testing.T) {
	f := newFakeAgent(t)
	f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
		return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT,
			Reason: fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED}, nil
	}
	c := agentClient(t, f, Config{})
	n := 0
	err := c.Dependency("ledger").Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		n++
		return errUnavailable
	})
	if n != 1 || !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, errUnavailable) {
		t.Errorf("%d attempts, err %v; want 1 and ErrBudgetExhausted joined with the attempt's error", n, err)
	}
	if retry, _, _ := f.calls(); retry != 1 {
		t.Errorf("%d AcquireRetry calls, want 1", retry)
	}
	if s := c.Dependency("ledger").st.sum(); s.rejectedAgent != 1 || s.rejected != 0 {
		t.Errorf("counted %+v: the agent's refusal is the agent's to count", s)
	}
}

func TestHalfOpenProbeThroughAgent(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("search")
	half := snapshot("search", fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN)
	half.ProbePermit = true
	f.push(half)
	sstest.Eventually(t, 10*time.Second, "the half-open snapshot", func() bool { return dep.Status().State == HalfOpen })
	var probe bool
	if err := dep.Do(context.Background(), Idempotent, func(ctx context.Context, a Attempt) error {
		probe = a.Probe
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, p, _ := f.calls(); p != 1 || !probe {
		t.Errorf("%d AcquireProbe calls, probe %v; want one probe", p, probe)
	}
	sstest.Eventually(t, 10*time.Second, "the probe result", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.probes) == 1 && f.probes[0].GetSuccess() && f.probes[0].GetGeneration() == 7
	})
	// Without the permit, half-open rejects in process.
	half.ProbePermit = false
	f.push(half)
	sstest.Eventually(t, 10*time.Second, "the snapshot without permit", func() bool { _, err := dep.Allow(First); return errors.Is(err, ErrOpen) })
}

func TestStrictConsultAsksCheck(t *testing.T) {
	f := newFakeAgent(t)
	f.onCheck = func(context.Context, *fuseboxv1.CheckRequest) (*fuseboxv1.Decision, error) {
		return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT, Reason: fuseboxv1.RejectReason_REJECT_REASON_OPEN}, nil
	}
	c := agentClient(t, f, Config{})
	called := false
	err := c.Dependency("db").Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil },
		StrictConsult())
	if !errors.Is(err, ErrOpen) || called {
		t.Errorf("err %v, called %v; want the agent's refusal", err, called)
	}
	if _, _, check := f.calls(); check != 1 {
		t.Errorf("%d Check calls, want 1", check)
	}
}

// An agent that never answers AcquireRetry costs a retry at most AgentWait:
// the local budget decides and the call succeeds.
func TestHungAgentDecidesLocally(t *testing.T) {
	f := newFakeAgent(t)
	f.onRetry = func(ctx context.Context, _ *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-ctx.Done(): // hangs until the client gives up
			return nil, ctx.Err()
		case <-timer.C:
			t.Error("the client waited 10 s on a hung AcquireRetry: AgentWait was not applied")
			return nil, errors.New("fake agent: gave up after 10 s")
		}
	}
	c := agentClient(t, f, Config{})
	n := 0
	err := c.Dependency("ledger").Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		if n++; n == 1 {
			return errUnavailable
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Errorf("err %v after %d attempts, want success on the (locally admitted) retry", err, n)
	}
	if got := c.metrics.fallbacks[0].Load(); got != 1 {
		t.Errorf("%d acquire_retry fallbacks counted, want 1", got)
	}
}

// The agent is killed mid-traffic: no call blocks past its deadline, calls
// succeed on the local fallback, the client says so, and it reconnects when
// the agent is back.
func TestAgentKilledMidTraffic(t *testing.T) {
	f := newFakeAgent(t)
	var events []AgentEvent
	var mu sync.Mutex
	c := agentClient(t, f, Config{OnAgentChange: func(ev AgentEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}})
	dep := c.Dependency("shipping")
	f.push(snapshot("shipping", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED))
	sstest.Eventually(t, 10*time.Second, "the agent's snapshot", func() bool { return dep.Status().FromAgent })

	var (
		calls, failed atomic.Int64
		stop          = make(chan struct{})
		wg            sync.WaitGroup
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := dep.Do(ctx, Idempotent, func(ctx context.Context, a Attempt) error {
					if a.Number == 1 && i%25 == 0 {
						return errUnavailable // one call in 25 needs a retry: within the 10% budget
					}
					return nil
				})
				if err != nil {
					failed.Add(1)
					t.Errorf("call failed: %v", err)
				}
				if ctx.Err() != nil {
					t.Errorf("a call outlived its deadline")
				}
				cancel()
				calls.Add(1)
				time.Sleep(2 * time.Millisecond) // pace the traffic (not a wait for state)
			}
		}()
	}
	sstest.Eventually(t, 10*time.Second, "traffic through the agent", func() bool { return f.countsOf("shipping").Successes > 20 })
	f.stop()
	sstest.Eventually(t, 10*time.Second, "the client to notice", func() bool { return !c.AgentConnected() })
	if dep.Status().FromAgent {
		t.Error("still deciding from the dead agent's snapshot")
	}
	before := calls.Load()
	sstest.Eventually(t, 10*time.Second, "calls on the local fallback", func() bool { return calls.Load() > before+50 })

	f.start()
	sstest.Eventually(t, 10*time.Second, "the reconnection", c.AgentConnected)
	sstest.Eventually(t, 10*time.Second, "the snapshot again", func() bool { return dep.Status().FromAgent })
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed", failed.Load(), calls.Load())
	}
	sstest.Eventually(t, 10*time.Second, "the agent events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if !events[0].Connected || events[1].Connected || !events[2].Connected {
		t.Errorf("agent events %+v, want connected, lost, connected", events)
	}
	if f.helloCount() < 2 {
		t.Errorf("%d hellos, want a second session", f.helloCount())
	}
}

// With no agent at all, calls work, and on the local breaker.
func TestNoAgentLocalBreaker(t *testing.T) {
	dir := t.TempDir()
	c := newClient(t, Config{AgentAddress: "unix://" + dir + "/nobody.sock", Random: zeroRandom,
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 10 * time.Millisecond})
	dep := c.Dependency("flaky")
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil }); err != nil {
		t.Fatalf("call without an agent: %v", err)
	}
	if c.AgentConnected() {
		t.Fatal("connected to nobody")
	}
	errDown := status.Error(codes.Unavailable, "down")
	sstest.Eventually(t, 10*time.Second, "the local breaker to open", func() bool {
		_ = dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error { return errDown })
		return dep.Status().State == Open
	})
	called := false
	err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil })
	if !errors.Is(err, ErrOpen) || called {
		t.Errorf("err %v, called %v: want the local breaker's refusal", err, called)
	}
	if s := dep.Status(); s.FromAgent {
		t.Errorf("status %+v claims the agent decided", s)
	}
}

func TestAgentRefusedDependencyDecidesLocally(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("x")
	f.mu.Lock()
	for out := range f.sessions {
		out <- &fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Error{
			Error: &fuseboxv1.DependencyError{Dependency: "x", Message: "too many dependencies"}}}
	}
	f.mu.Unlock()
	sstest.Eventually(t, 10*time.Second, "the refusal", dep.st.refused.Load)
	n := 0
	err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		if n++; n == 1 {
			return errUnavailable
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Errorf("err %v after %d attempts", err, n)
	}
	if retry, _, _ := f.calls(); retry != 0 {
		t.Errorf("%d AcquireRetry calls for a refused dependency, want 0 (local budget)", retry)
	}
}

func TestCloseIsIdempotentAndFlushes(t *testing.T) {
	f := newFakeAgent(t)
	c, err := New(Config{AgentAddress: f.address(), Service: "s", Instance: "i", ReconnectMin: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the session", c.AgentConnected)
	_ = c.Dependency("d").Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil })
	c.Close()
	c.Close()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done() not closed within 10 s of Close returning")
	}
	if got := f.countsOf("d"); got.FirstAttempts != 1 || got.Successes != 1 {
		t.Errorf("agent got %+v after Close, want the last deltas flushed", got)
	}
}

func TestAgentMissingIsReportedOnce(t *testing.T) {
	events := make(chan AgentEvent, 64)
	c := newClient(t, Config{AgentAddress: "unix://" + t.TempDir() + "/none.sock",
		ReconnectMin: time.Millisecond, ReconnectMax: 2 * time.Millisecond,
		OnAgentChange: func(ev AgentEvent) { events <- ev }})
	sstest.Eventually(t, 10*time.Second, "a few reconnection attempts", func() bool { return c.metrics.sessionFailures.Load() >= 4 })
	c.Close() // delivers every queued event
	if len(events) != 1 {
		t.Fatalf("%d events, want one", len(events))
	}
	if ev := <-events; ev.Connected || ev.Err == nil {
		t.Errorf("event %+v, want disconnected with the reason", ev)
	}
}
