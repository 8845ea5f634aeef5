package clientlib

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

func TestDoRetriesByClass(t *testing.T) {
	for _, tc := range []struct {
		name     string
		class    Class
		errs     []error // returned by attempts 1, 2, …; nil after the list
		opts     []CallOption
		attempts int
		wantErr  error
	}{
		{name: "success", class: Idempotent, attempts: 1},
		{name: "idempotent retries until success", class: Idempotent,
			errs: []error{errUnavailable, errUnavailable}, attempts: 3},
		{name: "three attempts at most", class: Idempotent,
			errs: []error{errUnavailable, errUnavailable, errUnavailable, errUnavailable}, attempts: 3, wantErr: errUnavailable},
		{name: "non-retryable class", class: NonRetryable,
			errs: []error{errUnavailable}, attempts: 1, wantErr: errUnavailable},
		{name: "non-retryable error", class: Idempotent,
			errs: []error{status.Error(codes.InvalidArgument, "no")}, attempts: 1},
		{name: "http 404 not retried", class: Idempotent,
			errs: []error{&HTTPStatusError{StatusCode: 404}}, attempts: 1},
		{name: "http 503 retried", class: Idempotent,
			errs: []error{&HTTPStatusError{StatusCode: 503}}, attempts: 2},
		{name: "ErrNotRetryable stops", class: Idempotent,
			errs: []error{fmt.Errorf("%w: %w", ErrNotRetryable, errUnavailable)}, attempts: 1},
		{name: "WithMaxAttempts", class: Idempotent, opts: []CallOption{WithMaxAttempts(5)},
			errs: []error{errUnavailable, errUnavailable, errUnavailable, errUnavailable}, attempts: 5},
		{name: "classifier says retry", class: Idempotent,
			opts: []CallOption{WithClassifier(func(error) Classification { return Classification{Retryable: true} })},
			errs: []error{errors.New("mine")}, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := localClient(t)
			dep := c.Dependency("svc")
			n := 0
			err := dep.Do(context.Background(), tc.class, func(ctx context.Context, a Attempt) error {
				n++
				if a.Number != n {
					t.Errorf("attempt number %d, want %d", a.Number, n)
				}
				if n <= len(tc.errs) {
					return tc.errs[n-1]
				}
				return nil
			}, tc.opts...)
			if n != tc.attempts {
				t.Errorf("%d attempts, want %d", n, tc.attempts)
			}
			if want := tc.wantErr; want != nil && !errors.Is(err, want) {
				t.Errorf("err = %v, want %v", err, want)
			}
			if tc.wantErr == nil && len(tc.errs) < tc.attempts && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
		})
	}
}

func TestIdempotencyKeySameOnEveryAttempt(t *testing.T) {
	c := localClient(t)
	dep := c.Dependency("payments")
	var keys []string
	err := dep.Do(context.Background(), IdempotentWithKey, func(ctx context.Context, a Attempt) error {
		keys = append(keys, a.IdempotencyKey)
		return errUnavailable
	})
	if !errors.Is(err, errUnavailable) || len(keys) != 3 {
		t.Fatalf("err %v after %d attempts, want 3 attempts", err, len(keys))
	}
	if keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("keys %q: want one non-empty key on all attempts", keys)
	}
	var other string
	_ = dep.Do(context.Background(), IdempotentWithKey, func(ctx context.Context, a Attempt) error {
		other = a.IdempotencyKey
		return nil
	})
	if other == keys[0] {
		t.Errorf("two logical calls share key %q", other)
	}
	_ = dep.Do(context.Background(), IdempotentWithKey, func(ctx context.Context, a Attempt) error {
		other = a.IdempotencyKey
		return nil
	}, WithIdempotencyKey("order-42"))
	if other != "order-42" {
		t.Errorf("key %q, want order-42", other)
	}
	_ = dep.Do(context.Background(), Idempotent, func(ctx context.Context, a Attempt) error {
		other = a.IdempotencyKey
		return nil
	})
	if other != "" {
		t.Errorf("Idempotent call got key %q", other)
	}
}

// A 1 s deadline with 900 ms attempts leaves no room for a second attempt.
// (Tests that move time run in a synctest bubble: time passes only when
// every goroutine of the bubble waits.)
func TestDeadlineOneSecondWith900msAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := localClient(t)
		dep := c.Dependency("slow")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n := 0
		err := dep.Do(ctx, Idempotent, func(ctx context.Context, a Attempt) error {
			n++
			if want := time.Now().Add(900 * time.Millisecond); !a.Deadline.Equal(want) {
				t.Errorf("attempt deadline %v, want %v", a.Deadline, want)
			}
			time.Sleep(950 * time.Millisecond) // the dependency outlasts the attempt
			return ctx.Err()
		}, WithAttemptTimeout(900*time.Millisecond))
		if n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if ctx.Err() != nil {
			t.Errorf("the caller's context ended (%v): the call should stop before", ctx.Err())
		}
		if s := c.Dependency("slow").st.sum(); s.failure != 1 || s.slow != 1 {
			t.Errorf("counted %+v, want one slow failure (the attempt's own timeout)", s)
		}
	})

	// The policy lint warns about the same arithmetic ahead of time.
	p := sharedstate.DefaultPolicy()
	p.Retry.PerAttemptTimeout = sharedstate.Duration(900 * time.Millisecond)
	warnings := p.Lint(time.Second)
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "only 1 attempt(s) fit") }) {
		t.Errorf("Lint(1s) of maxAttempts %d × 900ms = %q, want a warning that only 1 attempt fits", p.Retry.MaxAttempts, warnings)
	}
}

// With room for three 900 ms attempts, the attempt's own timeout is retried.
func TestAttemptTimeoutRetriedWithinDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := localClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		n := 0
		err := c.Dependency("slow").Do(ctx, Idempotent, func(ctx context.Context, a Attempt) error {
			n++
			time.Sleep(950 * time.Millisecond)
			return ctx.Err()
		}, WithAttemptTimeout(900*time.Millisecond))
		if n != 3 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%d attempts, err %v; want 3 and the last attempt's timeout", n, err)
		}
	})
}

// When the caller's deadline passes during an attempt, the call ends with
// errors.Join(ctx.Err(), lastErr).
func TestCallerDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := localClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		n := 0
		errDep := errors.New("dependency hung up")
		err := c.Dependency("x").Do(ctx, Idempotent, func(actx context.Context, a Attempt) error {
			n++
			time.Sleep(350 * time.Millisecond) // past the caller's deadline
			return errDep
		})
		if n != 1 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errDep) {
			t.Errorf("%d attempts, err %v; want 1 and DeadlineExceeded joined with the attempt's error", n, err)
		}
	})
}

func TestCancelStopsBackoffSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, Config{NoAgent: true, Random: func() uint64 { return ^uint64(0) }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Dependency("x").Do(ctx, Idempotent, func(context.Context, Attempt) error { return errUnavailable },
				WithAttemptTimeout(0))
		}()
		synctest.Wait() // the call sleeps its backoff
		start := time.Now()
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errUnavailable) {
			t.Errorf("err = %v, want Canceled joined with the last error", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the call returned %v after the cancel, want at once", d)
		}
	})
}

// The backoff is drawn from the policy (full jitter: U[0, base·2^n)) and
// slept.
func TestBackoffSlept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		half := uint64(1) << 63 // Uniform(half) = 0.5
		c := newClient(t, Config{NoAgent: true, Random: func() uint64 { return half }})
		var times []time.Time
		err := c.Dependency("x").Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
			times = append(times, time.Now())
			return errUnavailable
		}, WithAttemptTimeout(0))
		if !errors.Is(err, errUnavailable) {
			t.Fatalf("err = %v", err)
		}
		// Default policy: base 100ms, so waits of 0.5×100ms and 0.5×200ms.
		if len(times) != 3 || times[1].Sub(times[0]) != 50*time.Millisecond || times[2].Sub(times[1]) != 100*time.Millisecond {
			t.Errorf("attempts at %v, want 3 attempts, 50ms then 100ms apart", times)
		}
	})
}

func TestRetryAfterBeyondDeadlineStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := localClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n := 0
		start := time.Now()
		err := c.Dependency("x").Do(ctx, Idempotent, func(context.Context, Attempt) error {
			n++
			return &HTTPStatusError{StatusCode: 503, RetryAfter: 5 * time.Second}
		})
		if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%d attempts, err %v; want 1 attempt and DeadlineExceeded", n, err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the call took %v: it should not sleep", d)
		}
	})
}

func TestNegativePushbackNotRetried(t *testing.T) {
	c := localClient(t)
	n := 0
	_ = c.Dependency("x").Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		n++
		return &RetryAfterError{Err: errUnavailable, After: -1}
	})
	if n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestNestedCallsMakeOneAttempt(t *testing.T) {
	c := localClient(t)
	ctx := ContextWithRetryOwner(context.Background(), "frontend")
	for _, tc := range []struct {
		opts []CallOption
		want int
	}{{nil, 1}, {[]CallOption{NestedRetries(true)}, 3}} {
		n := 0
		var owner string
		_ = c.Dependency("x").Do(ctx, Idempotent, func(ctx context.Context, a Attempt) error {
			n++
			h := http.Header{}
			a.SetHeaders(h)
			owner = h.Get(HeaderRetryOwner)
			return errUnavailable
		}, tc.opts...)
		if n != tc.want || owner != "frontend" {
			t.Errorf("opts %v: %d attempts with owner %q, want %d with the upstream owner", tc.opts, n, owner, tc.want)
		}
	}
	// The handle default works too.
	n := 0
	_ = c.Dependency("x").With(NestedRetries(true)).Do(ctx, Idempotent, func(context.Context, Attempt) error {
		n++
		return errUnavailable
	})
	if n != 3 {
		t.Errorf("With(NestedRetries(true)): %d attempts, want 3", n)
	}
}

func TestInvalidUses(t *testing.T) {
	c := localClient(t)
	called := false
	fn := func(context.Context, Attempt) error { called = true; return nil }
	if err := c.Dependency("bad name!").Do(context.Background(), Idempotent, fn); !errors.Is(err, ErrInvalidDependency) {
		t.Errorf("invalid name: err = %v", err)
	}
	if err := c.Dependency("x").Do(context.Background(), Idempotent, fn, WithMaxAttempts(0)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithMaxAttempts(0): err = %v", err)
	}
	if _, err := c.Dependency("x").Allow(First); err != nil {
		t.Errorf("Allow: %v", err)
	}
	if called {
		t.Error("fn was called")
	}
}

// Past MaxDependencies a new name is called untracked, never refused: one
// attempt whatever its class, nothing tracked or reported, counted in
// fusebox_client_untracked_calls_total. Forget makes room again.
func TestPastMaxDependenciesCallsGoThroughUntracked(t *testing.T) {
	reg := prometheus.NewRegistry()
	small := newClient(t, Config{NoAgent: true, MaxDependencies: 2, Registerer: reg})
	small.Dependency("a")
	small.Dependency("b")
	c := small.Dependency("c")
	if c.Err() != nil || !c.Untracked() || small.Dependency("a").Untracked() {
		t.Fatalf("third dependency: Err %v, Untracked %v; want no error, untracked (and a tracked)", c.Err(), c.Untracked())
	}
	attempts := 0
	var info CallInfo
	err := c.Do(context.Background(), Idempotent, func(context.Context, Attempt) error {
		attempts++
		return errors.New("connection refused, retryable by class")
	}, WithClassifier(func(error) Classification { return Classification{Retryable: true, Failure: true} }),
		WithMaxAttempts(5), WithCallInfo(&info))
	if err == nil || attempts != 1 || info.Attempts != 1 || info.Stop != StopNotRetryable {
		t.Errorf("untracked call: %v after %d attempts (%+v); want the error after one attempt", err, attempts, info)
	}
	if done, err := c.Allow(Retry); err != nil {
		t.Errorf("Allow(Retry) on an untracked handle: %v", err)
	} else {
		done(Failure)
	}
	if n := len(*small.deps.Load()); n != 2 {
		t.Errorf("the client tracks %d names, want its 2", n)
	}
	if got := series(t, reg, "fusebox_client_untracked_calls_total"); !strings.Contains(got, "fusebox_client_untracked_calls_total 2\n") {
		t.Errorf("series:\n%s\nwant fusebox_client_untracked_calls_total 2 (Do and Allow)", got)
	}
	small.Forget("a")
	small.Forget("nobody")
	if d := small.Dependency("c"); d.Untracked() {
		t.Error("after Forget(a), c is still untracked")
	}
	if d := small.Dependency("a"); !d.Untracked() {
		t.Error("a came back although the table is full again")
	}
}

func TestCallAndFallbacks(t *testing.T) {
	c := localClient(t)
	dep := c.Dependency("inventory")
	v, err := Call(context.Background(), dep, Idempotent, func(ctx context.Context, a Attempt) (int, error) {
		if a.Number < 2 {
			return 0, errUnavailable
		}
		return 42, nil
	})
	if v != 42 || err != nil {
		t.Errorf("Call = %v, %v", v, err)
	}
	v, err = Call(context.Background(), dep, NonRetryable, func(context.Context, Attempt) (int, error) {
		return 1, errUnavailable
	}, WithFallbackValue(func(ctx context.Context, err error) (int, error) {
		if !errors.Is(err, errUnavailable) {
			t.Errorf("fallback got %v", err)
		}
		return 7, nil
	}))
	if v != 7 || err != nil {
		t.Errorf("Call with fallback = %v, %v", v, err)
	}
	err = dep.Do(context.Background(), NonRetryable, func(context.Context, Attempt) error { return errUnavailable },
		WithFallback(func(ctx context.Context, err error) error { return nil }))
	if err != nil {
		t.Errorf("Do with fallback = %v", err)
	}
}

func TestAllowDone(t *testing.T) {
	synctest.Test(t, testAllowDone)
}

func testAllowDone(t *testing.T) {
	c := localClient(t)
	dep := c.Dependency("stream")
	for _, o := range []Outcome{Success, Failure, Timeout, Abandoned} {
		done, err := dep.Allow(First)
		if err != nil {
			t.Fatal(err)
		}
		if o == Failure {
			time.Sleep(3 * time.Second) // slower than the default slowCallDuration (2s)
		}
		done(o)
		done(o) // a second call is ignored
	}
	done, err := dep.Allow(Retry)
	if err != nil {
		t.Fatalf("Allow(Retry) on an idle dependency: %v", err)
	}
	done(Success)
	s := dep.st.sum()
	want := totals{first: 4, success: 2, failure: 2, slow: 2, retriesLocal: 1}
	if s != want {
		t.Errorf("counted %+v, want %+v", s, want)
	}
	if got := OutcomeOf(nil); got != Success {
		t.Errorf("OutcomeOf(nil) = %v", got)
	}
	if got := OutcomeOf(&HTTPStatusError{StatusCode: 404}); got != Success {
		t.Errorf("OutcomeOf(404) = %v", got)
	}
	if got := OutcomeOf(errUnavailable); got != Failure {
		t.Errorf("OutcomeOf(Unavailable) = %v", got)
	}
}

// Concurrent use of one handle from many goroutines keeps exact counts.
func TestConcurrentCounts(t *testing.T) {
	c := localClient(t)
	dep := c.Dependency("busy")
	var wg sync.WaitGroup
	var fails atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if g%2 == 0 {
					done, err := dep.Allow(First)
					if err != nil {
						fails.Add(1)
						continue
					}
					done(Success)
					continue
				}
				if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil }); err != nil {
					fails.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	if s := dep.st.sum(); s.first != 4000 || s.success != 4000 || fails.Load() != 0 {
		t.Errorf("counted %+v with %d failures, want 4000 first attempts and successes", s, fails.Load())
	}
}

func TestDoneContextMakesNoAttempt(t *testing.T) {
	c := localClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := c.Dependency("x").Do(ctx, Idempotent, func(context.Context, Attempt) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("err %v, called %v; want Canceled and no attempt", err, called)
	}
}
