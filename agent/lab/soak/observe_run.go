package soak

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/scale"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// pollEtcd reads what etcd holds for the write dependency every second:
// the writes' outcomes when fuseboxctl could not say, and TTL expiries.
func (r *soakRun) pollEtcd(ctx context.Context) {
	ctxtime.Every(ctx, time.Second, func() {
		now := time.Now()
		if d, err := readDesired(ctx, r.st, now); err == nil {
			r.m.expect(now, d)
		}
	})
}

// sampleLoop scrapes every agent's /metrics (membership, goroutines) and
// samples every process's resources, every 5 s.
func (r *soakRun) sampleLoop(ctx context.Context) {
	ctxtime.Every(ctx, 5*time.Second, func() {
		var wg sync.WaitGroup
		for i, a := range r.agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.scrapeAgent(ctx, i, a)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.scrapeGoroutines(ctx, r.coordinator, "http://"+r.coordAddr(coordHTTPPort)+"/metrics")
			for i, e := range r.etcd {
				r.scrapeGoroutines(ctx, e, r.endpoints[i]+"/metrics")
			}
		}()
		wg.Wait()
		now := time.Now()
		for _, p := range append(append(append([]*fleet.Process{}, r.agents...), r.etcd...), r.coordinator) {
			pid, inc, _ := p.Running()
			if pid == 0 {
				continue
			}
			res := procResources(pid)
			r.mu.Lock()
			g, ok := r.goroutines[fmt.Sprintf("%s#%d", p.Name(), inc)]
			r.mu.Unlock()
			if ok {
				res.Goroutines = g
			}
			r.m.sample(p.Name(), inc, now, res)
		}
		self := procResources(os.Getpid())
		self.Goroutines = int64(runtime.NumGoroutine())
		r.m.sample("soak (callers, observers)", 0, now, self)
	})
}

// scrapeAgent reads agent i's /metrics: its count of alive agents (the
// membership check) and its goroutines.
func (r *soakRun) scrapeAgent(ctx context.Context, i int, a *fleet.Process) {
	pid, inc, _ := a.Running()
	if pid == 0 {
		return
	}
	mfs, err := fleet.Scrape(ctx, r.hc, "http://"+r.agentAddr(i, agentHTTPPort)+"/metrics")
	if err != nil {
		return
	}
	if pid2, inc2, _ := a.Running(); pid2 != pid || inc2 != inc {
		return
	}
	if v, ok := mfs.Value("go_goroutines"); ok {
		r.mu.Lock()
		r.goroutines[fmt.Sprintf("%s#%d", a.Name(), inc)] = int64(v)
		r.mu.Unlock()
	}
	if ready, _ := mfs.Value("fusebox_agent_ready"); ready != 1 {
		return // starting: membership is the join's business
	}
	alive, _ := mfs.Value("fusebox_agent_members", "role", "agent", "state", "alive")
	r.m.members(time.Now(), a.Name(), int(alive))
}

// scrapeGoroutines records p's go_goroutines from url.
func (r *soakRun) scrapeGoroutines(ctx context.Context, p *fleet.Process, url string) {
	pid, inc, _ := p.Running()
	if pid == 0 {
		return
	}
	mfs, err := fleet.Scrape(ctx, r.hc, url)
	if err != nil {
		return
	}
	if v, ok := mfs.Value("go_goroutines"); ok {
		r.mu.Lock()
		r.goroutines[fmt.Sprintf("%s#%d", p.Name(), inc)] = int64(v)
		r.mu.Unlock()
	}
}

// progress prints a line a minute.
func (r *soakRun) progress(ctx context.Context) {
	ctxtime.Every(ctx, time.Minute, func() {
		r.m.mu.Lock()
		faults, calls := 0, 0
		for _, s := range r.m.faults {
			faults += s.n
		}
		for _, s := range r.m.calls {
			calls += s.calls
		}
		nv := len(r.m.violations)
		r.m.mu.Unlock()
		r.logf("%d faults, %d calls, %d violations so far; load average %s", faults, calls, nv, scale.LoadAvg())
	})
}
