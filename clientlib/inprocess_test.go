package clientlib

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// engineAdapter is an Engine on a real sharedstate.Engine, as the agent's
// is, recording what the Client asked of it.
type engineAdapter struct {
	e     *sharedstate.Engine
	watch atomic.Pointer[func(string)]
	share atomic.Int64 // ConcurrencyLimit's answer when the snapshot sets a limit

	mu       sync.Mutex
	tracked  map[string]int
	inFlight map[string]uint64
	refuse   map[string]bool // Track fails
}

func newEngineAdapter(t *testing.T, pol func(*sharedstate.Policy)) *engineAdapter {
	t.Helper()
	a := &engineAdapter{tracked: map[string]int{}, inFlight: map[string]uint64{}, refuse: map[string]bool{}}
	e, err := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "node-1", OnChange: func(dep string) {
		if f := a.watch.Load(); f != nil {
			(*f)(dep)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 5
	p.Breaker.MinFailingNodes = 1
	p.Breaker.Confidence = 0
	p.Breaker.FastPath = false
	p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 1, MinRetriesPerSecond: 1000}
	if pol != nil {
		pol(&p)
	}
	if err := e.SetDefaultPolicy(p); err != nil {
		t.Fatal(err)
	}
	a.e = e
	return a
}

func (a *engineAdapter) Track(dep string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse[dep] {
		return sharedstate.ErrTooManyDependencies
	}
	a.tracked[dep]++
	return a.e.AddCounts(dep, sharedstate.Counts{})
}

func (a *engineAdapter) Release(dep string) {
	a.mu.Lock()
	a.tracked[dep]--
	a.mu.Unlock()
}

func (a *engineAdapter) Snapshot(dep string) *sharedstate.Snapshot { return a.e.Snapshot(dep) }
func (a *engineAdapter) Decide(dep string) sharedstate.Decision {
	return a.e.Decide(dep, sharedstate.FirstAttempt)
}
func (a *engineAdapter) AcquireRetry(dep string) sharedstate.Decision { return a.e.AcquireRetry(dep) }
func (a *engineAdapter) AcquireProbe(dep string) sharedstate.Decision { return a.e.AcquireProbe(dep) }
func (a *engineAdapter) ProbeOutcome(dep string, o sharedstate.Outcome) {
	a.e.ProbeOutcome(dep, o)
}
func (a *engineAdapter) AddCounts(dep string, c sharedstate.Counts) error {
	return a.e.AddCounts(dep, c)
}
func (a *engineAdapter) ConcurrencyLimit(string) int { return int(a.share.Load()) }
func (a *engineAdapter) ReportInFlight(dep string, old, n uint64) {
	a.mu.Lock()
	a.inFlight[dep] = a.inFlight[dep] - old + n
	a.mu.Unlock()
}
func (a *engineAdapter) Watch(f func(string)) {
	if f == nil {
		a.watch.Store(nil)
		return
	}
	a.watch.Store(&f)
}

func (a *engineAdapter) trackedCount(dep string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tracked[dep]
}

func (a *engineAdapter) inFlightOf(dep string) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight[dep]
}

// window is dep's counts in the engine.
func (a *engineAdapter) window(dep string) sharedstate.Counts {
	a.e.RowsToSend()
	for _, r := range a.e.LocalRows() {
		if r.Dependency == dep {
			return r.Counts
		}
	}
	return sharedstate.Counts{}
}

func inProcessClient(t *testing.T, eng Engine, cfg Config) *Client {
	t.Helper()
	cfg.Service, cfg.Random = "proxy-test", zeroRandom
	c, err := NewInProcess(cfg, eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The same loop decides through an engine in process: the engine's
// snapshots are pushed as they change (the breaker opening refuses the
// next call at once), retries come from its budget, counts go into it,
// and Forget and Close hand the dependency back.
func TestInProcessDecidesThroughTheEngine(t *testing.T) {
	a := newEngineAdapter(t, nil)
	c := inProcessClient(t, a, Config{})
	dep := c.Dependency("inventory")
	if a.trackedCount("inventory") != 1 || !dep.Status().FromAgent || !c.AgentConnected() {
		t.Fatalf("tracked %d times, %+v: want tracked once and the engine deciding", a.trackedCount("inventory"), dep.Status())
	}
	calls := 0
	for range 5 {
		_ = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
			calls++
			return errUnavailable
		})
	}
	if calls != 15 {
		t.Fatalf("%d attempts for 5 calls, want 3 each", calls)
	}
	sstest.Eventually(t, 10*time.Second, "the counts in the engine", func() bool {
		w := a.window("inventory")
		return w.FirstAttempts == 5 && w.Retries == 10 && w.Failures == 15
	})
	a.e.Tick() // the trip rule: 5 of 5 failed; the hook pushes the open snapshot
	var info CallInfo
	err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		calls++
		return nil
	}, WithCallInfo(&info))
	if !errors.Is(err, ErrOpen) || calls != 15 || info.Rejected == nil || info.Rejected.Reason != "open" {
		t.Errorf("after the trip: %v, %+v: want the call refused (open) at once", err, info)
	}

	c.Forget("inventory")
	sstest.Eventually(t, 10*time.Second, "the forgotten dependency released", func() bool { return a.trackedCount("inventory") == 0 })
	c.Dependency("other")
	c.Close()
	if n := a.trackedCount("other"); n != 0 {
		t.Errorf("after Close, other is tracked %d times, want released", n)
	}
	if a.watch.Load() != nil {
		t.Error("Close left the engine's hook set")
	}
}

// The Client's share of a concurrency limit is the engine's
// ConcurrencyLimit, its calls in flight are reported, and forgetting the
// dependency reports 0.
func TestInProcessConcurrencyShare(t *testing.T) {
	a := newEngineAdapter(t, func(p *sharedstate.Policy) { p.Concurrency.MaxInFlight = 10 })
	a.share.Store(1)
	c := inProcessClient(t, a, Config{})
	dep := c.Dependency("pool")
	a.e.Tick() // the node's share
	sstest.Eventually(t, 10*time.Second, "the share of 1", func() bool { return dep.st.dec.Load().limit == 1 })
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- dep.Do(context.Background(), Idempotent, func(ctx context.Context, _ Attempt) error {
			<-release
			return nil
		}, WithAttemptTimeout(0))
	}()
	sstest.Eventually(t, 10*time.Second, "the call in flight reported", func() bool { return a.inFlightOf("pool") == 1 })
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil }); !errors.Is(err, ErrConcurrencyLimit) {
		t.Errorf("a second call: %v, want ErrConcurrencyLimit (the share is 1)", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.share.Store(2)
	(*a.watch.Load())("pool") // the share changed: the agent says so
	if l := dep.st.dec.Load().limit; l != 2 {
		t.Errorf("limit %d after the share changed, want 2", l)
	}
	c.Forget("pool")
	sstest.Eventually(t, 10*time.Second, "in flight back to 0", func() bool { return a.inFlightOf("pool") == 0 && a.trackedCount("pool") == 0 })
}

// A name the engine refuses is decided by the local breaker: the call goes
// through.
func TestInProcessRefusedNameDecidesLocally(t *testing.T) {
	a := newEngineAdapter(t, nil)
	a.refuse["full"] = true
	c := inProcessClient(t, a, Config{})
	dep := c.Dependency("full")
	if dep.Status().FromAgent || dep.Untracked() {
		t.Errorf("%+v: want the local breaker deciding, tracked by the client", dep.Status())
	}
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil }); err != nil {
		t.Error(err)
	}
	c.Close()
	if n := a.trackedCount("full"); n != 0 {
		t.Errorf("a refused name was released: %d", n)
	}
}
