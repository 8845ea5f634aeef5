package clientlib

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// alternating returns 0, 1<<63, 0, …: with probability 0.5, exactly every
// other draw is below the cut-off.
func alternating() func() uint64 {
	var n atomic.Uint64
	return func() uint64 { return (n.Add(1) % 2) << 63 }
}

func TestThrottledFromSnapshot(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{Random: alternating()})
	dep := c.Dependency("busy-api")
	s := snapshot("busy-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	s.ThrottleProbability = 0.5
	s.Version = 1
	f.push(s)
	sstest.Eventually(t, 10*time.Second, "the throttling snapshot", func() bool { return dep.st.dec.Load().throttleCut != 0 })

	refused, made := 0, 0
	for range 100 {
		done, err := dep.Allow(First)
		switch {
		case err == nil:
			made++
			done(Success)
		case errors.Is(err, ErrThrottled):
			refused++
			var rej *RejectedError
			if !errors.Is(err, ErrOpen) || !errors.As(err, &rej) || rej.Reason != "throttled" || rej.Dependency != "busy-api" {
				t.Fatalf("throttled error %#v: want a *RejectedError matching ErrThrottled and ErrOpen", err)
			}
		default:
			t.Fatalf("Allow: %v", err)
		}
	}
	if refused != 50 || made != 50 {
		t.Errorf("at probability 0.5 with alternating draws: %d refused, %d made; want 50 and 50", refused, made)
	}
	// Do refuses the same way without calling fn.
	calls := 0
	for range 4 {
		err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { calls++; return nil })
		if err != nil && !errors.Is(err, ErrThrottled) {
			t.Fatalf("Do: %v", err)
		}
	}
	if calls != 2 {
		t.Errorf("Do made %d of 4 calls at probability 0.5, want 2", calls)
	}
	sstest.Eventually(t, 10*time.Second, "the refusals at the agent", func() bool {
		c := f.countsOf("busy-api")
		return c.Rejected == 52 && c.FirstAttempts == 52
	})
	if n := testing.AllocsPerRun(100, func() {
		if done, err := dep.Allow(First); err == nil {
			done(Success)
		}
	}); n != 0 {
		t.Errorf("Allow allocates %v times at probability 0.5", n)
	}

	// Refusing through Do allocates nothing either.
	s.ThrottleProbability = 1
	s.Version = 2
	f.push(s)
	sstest.Eventually(t, 10*time.Second, "probability 1", func() bool { return dep.st.dec.Load().throttleCut == 1<<53 })
	if n := testing.AllocsPerRun(100, func() {
		if err := dep.Do(context.Background(), Idempotent, noopAttempt); !errors.Is(err, ErrThrottled) {
			t.Fatalf("Do at probability 1: %v", err)
		}
	}); n != 0 {
		t.Errorf("a throttled Do allocates %v times", n)
	}

	// Shadow mode: reported, never enforced.
	withPolicy(s, func(p *sharedstate.Policy) { p.Breaker.Mode = sharedstate.ModeShadow })
	s.Version = 3
	f.push(s)
	sstest.Eventually(t, 10*time.Second, "the shadow snapshot", func() bool { return dep.Status().Shadow })
	for range 10 {
		done, err := dep.Allow(First)
		if err != nil {
			t.Fatalf("shadow mode refused: %v", err)
		}
		done(Success)
	}
	if n := dep.st.rare.shadowThrottled.Load(); n != 10 {
		t.Errorf("shadow mode counted %d would-be refusals at probability 1, want 10", n)
	}
}

// TestRampRefusalsNamedAsTheRamp: after a close the agent's snapshot
// carries the ramp's part of the throttle probability; a first attempt
// whose draw falls below it is the ramp's refusal (Reason "ramp"), one
// above it and below the throttle probability the throttle's. Both match
// ErrThrottled and ErrOpen, and allocate nothing.
func TestRampRefusalsNamedAsTheRamp(t *testing.T) {
	f := newFakeAgent(t)
	var n atomic.Uint64
	draws := []uint64{0, 3 << 62 >> 1, 3 << 62} // 0, 0.375 and 0.75 of the range
	c := agentClient(t, f, Config{Random: func() uint64 { return draws[(n.Add(1)-1)%3] }})
	dep := c.Dependency("warming-api")
	s := snapshot("warming-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	s.ThrottleProbability, s.RampProbability = 0.5, 0.25
	s.Version = 1
	f.push(s)
	sstest.Eventually(t, 10*time.Second, "the ramping snapshot", func() bool { return dep.st.dec.Load().rampCut != 0 })
	for i, want := range []string{"ramp", "throttled", ""} {
		done, err := dep.Allow(First)
		if want == "" {
			if err != nil {
				t.Fatalf("draw %d: %v, want admitted", i, err)
			}
			done(Success)
			continue
		}
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.Reason != want || !errors.Is(err, ErrThrottled) || !errors.Is(err, ErrOpen) {
			t.Fatalf("draw %d: %#v, want a *RejectedError with Reason %q matching ErrThrottled and ErrOpen", i, err, want)
		}
	}
	if err := dep.Do(context.Background(), Idempotent, noopAttempt); err == nil || err.(*RejectedError).Reason != "ramp" {
		t.Fatalf("Do: %v, want the ramp's refusal", err)
	}
	if n := testing.AllocsPerRun(99, func() {
		if done, err := dep.Allow(First); err == nil {
			done(Success)
		}
	}); n != 0 {
		t.Errorf("Allow allocates %v times while ramping", n)
	}
	if err := dep.st.rejection(sharedstate.ReasonRamp); err != dep.st.rej[sharedstate.ReasonRamp] {
		t.Errorf("the agent's reason ramp maps to %v", err)
	}
}

func TestConcurrencyLimitFromSnapshot(t *testing.T) {
	f := newFakeAgent(t)
	reg := prometheus.NewRegistry()
	c := agentClient(t, f, Config{Registerer: reg})
	dep := c.Dependency("pool-api")
	s := snapshot("pool-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	f.pushLimit(t, dep, s, 2)

	d1, err1 := dep.Allow(First)
	d2, err2 := dep.Allow(First)
	if err1 != nil || err2 != nil {
		t.Fatalf("the first two: %v, %v", err1, err2)
	}
	if dep.InFlight() != 2 {
		t.Errorf("InFlight = %d, want 2", dep.InFlight())
	}
	want := `# TYPE fusebox_client_concurrency_limit gauge
fusebox_client_concurrency_limit{dependency="pool-api"} 2
# TYPE fusebox_client_in_flight gauge
fusebox_client_in_flight{dependency="pool-api"} 2`
	if got := series(t, reg, "fusebox_client_in_flight", "fusebox_client_concurrency_limit"); strings.TrimSpace(got) != want {
		t.Errorf("series:\n%s\nwant:\n%s", got, want)
	}
	_, err := dep.Allow(First)
	var rej *RejectedError
	if !errors.Is(err, ErrConcurrencyLimit) || errors.Is(err, ErrOpen) || !errors.As(err, &rej) || rej.Reason != "concurrency-limit" {
		t.Fatalf("third Allow: %v; want ErrConcurrencyLimit (not ErrOpen)", err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = dep.Allow(First) }); n != 0 {
		t.Errorf("a refused Allow allocates %v times", n)
	}
	called := false
	err = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { called = true; return nil })
	if !errors.Is(err, ErrConcurrencyLimit) || called {
		t.Fatalf("Do without a slot: err %v, called %v", err, called)
	}
	if err := dep.Do(context.Background(), Idempotent, noopAttempt, WaitForSlot(-time.Second)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WaitForSlot(-1s): %v, want ErrInvalidOption", err)
	}
	// The agent hears the in-flight count.
	f.waitInFlight(t, "pool-api", 2)

	// WaitForSlot waits for a release.
	res := make(chan error, 1)
	go func() {
		res <- dep.Do(context.Background(), Idempotent, noopAttempt, WaitForSlot(time.Minute))
	}()
	sstest.Eventually(t, 10*time.Second, "the waiting call", func() bool { return dep.st.slots.waiters.Load() == 1 })
	d1(Success)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("Do with WaitForSlot after a release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do with WaitForSlot did not get the released slot within 10 s")
	}
	// A wait that ends refuses.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, _ = dep.Allow(First) // take the free slot again
	if err := dep.Do(ctx, Idempotent, noopAttempt, WaitForSlot(time.Minute)); !errors.Is(err, ErrConcurrencyLimit) {
		t.Errorf("a wait cut short by the context: %v, want ErrConcurrencyLimit", err)
	}
	d2(Success)
	if dep.InFlight() != 1 {
		t.Errorf("InFlight = %d after releases, want 1", dep.InFlight())
	}

	// Without a limit nothing is held.
	f.pushLimit(t, dep, s, 0)
	for range 5 {
		if _, err := dep.Allow(First); err != nil {
			t.Fatalf("unlimited: %v", err)
		}
	}
	if dep.InFlight() != 1 {
		t.Errorf("InFlight = %d without a limit, want the 1 held from before", dep.InFlight())
	}
}

// benchShaped is benchClient's dependency (no agent, so nothing else runs)
// deciding as it would from an agent's snapshot that throttles with a
// vanishing probability (every call draws, none is refused) and limits
// concurrency far above what the benchmark reaches.
func benchShaped(b *testing.B, throttle bool, limit int64) *Dependency {
	dep := benchClient(b)
	st := dep.st
	// Once the local engine tracks the dependency its snapshot stays put
	// under steady successes; install the shaped decision over it then.
	sstest.Eventually(b, 10*time.Second, "the local engine's snapshot", func() bool {
		if done, err := dep.Allow(First); err == nil {
			done(Success)
		}
		s := st.c.engine.Snapshot(st.name)
		return s != nil && st.dec.Load().snap == s
	})
	st.mu.Lock()
	d := *st.dec.Load()
	if throttle {
		d.throttleCut = throttleCut(1e-12)
	}
	d.limit = limit
	st.dec.Store(&d)
	st.mu.Unlock()
	b.Cleanup(func() {
		if got := st.dec.Load(); (got.throttleCut != 0) != throttle || got.limit != limit {
			b.Errorf("the decision was replaced during the benchmark")
		}
	})
	return dep
}

// shapedCases are BenchmarkShaped's Fusebox rows: throttling and a
// concurrency limit, each on and off.
var shapedCases = []struct {
	name     string
	throttle bool
	limit    int64
}{{"fusebox-allow-done", false, 0}, {"fusebox-allow-done-throttle", true, 0},
	{"fusebox-allow-done-limit", false, 1 << 30}, {"fusebox-allow-done-throttle-limit", true, 1 << 30}}

// BenchmarkShaped: the hot path (Allow + done) with throttling enabled and
// with a concurrency limit, next to the plain one and gobreaker's Execute
// in the same run.
func BenchmarkShaped(b *testing.B) {
	for _, tc := range shapedCases {
		b.Run(tc.name, func(b *testing.B) {
			dep := benchShaped(b, tc.throttle, tc.limit)
			b.ReportAllocs()
			defer reportCPU(b)()
			allowDone(b, dep)
		})
	}
	b.Run("gobreaker-execute", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		defer reportCPU(b)()
		execute(b, cb)
	})
}

// BenchmarkShapedParallel is BenchmarkShaped under b.RunParallel.
func BenchmarkShapedParallel(b *testing.B) {
	for _, tc := range shapedCases {
		b.Run(tc.name, func(b *testing.B) {
			dep := benchShaped(b, tc.throttle, tc.limit)
			b.ReportAllocs()
			defer reportCPU(b)()
			allowDoneParallel(b, dep)
		})
	}
	b.Run("gobreaker-execute", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		defer reportCPU(b)()
		executeParallel(b, cb)
	})
}
