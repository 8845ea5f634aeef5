package sstest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records what Eventually reports; Fatalf ends the calling
// goroutine, as testing's does.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper()             {}
func (f *fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	panic(f)
}

// run calls fn with a fakeTB and returns what it failed with ("" if it
// did not).
func run(fn func(tb testing.TB)) (fatal string) {
	f := &fakeTB{}
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
		fatal = f.fatal
	}()
	fn(f)
	return ""
}

func TestEventually(t *testing.T) {
	n := 0
	if got := run(func(tb testing.TB) { Eventually(tb, 10*time.Second, "n reaches 3", func() bool { n++; return n >= 3 }) }); got != "" {
		t.Fatalf("Eventually failed: %s", got)
	}
	got := run(func(tb testing.TB) { Eventually(tb, 20*time.Millisecond, "never", func() bool { return false }) })
	if !strings.Contains(got, "timed out after 20ms waiting for: never") || strings.Contains(got, "not yet") {
		t.Fatalf("Eventually's failure = %q", got)
	}
}

func TestEventuallyNoError(t *testing.T) {
	n := 0
	check := func() error {
		if n++; n < 3 {
			return fmt.Errorf("n is %d", n)
		}
		return nil
	}
	if got := run(func(tb testing.TB) { EventuallyNoError(tb, 10*time.Second, "n reaches 3", check) }); got != "" {
		t.Fatalf("EventuallyNoError failed: %s", got)
	}
	got := run(func(tb testing.TB) {
		EventuallyNoError(tb, 20*time.Millisecond, "the answer", func() error { return errors.New("still 41") })
	})
	if got != "timed out after 20ms waiting for: the answer: still 41" {
		t.Fatalf("EventuallyNoError's failure = %q, want it to name what and the last error", got)
	}
}

func TestMeasure(t *testing.T) {
	n := 0
	var took time.Duration
	if fatal := run(func(tb testing.TB) {
		took = Measure(tb, 10*time.Second, 100*time.Microsecond, "third call", func() bool { n++; return n >= 3 })
	}); fatal != "" {
		t.Fatalf("a condition that holds on the third call failed: %s", fatal)
	}
	if n != 3 || took <= 0 {
		t.Fatalf("%d calls, took %v: want 3 calls and a positive duration", n, took)
	}
	fatal := run(func(tb testing.TB) {
		Measure(tb, 5*time.Millisecond, 100*time.Microsecond, "never", func() bool { return false })
	})
	if !strings.Contains(fatal, "never") {
		t.Fatalf("a condition that never holds: failure %q, want one naming it", fatal)
	}
}
