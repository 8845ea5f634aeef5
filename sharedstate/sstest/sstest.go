// Package sstest holds the test helpers that every test tree of Fusebox
// shares (agent, coordinator, clientlib, protocol, sharedstate/store, cmd).
// Only _test.go files import it: `make verify` fails when a binary links it
// (or package testing at all).
//
//	sstest.Eventually(t, 2*time.Second, "agent b sees agent a", func() bool {
//		return len(b.Gossip().Members()) == 2
//	})
package sstest

import (
	"errors"
	"testing"
	"time"
)

// PollInterval is how often Eventually evaluates its condition.
const PollInterval = 5 * time.Millisecond

// Eventually polls cond every PollInterval until it holds, and fails the
// test (t.Fatalf, naming what) when it still does not hold after timeout.
// It waits for a state; it asserts no timing, so give it a generous
// timeout (10 s for anything that crosses the fleet); it logs how long the
// state took, a measurement for `go test -v`. Call it from the test's
// goroutine only (it may call t.Fatalf).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// EventuallyNoError is Eventually for a check that says what is still
// wrong: it polls check until it returns nil, and on timeout fails the
// test with what and check's last error.
func EventuallyNoError(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	poll(t, timeout, what, check)
}

// errNotYet is Eventually's cond not holding: no error worth printing.
var errNotYet = errors.New("not yet")

// Measure polls cond every interval (fine enough to time what it waits
// for) until it holds and returns how long that took; it fails the test
// like Eventually after timeout. Benchmarks use it to time propagation; it
// logs nothing, since it runs once per iteration.
func Measure(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return pollEvery(t, timeout, interval, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

func poll(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	t.Logf("%s: after %v", what, pollEvery(t, timeout, PollInterval, what, check))
}

func pollEvery(t testing.TB, timeout, interval time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for: %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for: %s: %v", timeout, what, err)
		}
		<-tick.C
	}
	return time.Since(start)
}
