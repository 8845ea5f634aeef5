package clientlib

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// tailDependency answers every attempt at once, except the first attempt
// of a call it is told is slow: that one answers only when its context is
// cancelled (a hedge won: counted, with the error), when answer delivers
// (or after answerAfter), or at the latest after slowCap. It counts
// attempts and how each slow attempt ended.
type tailDependency struct {
	answerAfter time.Duration   // > 0: a slow attempt answers after this long
	answer      <-chan struct{} // a receive lets one slow attempt answer

	attempts      atomic.Int64
	slowAnswered  atomic.Int64 // calls answered by their slow attempt
	slowCapped    atomic.Int64 // of which after slowCap: nothing else answered
	slowCancelled atomic.Int64 // slow attempts cancelled (context.Canceled)
	slowOther     atomic.Int64 // slow attempts ended by another error (a timeout)
}

// slowCap bounds how long a slow attempt waits for its answer or its
// cancellation: a generous deadline on a condition, not a timing.
const slowCap = 3 * time.Second

func (d *tailDependency) call(slow bool) func(context.Context, Attempt) error {
	return func(ctx context.Context, a Attempt) error {
		d.attempts.Add(1)
		if !slow || a.Number != 1 {
			return nil
		}
		var after <-chan time.Time
		if d.answerAfter > 0 {
			t := time.NewTimer(d.answerAfter)
			defer t.Stop()
			after = t.C
		}
		limit := time.NewTimer(slowCap)
		defer limit.Stop()
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				d.slowCancelled.Add(1)
			} else {
				d.slowOther.Add(1)
			}
			return ctx.Err()
		case <-after:
		case <-d.answer:
		case <-limit.C:
			d.slowCapped.Add(1)
		}
		d.slowAnswered.Add(1)
		return nil
	}
}

func hedgeSnapshot(dep string, delay time.Duration, hedges uint32) *fuseboxv1.DecisionSnapshot {
	s := snapshot(dep, fuseboxv1.BreakerState_BREAKER_STATE_CLOSED)
	withPolicy(s, func(p *sharedstate.Policy) {
		p.Retry.PerAttemptTimeout = sharedstate.Duration(5 * time.Second)
		p.Retry.Hedge = sharedstate.HedgePolicy{Delay: sharedstate.Duration(delay), MaxHedges: int(hedges)}
	})
	s.Version = 1
	return s
}

// tailRun is what one run of TestHedgingCutsTheTail counted.
type tailRun struct {
	calls, slowCalls int
	attempts         int64
	slowAnswered     int64 // calls answered by their slow attempt
	slowCapped       int64
	slowCancelled    int64
	slowOther        int64
	asked, granted   int64 // retry tokens asked of the agent and granted by it
	taken            int64 // retry tokens the client took (agent and local)
}

// p99IsSlow reports whether the p99 of the run's call latencies (nearest
// rank, as index calls*99/100 of the sorted latencies) is a slow answer. A
// call answered by a slow attempt takes the slow answer's time; every other
// call takes at most the hedge delay plus a fast answer, less than a slow
// answer. So the slowest slowAnswered calls are the slow ones, and the p99
// is one of them exactly when there are more than calls-1-calls*99/100 of
// them: with 200 calls, 2 or more (1%).
func (r tailRun) p99IsSlow() bool {
	return r.slowAnswered > int64(r.calls-1-r.calls*99/100)
}

// With the first attempt of 5% of the calls slow, one hedge lets none of
// those calls wait for its slow answer, so the p99 of the calls is a fast
// answer instead of a slow one; the extra attempts are the hedges, each with
// a token from the retry budget (so the extra load stays within it); with
// the budget refusing tokens there is no hedge. The test counts which
// attempt answered each call rather than timing the calls: counts do not
// flake on a loaded machine.
func TestHedgingCutsTheTail(t *testing.T) {
	const (
		calls = 200
		delay = 50 * time.Millisecond
	)
	// run makes calls sequential calls, every 20th one (5%) slow, through a
	// client whose agent grants retry tokens while the tokens granted stay
	// within 10% of the calls made so far (none when refuseRetries).
	run := func(t *testing.T, hedges uint32, refuseRetries bool, d *tailDependency) tailRun {
		f := newFakeAgent(t)
		refused := make(chan struct{}, calls)
		if d.answer == nil {
			d.answer = refused // no token, no hedge: the slow attempt answers
		}
		var made, asked, granted atomic.Int64
		f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
			asked.Add(1)
			if refuseRetries || float64(granted.Load()+1) > 0.1*float64(made.Load()) {
				refused <- struct{}{}
				return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT,
					Reason: fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED}, nil
			}
			granted.Add(1)
			return allowDecision(), nil
		}
		// AgentWait generous: every token comes from the agent above,
		// never from the client's local budget.
		c := agentClient(t, f, Config{AgentWait: 10 * time.Second})
		dep := c.Dependency("search-api")
		f.push(hedgeSnapshot("search-api", delay, hedges))
		sstest.Eventually(t, 10*time.Second, "the hedging snapshot", func() bool { return dep.st.dec.Load().retry.maxHedges == int(hedges) })
		r := tailRun{calls: calls}
		for i := range calls {
			slow := i%20 == 19
			if slow {
				r.slowCalls++
			}
			for len(refused) > 0 { // a refusal for an earlier call answers nothing here
				<-refused
			}
			made.Add(1)
			if err := dep.Do(context.Background(), IdempotentWithKey, d.call(slow)); err != nil {
				t.Fatalf("call %d: Do: %v", i, err)
			}
			if n := d.slowCapped.Load(); n > 0 {
				t.Fatalf("call %d: its slow attempt was neither cancelled nor let answer for %v (retry tokens asked %d, granted %d): no hedge won, and no refused hedge let it answer",
					i, slowCap, asked.Load(), granted.Load())
			}
		}
		r.attempts, r.slowAnswered, r.slowCapped = d.attempts.Load(), d.slowAnswered.Load(), d.slowCapped.Load()
		r.slowCancelled, r.slowOther = d.slowCancelled.Load(), d.slowOther.Load()
		r.asked, r.granted = asked.Load(), granted.Load()
		r.taken = int64(dep.st.rare.retriesAgent.Load() + dep.st.rare.retriesLocal.Load())
		t.Logf("%+v", r)
		return r
	}

	t.Run("without hedging", func(t *testing.T) {
		// Nothing cancels a slow attempt: it answers after 100 ms.
		r := run(t, 0, false, &tailDependency{answerAfter: 100 * time.Millisecond})
		if r.attempts != calls || r.asked != 0 {
			t.Errorf("%d attempts for %d calls, %d retry tokens asked: want one attempt a call", r.attempts, calls, r.asked)
		}
		if r.slowAnswered != int64(r.slowCalls) {
			t.Errorf("%d calls answered by their slow attempt, want all %d slow calls", r.slowAnswered, r.slowCalls)
		}
		if !r.p99IsSlow() {
			t.Errorf("%d of %d calls answered slow: the p99 should be a slow answer", r.slowAnswered, calls)
		}
	})

	t.Run("with one hedge", func(t *testing.T) {
		// A slow attempt answers only when cancelled (or at slowCap,
		// which fails the run).
		r := run(t, 1, false, &tailDependency{answer: make(chan struct{})})
		extra := r.attempts - calls
		if r.slowAnswered != 0 {
			t.Errorf("%d calls answered by their slow attempt, want none: a hedge answers each", r.slowAnswered)
		}
		if r.slowCancelled != int64(r.slowCalls) || r.slowOther != 0 {
			t.Errorf("%d slow attempts cancelled (%d ended otherwise), want all %d cancelled by the hedge that won", r.slowCancelled, r.slowOther, r.slowCalls)
		}
		if r.p99IsSlow() {
			t.Errorf("%d of %d calls answered slow: the p99 should be a fast answer", r.slowAnswered, calls)
		}
		// Every hedge holds a token of the budget, so the extra load is
		// within it (10% of the calls). Every slow call was hedged; a fast
		// call's timer fires only when the machine stalls for the whole
		// delay, and then the budget still bounds the hedges.
		if extra < int64(r.slowCalls) {
			t.Errorf("%d extra attempts for %d slow calls: want a hedge for each", extra, r.slowCalls)
		}
		if extra != r.granted || extra != r.taken {
			t.Errorf("%d extra attempts, %d retry tokens granted by the agent, %d taken by the client: want one token per hedge", extra, r.granted, r.taken)
		}
		if float64(extra) > 0.1*calls {
			t.Errorf("%d hedges for %d calls: more than the retry budget's 10%%", extra, calls)
		}
	})

	t.Run("no token, no hedge", func(t *testing.T) {
		// A slow attempt answers once the budget has refused its hedge.
		r := run(t, 1, true, &tailDependency{})
		if r.attempts != calls || r.granted != 0 || r.taken != 0 {
			t.Errorf("%d attempts for %d calls, %d tokens granted, %d taken: want no hedge", r.attempts, calls, r.granted, r.taken)
		}
		if r.asked < int64(r.slowCalls) {
			t.Errorf("%d retry tokens asked for %d slow calls: want a hedge asked for by each", r.asked, r.slowCalls)
		}
		if r.slowAnswered != int64(r.slowCalls) || r.slowCancelled != 0 {
			t.Errorf("%d calls answered by their slow attempt (%d cancelled), want all %d slow calls", r.slowAnswered, r.slowCancelled, r.slowCalls)
		}
		if !r.p99IsSlow() {
			t.Errorf("%d of %d calls answered slow: without hedges the p99 should stay a slow answer", r.slowAnswered, calls)
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
