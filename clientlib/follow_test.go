package clientlib

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// The tests of where the local fallback starts from when the agent goes
// away run in a synctest bubble, like local_test.go's: minutes pass at
// once.

// followBreaker is the breaker the fake agent pushes here: 5 requests at
// 60% trip it (the classic rule), it stays open 5 s, twice as long at
// each open in a row, and 3 probe successes close it.
func followBreaker() sharedstate.BreakerPolicy {
	b := testBreaker()
	b.OpenDuration = sharedstate.Duration(5 * time.Second)
	b.MaxOpenDuration = sharedstate.Duration(time.Minute)
	b.FleetMaxOpenDuration = sharedstate.Duration(time.Minute)
	return b
}

// fleetAt is a snapshot of dep as the agent pushes it: the breaker of the
// given scope in state since since, generation gen (0 under scope node),
// under followBreaker, as version version.
func fleetAt(dep string, scope fuseboxv1.Scope, state fuseboxv1.BreakerState, gen uint64, openCount uint32, since time.Time, version uint64) *fuseboxv1.DecisionSnapshot {
	s := snapshot(dep, state)
	s.Generation, s.OpenCount, s.Version = gen, openCount, version
	if scope == fuseboxv1.Scope_SCOPE_NODE {
		s.Generation = 0
	}
	if !since.IsZero() {
		s.Since = timestamppb.New(since)
	}
	return withPolicy(s, func(p *sharedstate.Policy) {
		p.Breaker = followBreaker()
		p.Breaker.Scope = map[fuseboxv1.Scope]sharedstate.Scope{fuseboxv1.Scope_SCOPE_FLEET: sharedstate.ScopeFleet,
			fuseboxv1.Scope_SCOPE_ZONE: sharedstate.ScopeZone, fuseboxv1.Scope_SCOPE_NODE: sharedstate.ScopeNode}[scope]
	})
}

// holdFirsts takes n first attempts with Allow and keeps them in flight:
// it returns their done functions and the refusals.
func holdFirsts(dep *Dependency, n int) (dones []func(Outcome), refused []error) {
	for range n {
		done, err := dep.Allow(First)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		dones = append(dones, done)
	}
	return dones, refused
}

// The fleet's breaker trips, and this client's local breaker with it (it
// counts the same failures); the fleet recovers and closes; three minutes
// later the agent goes away. The local breaker starts from the fleet's
// close: closed, under the close's generation and since, and no call is
// refused — not even calls made together, which a local breaker left
// half-open by its own trip would refuse as half-open-no-permit but one.
func TestFallbackStartsFromTheFleetsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "payments"
		f := newMemoryAgent(t)
		c := memoryClient(t, f, slowReconnects)
		dep := c.Dependency(name)
		fleet := fuseboxv1.Scope_SCOPE_FLEET
		f.push(fleetAt(name, fleet, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED, 0, 0, time.Time{}, 1))
		sstest.Eventually(t, 10*time.Second, "the agent's snapshot and policy", func() bool {
			return dep.Status().FromAgent && c.engine.Policy(name).Breaker == followBreaker()
		})

		// The dependency fails: the agent trips the fleet's breaker, and
		// the local breaker, fed the same failures, opens too.
		errDown := status.Error(codes.Internal, "down")
		for range 5 {
			if err := dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error { return errDown }); !errors.Is(err, errDown) {
				t.Fatalf("a failing call: %v", err)
			}
		}
		time.Sleep(time.Second) // flushes: the local breaker counts the failures
		tripped := time.Now()
		f.push(fleetAt(name, fleet, fuseboxv1.BreakerState_BREAKER_STATE_OPEN, 1, 1, tripped, 2))
		time.Sleep(time.Second)
		if s := dep.Status(); s.State != Open || !s.FromAgent {
			t.Fatalf("after the trip: %+v, want the agent's open breaker", s)
		}
		if s := c.engine.Snapshot(name); s == nil || s.State != Open {
			t.Fatalf("the local breaker after the trip: %+v, want open along with the fleet's", s)
		}

		// The fleet recovers: half-open after 5 s, closed by probes.
		time.Sleep(time.Until(tripped.Add(5 * time.Second)))
		f.push(fleetAt(name, fleet, fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN, 1, 1, tripped, 3))
		time.Sleep(2 * time.Second)
		closed := time.Now()
		f.push(fleetAt(name, fleet, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED, 2, 0, closed, 4))
		time.Sleep(time.Second)
		if s := dep.Status(); s.State != Closed || !s.FromAgent || s.Generation != 2 {
			t.Fatalf("after the recovery: %+v, want the agent's closed breaker, generation 2", s)
		}

		// Three minutes later, the agent goes away.
		time.Sleep(3 * time.Minute)
		killAgent(t, f, c)
		s := dep.Status()
		if s.FromAgent || s.State != Closed || s.LocalState != Closed || s.Generation != 2 || !s.Since.Equal(closed) {
			t.Errorf("the local breaker without the agent: %+v, want closed, generation 2 since %v (the fleet's close)", s, closed)
		}
		dones, refused := holdFirsts(dep, 8)
		if len(refused) != 0 {
			t.Errorf("8 calls at once without the agent: %d refused (%v), want none", len(refused), refused)
		}
		for _, done := range dones {
			done(Success)
		}
		if called, err := call(dep); !called || err != nil {
			t.Errorf("a call without the agent: called %v, err %v", called, err)
		}
	})
}

// The agent goes away while the fleet's breaker is open (scope fleet), or
// its host's own (scope node): the local breaker is open, under the
// fleet's generation, for the time the fleet's had left, then half-open.
func TestFallbackStartsFromTheFleetsOpenBreaker(t *testing.T) {
	for _, scope := range []fuseboxv1.Scope{fuseboxv1.Scope_SCOPE_FLEET, fuseboxv1.Scope_SCOPE_NODE} {
		t.Run(scope.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const name = "ledger"
				f := newMemoryAgent(t)
				c := memoryClient(t, f, slowReconnects)
				dep := c.Dependency(name)
				wantGen := uint64(3)
				if scope == fuseboxv1.Scope_SCOPE_NODE {
					wantGen = 0
				}
				// Open for 2 s already, its second open in a row: 10 s in all.
				opened := time.Now().Add(-2 * time.Second)
				f.push(fleetAt(name, scope, fuseboxv1.BreakerState_BREAKER_STATE_OPEN, 3, 2, opened, 1))
				sstest.Eventually(t, 10*time.Second, "the agent's open breaker", func() bool {
					s := dep.Status()
					return s.FromAgent && s.State == Open
				})
				killAgent(t, f, c)
				if s := dep.Status(); s.FromAgent || s.State != Open || s.Generation != wantGen || !s.Since.Equal(opened) {
					t.Errorf("the local breaker without the agent: %+v, want open, generation %d since %v", s, wantGen, opened)
				}
				if called, err := call(dep); called || !errors.Is(err, ErrOpen) {
					t.Errorf("a call on the open breaker: called %v, err %v; want ErrOpen", called, err)
				}
				time.Sleep(time.Until(opened.Add(10*time.Second)) - 10*time.Millisecond)
				if s := dep.Status(); s.State != Open {
					t.Errorf("just before the fleet's open duration ends: %+v, want still open", s)
				}
				time.Sleep(time.Second) // the flusher ticks the local breaker
				if s := dep.Status(); s.State != HalfOpen || s.FromAgent {
					t.Errorf("once the fleet's open duration ended: %+v, want the local breaker half-open", s)
				}
				if called, err := call(dep); !called || err != nil {
					t.Errorf("a probe on the half-open local breaker: called %v, err %v", called, err)
				}
			})
		})
	}
}

// refusingCounts is an engine in process that refuses a client's counts
// once told to (as past its cap).
type refusingCounts struct {
	*engineAdapter
	refuse atomic.Bool
}

func (r *refusingCounts) AddCounts(dep string, c sharedstate.Counts) error {
	if r.refuse.Load() {
		return &sharedstate.TooManyDependenciesError{Dependency: dep, Limit: 1}
	}
	return r.engineAdapter.AddCounts(dep, c)
}

// In process, the engine's breaker is open when the engine refuses the
// dependency's counts: the local breaker takes over from the engine's last
// snapshot, open under its generation, not from a closed breaker of its
// own.
func TestInProcessRefusalStartsFromTheEnginesLastSnapshot(t *testing.T) {
	a := newEngineAdapter(t, nil)
	eng := &refusingCounts{engineAdapter: a}
	c := inProcessClient(t, eng, Config{})
	dep := c.Dependency("search")
	for range 5 {
		if err := a.e.Record("search", sharedstate.FirstAttempt, sharedstate.Failure); err != nil {
			t.Fatal(err)
		}
	}
	a.e.Tick()
	sstest.Eventually(t, 10*time.Second, "the engine's open breaker", func() bool {
		s := dep.Status()
		return s.FromAgent && s.State == Open
	})
	gen, since := dep.Status().Generation, dep.Status().Since
	eng.refuse.Store(true)
	if called, err := call(dep); called || !errors.Is(err, ErrOpen) {
		t.Fatalf("a call on the engine's open breaker: called %v, err %v", called, err)
	}
	sstest.Eventually(t, 10*time.Second, "the refusal of the counts", func() bool { return !dep.Status().FromAgent })
	if s := dep.Status(); s.State != Open || s.Generation != gen || !s.Since.Equal(since) {
		t.Errorf("the local breaker after the refusal: %+v, want open, generation %d since %v", s, gen, since)
	}
	if called, err := call(dep); called || !errors.Is(err, ErrOpen) {
		t.Errorf("a call on the local breaker: called %v, err %v; want ErrOpen", called, err)
	}
}
