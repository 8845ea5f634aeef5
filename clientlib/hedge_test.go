package clientlib

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// slowEvery is a dependency whose every 20th answer (5%) takes slow and the
// others fast; a cancelled attempt returns at once. It counts attempts.
type slowEvery struct {
	n          atomic.Int64
	fast, slow time.Duration
	keys       sync.Map // idempotency keys seen, per attempt number
}

func (s *slowEvery) call(ctx context.Context, a Attempt) error {
	d := s.fast
	if s.n.Add(1)%20 == 0 {
		d = s.slow
	}
	s.keys.Store(a.IdempotencyKey, true)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func hedgeSnapshot(dep string, delay time.Duration, hedges uint32) *fuseboxv1.DecisionSnapshot {
	s := snapshot(dep, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	s.Retry.PerAttemptTimeout = durationpb.New(5 * time.Second)
	s.Retry.HedgeDelay = durationpb.New(delay)
	s.Retry.MaxHedges = hedges
	s.Version = 1
	return s
}

// With 5% of answers slow (300 ms instead of 1 ms), hedging after 20 ms
// takes the p99 of the calls from the slow answers' latency to about the
// hedge delay, and the extra attempts are the hedges, each with a token
// from the retry budget (so the extra load stays within it).
func TestHedgingCutsTheTail(t *testing.T) {
	const (
		calls = 200
		slow  = 300 * time.Millisecond
	)
	run := func(t *testing.T, hedges uint32, refuseRetries bool) (p99Latency time.Duration, attempts int64, granted int) {
		f := newFakeAgent(t)
		// The agent's retry budget: tokens while the retries granted stay
		// within 10% of the calls made so far (none when refusing).
		var made, tokens atomic.Int64
		f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
			if refuseRetries || float64(tokens.Load()+1) > 0.1*float64(made.Load()) {
				return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT,
					Reason: fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED}, nil
			}
			tokens.Add(1)
			return allowDecision(), nil
		}
		c := agentClient(t, f, Config{})
		dep := c.Dependency("search-api")
		f.push(hedgeSnapshot("search-api", 20*time.Millisecond, hedges))
		sstest.Eventually(t, 10*time.Second, "the hedging snapshot", func() bool { return dep.st.dec.Load().retry.maxHedges == int(hedges) })
		s := &slowEvery{fast: time.Millisecond, slow: slow}
		lat := make([]time.Duration, 0, calls)
		for range calls {
			made.Add(1)
			t0 := time.Now()
			if err := dep.Do(context.Background(), IdempotentWithKey, s.call); err != nil {
				t.Fatalf("Do: %v", err)
			}
			lat = append(lat, time.Since(t0))
		}
		return p99(lat), s.n.Load(), int(tokens.Load())
	}
	var plain, hedged time.Duration
	t.Run("without hedging", func(t *testing.T) {
		var attempts int64
		plain, attempts, _ = run(t, 0, false)
		if attempts != calls {
			t.Errorf("%d attempts for %d calls", attempts, calls)
		}
	})
	t.Run("with one hedge after 20ms", func(t *testing.T) {
		var attempts int64
		var granted int
		hedged, attempts, granted = run(t, 1, false)
		extra := attempts - calls
		// Every hedge holds a token of the budget, so the extra load is
		// within it (10% of the calls); every 20th answer is slow, so
		// there were hedges (a fast call's timer fires only when the
		// machine is loaded, and then the budget still bounds them).
		if int(extra) != granted || extra == 0 {
			t.Errorf("%d extra attempts, %d retry tokens granted: want one token per hedge, and some hedges", extra, granted)
		}
		if float64(extra) > 0.1*calls {
			t.Errorf("%d hedges for %d calls: more than the retry budget's 10%%", extra, calls)
		}
	})
	t.Logf("p99 without hedging %v, with %v", plain, hedged)
	if plain < slow {
		t.Fatalf("p99 without hedging is %v: the slow answers should set it", plain)
	}
	if hedged > plain/2 {
		t.Errorf("p99 with hedging %v, want well below the %v without", hedged, plain)
	}
	t.Run("no token, no hedge", func(t *testing.T) {
		p, attempts, granted := run(t, 1, true)
		if attempts != calls || granted != 0 {
			t.Errorf("%d attempts for %d calls, %d tokens: want no hedge", attempts, calls, granted)
		}
		if p < slow {
			t.Errorf("p99 %v without hedges: want the slow answers'", p)
		}
	})
}

// A hedge carries the call's idempotency key; the first success wins and
// the loser is cancelled; Call returns the winner's value; NonRetryable
// calls are never hedged.
func TestHedgeSemantics(t *testing.T) {
	f := newFakeAgent(t)
	c := agentClient(t, f, Config{})
	dep := c.Dependency("kv")
	f.push(hedgeSnapshot("kv", 10*time.Millisecond, 2))
	sstest.Eventually(t, 10*time.Second, "the hedging snapshot", func() bool { return dep.st.dec.Load().retry.maxHedges == 2 })

	var mu sync.Mutex
	var keys []string
	cancelled := make(chan int, 3)
	v, err := Call(context.Background(), dep, IdempotentWithKey, func(ctx context.Context, a Attempt) (int, error) {
		mu.Lock()
		keys = append(keys, a.IdempotencyKey)
		mu.Unlock()
		if a.Number < 3 { // the first two hang until cancelled
			stuck := time.NewTimer(10 * time.Second)
			defer stuck.Stop()
			select {
			case <-ctx.Done():
				cancelled <- a.Number
				return 0, ctx.Err()
			case <-stuck.C:
				t.Errorf("attempt %d was not cancelled within 10 s of the winner", a.Number)
				return 0, errors.New("not cancelled")
			}
		}
		return a.Number, nil
	})
	if err != nil || v != 3 {
		t.Fatalf("Call = %d, %v; want the third attempt's 3", v, err)
	}
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Errorf("idempotency keys %q: want one key on all three attempts", keys)
	}
	if len(cancelled) != 2 {
		t.Errorf("%d losers returned cancelled before Call returned, want 2", len(cancelled))
	}
	// One retry token per hedge, from the agent or (when it answers later
	// than AgentWait on a loaded machine) from the local budget.
	if r := dep.st.rare.retriesAgent.Load() + dep.st.rare.retriesLocal.Load(); r != 2 {
		t.Errorf("%d retry tokens taken, want one per hedge (2)", r)
	}

	// A non-retryable failure ends the call without waiting for hedges.
	boom := errors.New("boom")
	err = dep.Do(context.Background(), Idempotent, func(ctx context.Context, a Attempt) error {
		return errors.Join(boom, ErrNotRetryable)
	})
	if !errors.Is(err, boom) {
		t.Errorf("Do = %v, want boom", err)
	}

	// NonRetryable: one attempt, however slow.
	var n atomic.Int32
	err = dep.Do(context.Background(), NonRetryable, func(ctx context.Context, a Attempt) error {
		n.Add(1)
		tm := time.NewTimer(50 * time.Millisecond)
		defer tm.Stop()
		<-tm.C
		return nil
	})
	if err != nil || n.Load() != 1 {
		t.Errorf("NonRetryable: %v after %d attempts, want one", err, n.Load())
	}
}
