package scale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
)

// ReportEvery is how often a simulated client reports (of the fleet's time), as
// clientlib's flush does at most every 50 ms; 100 ms keeps hundreds of
// agents cheap.
const ReportEvery = 100 * time.Millisecond

// reportTimeout bounds one report of a simulated client.
const reportTimeout = 2 * time.Second

// Traffic runs simulated clients until the returned stop is called (or ctx
// ends): every period, a client of each agent in clients reports successes
// and failures first attempts for every dependency of deps, one report
// after the other from one goroutine. A report that fails (an agent being
// restarted refuses) goes to logf (nil: dropped), and the clients go on,
// as a client would. The scenarios here and in package procs use it.
func Traffic(ctx context.Context, f *fleet.Fleet, clients []int, deps []string, successes, failures uint32, every time.Duration,
	logf func(format string, args ...any)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			for _, i := range clients {
				rctx, cancel := context.WithTimeout(ctx, reportTimeout)
				err := f.Report(rctx, i, deps, successes, failures)
				cancel()
				if err != nil && logf != nil && ctx.Err() == nil {
					logf("%v", err)
				}
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// traffic is Traffic on f every ReportEvery, errors dropped.
func (f *Fleet) traffic(ctx context.Context, clients []int, deps []string, successes, failures uint32) (stop func()) {
	return Traffic(ctx, f.Fleet, clients, deps, successes, failures, ReportEvery, nil)
}

// confirm has a client of every agent report one healthy call to dep, as
// a host whose processes call dep does: an agent gossips its rows of a
// name, and the records it proposes for it, only once a trusted local
// client confirmed the name (agent/confirm.go). In the trip and partition
// scenarios every host calls dep and only some of their clients see it
// fail; without this, an agent with no client of its own would trip on
// the others' rows and keep its record to itself.
func (f *Fleet) confirm(ctx context.Context, dep string) error {
	for i := range f.Size() {
		if err := f.Report(ctx, i, []string{dep}, 1, 0); err != nil {
			return fmt.Errorf("scale: confirming %s: %w", dep, err)
		}
	}
	return nil
}
