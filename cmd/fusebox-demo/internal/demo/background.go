package demo

import (
	"context"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// startTraffic prints the banner and starts the workers and the
// background loops (watcher, phase reporter).
func (d *Demo) startTraffic() {
	d.printBanner()
	d.marks = []mark{{phase: 0, counts: make([]Counts, len(d.deps))}}

	bgCtx, bgCancel := context.WithCancel(context.Background())
	d.bgCancel = bgCancel
	if len(d.agents) > 0 {
		w := newWatcher(d.agents, d.sched, d.recordTransition)
		d.bgWG.Go(func() { ctxtime.Every(bgCtx, pollInterval, w.poll) })
	}
	d.started.Store(true)
	d.bgWG.Go(func() { d.reportPhases(bgCtx) })

	trafficCtx, trafficCancel := context.WithCancel(context.Background())
	d.trafficCancel = trafficCancel
	for _, s := range d.services {
		for i, dep := range d.deps {
			rate := d.cfg.Rate
			if dep.name == CatalogAPI {
				rate = catalogRate
			}
			workers, interval := pace(rate)
			for range workers {
				d.trafficWG.Go(func() { s.worker(trafficCtx, dep.name, dep.URL(), interval, d.ctrs[i]) })
			}
		}
	}
	if d.cfg.Duration > 0 {
		d.timerWG.Go(func() {
			t := time.NewTimer(time.Until(d.sched.start.Add(d.cfg.Duration)))
			defer t.Stop()
			select {
			case <-t.C:
				d.finish()
			case <-d.stop:
			}
		})
	}
}

// reportPhases logs each phase as it starts and the traffic of the one
// that ended, and marks the counters at the boundary.
func (d *Demo) reportPhases(ctx context.Context) {
	d.printf("%7.2fs  phase %-10s  %s %s\n", 0.0, Healthy, ShippingAPI, Healthy.describe())
	for k := 1; ; k++ {
		at, _ := d.sched.bounds(k)
		if !ctxtime.Sleep(ctx, time.Until(at)) {
			return
		}
		d.markPhase(k, at)
		p := Phase(k % int(numPhases))
		d.printf("%7.2fs  phase %-10s  %s %s\n", at.Sub(d.sched.start).Seconds(), p, ShippingAPI, p.describe())
	}
}

// markPhase records the counters at the start of phase k and logs the
// traffic of phase k-1.
func (d *Demo) markPhase(k int, at time.Time) {
	m := mark{phase: k, counts: make([]Counts, len(d.ctrs))}
	for i, c := range d.ctrs {
		m.counts[i] = c.load()
	}
	d.mu.Lock()
	prev := d.marks[len(d.marks)-1]
	d.marks = append(d.marks, m)
	d.mu.Unlock()
	for i, dep := range d.deps {
		c := m.counts[i].Minus(prev.counts[i])
		d.printf("%7.2fs  traffic %-8s %s\n", at.Sub(d.sched.start).Seconds(), Phase((k-1)%int(numPhases)).String()+":",
			formatCounts(dep.name, c))
	}
}

func (d *Demo) recordTransition(t Transition) {
	d.mu.Lock()
	d.transitions = append(d.transitions, t)
	d.mu.Unlock()
	d.printf("%s\n", t)
}
