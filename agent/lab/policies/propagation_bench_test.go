package policies

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// BenchmarkOverridePropagation measures the root README's "force a breaker open
// once, in etcd; every instance follows within a second" on five agents
// sharing an embedded etcd: each iteration writes a forced-open override
// and waits until every agent's engine enforces it, then clears it and
// waits until none does. It reports the time from the write to the last
// agent, median and maximum over the iterations (ms/override,
// max-ms/override; the same for the clear). Tests only wait for these
// conditions with generous deadlines; this is where the promise is
// measured.
func BenchmarkOverridePropagation(b *testing.B) {
	w := start(b, 5)
	agents := w.Agents()
	const dep = "propagation-bench"
	admin := store.WriteOptions{Actor: "bench"}
	every := func(want sharedstate.OverrideState) func() bool {
		return func() bool {
			for _, a := range agents {
				s := a.Engine().Snapshot(dep)
				got := sharedstate.OverrideNone
				if s != nil {
					got = s.Override
				}
				if got != want {
					return false
				}
			}
			return true
		}
	}
	// wait polls cond every 100 µs (to time the propagation), bounded like
	// any wait in a test.
	wait := func(what string, cond func() bool) time.Duration {
		return sstest.Measure(b, 10*time.Second, 100*time.Microsecond, what, cond)
	}
	var set, cleared []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := w.store.SetOverride(ctx, dep, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "bench"}, admin); err != nil {
			b.Fatal(err)
		}
		set = append(set, wait("every agent forced-open", every(sharedstate.ForcedOpen)))
		if err := w.store.ClearOverride(ctx, dep, admin); err != nil {
			b.Fatal(err)
		}
		cleared = append(cleared, wait("every agent without the override", every(sharedstate.OverrideNone)))
		cancel()
	}
	report := func(unit string, ds []time.Duration) {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "ms/"+unit)
		b.ReportMetric(float64(ds[len(ds)-1])/float64(time.Millisecond), "max-ms/"+unit)
	}
	report("override", set)
	report("clear", cleared)
}
