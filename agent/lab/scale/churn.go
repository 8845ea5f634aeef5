package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ChurnResult is what scenario (f) measured.
type ChurnResult struct {
	// Restarted counts the agents restarted.
	Restarted int
	// HealthyAfterReady counts restarted agents that, once ready (joined),
	// still allowed dep while the fleet held it open: must be 0.
	HealthyAfterReady int
	// MaxBlind is the time from the restarts (the new agents started, all
	// at once) until every restarted agent rejected: the longest window in
	// which a restarted agent's clients could have been let through.
	MaxBlind time.Duration
}

// Churn runs scenario (f) on a fleet that holds dep open (run Trip
// first): the last frac of the agents (never the seeds) restart at once,
// as a rolling update with maxUnavailable = frac does (the DaemonSet's is
// 10%), while clients keep reporting failures; each must reject as soon as
// it is ready.
func Churn(ctx context.Context, f *Fleet, dep string, frac float64, k int) (ChurnResult, error) {
	var r ChurnResult
	n := f.Size()
	count := max(1, int(float64(n)*frac))
	stop := f.traffic(ctx, Spread(n, k), []string{dep}, 0, 10)
	defer stop()
	var idx []int
	for j := range count {
		if i := n - 1 - j; i >= f.cfg.Seeds {
			idx = append(idx, i)
		}
	}
	t0 := time.Now()
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for x, i := range idx {
		wg.Go(func() { errs[x] = f.Restart(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	r.Restarted = len(idx)
	started := time.Now()
	// Each restarted agent is checked the moment it is first seen ready.
	ready := make(map[int]bool, len(idx))
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for len(ready) < len(idx) {
		for _, i := range idx {
			if a := f.Agent(i); !ready[i] && a != nil && a.Ready() {
				ready[i] = true
				if !f.Rejects(i, dep) {
					r.HealthyAfterReady++
				}
			}
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("scale: %d of %d restarted agents are not ready: %w", len(idx)-len(ready), len(idx), ctx.Err())
		case <-t.C:
		}
	}
	allReady := time.Since(started)
	if _, err := f.watchRejects(ctx, dep, idx); err != nil {
		return r, err
	}
	r.MaxBlind = time.Since(started)
	if f.cfg.Trace != nil {
		f.cfg.Trace("churn: %d agents restarted at once in %v, all ready after %v, all rejecting after %v", len(idx), started.Sub(t0), allReady, r.MaxBlind)
	}
	return r, nil
}
