package clientlib

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// The stripes' padding keeps each on its own cache line: the concurrency
// slots' free count took part of it.
func TestStripeSize(t *testing.T) {
	if n := unsafe.Sizeof(stripe{}); n != 64 {
		t.Errorf("a stripe is %d bytes, want exactly one 64-byte cache line", n)
	}
}

// bareDep is a dependency's state without a client around it (no
// goroutines), with nstripes stripes, deciding under the given limit.
func bareDep(nstripes int, limit int64) *depState {
	st := newDepState(&Client{nstripes: nstripes}, "bare-api", nil, nstripes)
	setLimit(st, limit)
	return st
}

// setLimit publishes a decision with the given concurrency limit, as a
// pushed snapshot would.
func setLimit(st *depState, limit int64) {
	st.dec.Store(&decision{limit: limit})
}

// One goroutine taking and giving back slots on any stripes: a slot is
// granted exactly when fewer are held than the limit the tokens are issued
// for, whatever the stripes, batches, shrinks, growths and removals before
// (and releases that raced a shrink); and InFlight always says how many are
// held. A call re-issues the tokens
// for the newest limit when the limit it saw differs from theirs; a call
// that saw an older limit equal to theirs decides under it, as if it had
// come just before the change.
func TestSlotsExactProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.SampledFrom([]int{4, 8, 16}).Draw(rt, "stripes")
		limit := rapid.Int64Range(0, 100).Draw(rt, "limit")
		st := bareDep(n, limit)
		var (
			held   []int // the stripe each held slot was taken on
			issued int64
		)
		acquire := func(rt *rapid.T, seen int64) {
			i := rapid.IntRange(0, n-1).Draw(rt, "stripe")
			if seen != issued && limit > 0 {
				issued = limit
			}
			got, want := st.tryAcquire(&st.stripes[i], seen), int64(len(held)) < issued
			if got != want {
				rt.Fatalf("acquire on stripe %d by a call that saw limit %d, with %d held under limit %d (tokens for %d): got %v",
					i, seen, len(held), limit, issued, got)
			}
			if got {
				held = append(held, i)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"acquire": func(rt *rapid.T) {
				if limit <= 0 {
					rt.Skip("no limit: calls take no slot")
				}
				acquire(rt, limit)
			},
			"acquire with a stale limit": func(rt *rapid.T) {
				acquire(rt, rapid.Int64Range(1, 100).Draw(rt, "seen"))
			},
			"release": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("nothing held")
				}
				k := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
				st.slots.release(&st.stripes[held[k]])
				held = append(held[:k], held[k+1:]...)
			},
			// A release that read the pool before a concurrent shrink put
			// it in debt: its token lands in its stripe all the same.
			"release racing a shrink": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("nothing held")
				}
				k := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
				st.stripes[held[k]].free.Add(1)
				held = append(held[:k], held[k+1:]...)
			},
			"new limit": func(rt *rapid.T) {
				limit = rapid.Int64Range(0, 100).Draw(rt, "limit")
				setLimit(st, limit)
			},
			"": func(rt *rapid.T) {
				if got := st.slots.inFlight(); got != int64(len(held)) {
					rt.Fatalf("InFlight %d with %d held", got, len(held))
				}
				for i := range st.stripes {
					if f := st.stripes[i].free.Load(); f < 0 {
						rt.Fatalf("stripe %d has %d free", i, f)
					}
				}
			},
		})
	})
}

// A call is not refused while a slot is free on another stripe: a slot
// given back on stripe a is taken by a call on stripe b.
func TestSlotsBorrowFromOtherStripes(t *testing.T) {
	st := bareDep(4, 1)
	for a := range st.stripes {
		for b := range st.stripes {
			if !st.tryAcquire(&st.stripes[a], 1) {
				t.Fatalf("stripe %d: the only slot refused", a)
			}
			st.slots.release(&st.stripes[a])
			if !st.tryAcquire(&st.stripes[b], 1) {
				t.Fatalf("stripe %d refused the slot stripe %d gave back", b, a)
			}
			for c := range st.stripes {
				if st.tryAcquire(&st.stripes[c], 1) {
					t.Fatalf("stripe %d got a second slot under limit 1", c)
				}
			}
			st.slots.release(&st.stripes[b])
		}
	}
	// A larger limit held through several stripes comes back whole to one.
	setLimit(st, 64)
	for i := range 64 {
		if !st.tryAcquire(&st.stripes[i%4], 64) {
			t.Fatalf("slot %d of 64 refused", i+1)
		}
	}
	for i := range 64 {
		st.slots.release(&st.stripes[i%4])
	}
	for i := range 64 {
		if !st.tryAcquire(&st.stripes[3], 64) {
			t.Fatalf("stripe 3: slot %d of 64 refused while the others keep free slots", i+1)
		}
	}
	if st.tryAcquire(&st.stripes[0], 64) {
		t.Fatal("a 65th slot under limit 64")
	}
	if n := st.slots.inFlight(); n != 64 {
		t.Errorf("InFlight %d, want 64", n)
	}
}

// maxCounter counts calls holding a slot as the test sees them: taken after
// the admission and given back before the release, so it never exceeds
// what the semaphore holds.
type maxCounter struct{ cur, max atomic.Int64 }

func (m *maxCounter) enter() int64 {
	n := m.cur.Add(1)
	for { // bounded by n: max only grows, and the loop ends once it reaches n
		old := m.max.Load()
		if n <= old || m.max.CompareAndSwap(old, n) {
			return n
		}
	}
}

func (m *maxCounter) leave() { m.cur.Add(-1) }

// Many goroutines racing for 3 slots through Allow and Do (some waiting for
// one) never hold more than 3, and every slot comes back.
func TestConcurrencyLimitExactUnderContention(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("narrow-api")
	s := snapshot("narrow-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	f.pushLimit(t, dep, s, 3)

	var (
		held              maxCounter
		admitted, refused atomic.Int64
		wg                sync.WaitGroup
		errs              = make(chan error, 16)
	)
	for g := range 10 {
		wg.Go(func() {
			for range 400 {
				if g < 2 { // Do, waiting for a slot
					err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
						held.enter()
						runtime.Gosched()
						held.leave()
						return nil
					}, WaitForSlot(time.Minute))
					if err != nil {
						errs <- err
						return
					}
					admitted.Add(1)
					continue
				}
				done, err := dep.Allow(First)
				if err != nil {
					if !errors.Is(err, ErrConcurrencyLimit) {
						errs <- err
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				held.enter()
				runtime.Gosched()
				held.leave()
				done(Success)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call: %v", err)
	}
	if m := held.max.Load(); m > 3 || m < 1 {
		t.Errorf("at most %d calls held a slot at once, want 1 to 3", m)
	}
	t.Logf("%d admitted, %d refused, at most %d at once", admitted.Load(), refused.Load(), held.max.Load())
	if n := dep.InFlight(); n != 0 {
		t.Errorf("InFlight %d after every call returned, want 0", n)
	}
	f.waitInFlight(t, "narrow-api", 0)
}

// After a shrink below what is held, goroutines racing for a slot get none
// until the calls from before gave back enough: never more than the new
// limit are held by the time one is admitted.
func TestSlotsShrinkUnderContention(t *testing.T) {
	st := bareDep(4, 3)
	var held maxCounter
	for i := range 3 {
		if !st.tryAcquire(&st.stripes[i], 3) {
			t.Fatalf("slot %d of 3 refused", i+1)
		}
		held.enter()
	}
	setLimit(st, 1)
	var (
		stop     atomic.Bool
		admitted atomic.Int64
		over     atomic.Int64
		wg       sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			sp := &st.stripes[g]
			for !stop.Load() {
				if !st.tryAcquire(sp, 1) {
					runtime.Gosched()
					continue
				}
				if n := held.enter(); n > 1 {
					over.Store(n)
				}
				admitted.Add(1)
				runtime.Gosched()
				held.leave()
				st.slots.release(sp)
			}
		})
	}
	// Give the slots back one by one, on other stripes than they came from.
	for i := range 3 {
		held.leave()
		st.slots.release(&st.stripes[3-i])
	}
	sstest.Eventually(t, 10*time.Second, "admissions after the calls from before returned", func() bool { return admitted.Load() >= 100 })
	stop.Store(true)
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Errorf("a call was admitted with %d holding a slot under limit 1", n)
	}
	if n := st.slots.inFlight(); n != 0 {
		t.Errorf("InFlight %d after every call returned, want 0", n)
	}
}

// Shrink, growth, removal and a new limit through pushed snapshots, with
// calls holding slots throughout.
func TestConcurrencyLimitChanges(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("pool-api")
	s := snapshot("pool-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	setTo := func(limit uint32) {
		t.Helper()
		f.pushLimit(t, dep, s, limit)
	}
	var held []func(Outcome)
	take := func(n int, what string) {
		t.Helper()
		for i := range n {
			done, err := dep.Allow(First)
			if err != nil {
				t.Fatalf("%s: call %d of %d refused: %v", what, i+1, n, err)
			}
			held = append(held, done)
		}
	}
	refuse := func(what string) {
		t.Helper()
		if done, err := dep.Allow(First); !errors.Is(err, ErrConcurrencyLimit) {
			if err == nil {
				done(Success)
			}
			t.Fatalf("%s: %v, want ErrConcurrencyLimit", what, err)
		}
	}
	giveBack := func(n int) {
		for range n {
			held[0](Success)
			held = held[1:]
		}
	}
	inFlight := func(want int64, what string) {
		t.Helper()
		if n := dep.InFlight(); n != want {
			t.Errorf("%s: InFlight %d, want %d", what, n, want)
		}
	}

	setTo(5)
	take(5, "limit 5")
	refuse("a sixth under limit 5")

	// A shrink revokes nothing; new calls wait until fewer than 2 are held.
	setTo(2)
	refuse("5 held under limit 2")
	inFlight(5, "after the shrink")
	giveBack(3)
	refuse("2 held under limit 2")
	giveBack(1)
	take(1, "1 held under limit 2")
	refuse("2 held again under limit 2")

	// A growth makes room at once.
	setTo(4)
	take(2, "limit 4")
	refuse("4 held under limit 4")
	inFlight(4, "under limit 4")

	// Without a limit calls take no slot; the ones from before still count.
	setTo(0)
	free := make([]func(Outcome), 0, 3)
	for range 3 {
		done, err := dep.Allow(First)
		if err != nil {
			t.Fatalf("no limit: %v", err)
		}
		free = append(free, done)
	}
	inFlight(4, "without a limit, 4 held from before")
	giveBack(2)
	inFlight(2, "without a limit, 2 held from before")

	// A new limit counts the 2 still held.
	setTo(3)
	take(1, "2 held under limit 3")
	refuse("3 held under limit 3")
	giveBack(3)
	for _, done := range free {
		done(Success)
	}
	inFlight(0, "every call returned")
	take(3, "limit 3 again")
	giveBack(3)
	inFlight(0, "every call returned again")
	f.waitInFlight(t, "pool-api", 0)
}

// A call waiting for a slot gets one when a new limit makes room, without
// any release.
func TestWaitForSlotWokenByGrowth(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("pool-api")
	s := snapshot("pool-api", fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	f.pushLimit(t, dep, s, 1)
	done, err := dep.Allow(First)
	if err != nil {
		t.Fatal(err)
	}
	defer done(Success)
	res := make(chan error, 1)
	go func() {
		res <- dep.Do(context.Background(), Idempotent, noopAttempt, WaitForSlot(time.Minute))
	}()
	sstest.Eventually(t, 10*time.Second, "the waiting call", func() bool { return dep.st.slots.waiters.Load() == 1 })
	f.pushLimit(t, dep, s, 2)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the waiting call after limit 2: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call got no slot within 10 s of limit 2")
	}
}
