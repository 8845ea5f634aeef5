package demo

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// HeaderService names the calling service (for the curious reader of a
// packet capture; the dependency does not use it).
const HeaderService = "X-Fusebox-Demo-Service"

// Latencies of the phases.
const (
	slowLatency       = 300 * time.Millisecond
	recoveringLatency = 60 * time.Millisecond
)

// ProbeStats is what a dependency saw of half-open probes.
type ProbeStats struct {
	// Requests is the number of probe requests served.
	Requests uint64
	// MaxConcurrent is the most probe requests in flight at once.
	MaxConcurrent int
}

// dependency is a demo HTTP dependency on 127.0.0.1: shipping-api cycles
// through the phases of its schedule, catalog-api is always healthy.
type dependency struct {
	name   string
	sched  schedule
	cycles bool

	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup

	requests atomic.Uint64
	inFlight atomic.Int64 // probes being served

	mu      sync.Mutex
	probes  ProbeStats
	byPhase map[int]ProbeStats // phase number → probes seen in it
}

func startDependency(name string, sched schedule, cycles bool) (*dependency, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: %s: %w", name, err)
	}
	d := &dependency{name: name, sched: sched, cycles: cycles, ln: ln, byPhase: map[int]ProbeStats{}}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: readHeaderTimeout}
	d.wg.Go(func() {
		_ = d.srv.Serve(ln) // ErrServerClosed after close
	})
	return d, nil
}

// URL is where services call the dependency.
func (d *dependency) URL() string { return "http://" + d.ln.Addr().String() + "/" + d.name }

// close stops the server; requests still running are cut off.
func (d *dependency) close() {
	_ = d.srv.Close()
	d.wg.Wait()
}

func (d *dependency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	n := d.requests.Add(1)
	k := d.sched.index(now)
	// clientlib's attempts and the egress proxy both mark a half-open
	// probe with Fusebox-Probe: count those being served at once.
	if r.Header.Get(clientlib.HeaderProbe) == "1" {
		d.probeStarted(k)
		defer d.inFlight.Add(-1)
	}
	phase := Healthy
	if d.cycles {
		phase = d.sched.at(now)
	}
	var (
		delay  time.Duration
		status = http.StatusOK
	)
	switch phase {
	case Healthy:
		delay = time.Duration(5+rand.IntN(21)) * time.Millisecond
		if d.cycles && n%100 == 0 {
			status = http.StatusServiceUnavailable
		}
	case Failing:
		status = http.StatusServiceUnavailable
	case Slow:
		delay = slowLatency
	case Recovering:
		delay = recoveringLatency
	}
	if delay > 0 && !ctxtime.Sleep(r.Context(), delay) {
		return // the caller gave up
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	if status == http.StatusOK {
		fmt.Fprintf(w, "%s: ok (%s)\n", d.name, phase)
	} else {
		fmt.Fprintf(w, "%s: unavailable (%s)\n", d.name, phase)
	}
}

func (d *dependency) probeStarted(k int) {
	n := int(d.inFlight.Add(1))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probes.Requests++
	d.probes.MaxConcurrent = max(d.probes.MaxConcurrent, n)
	p := d.byPhase[k]
	p.Requests++
	p.MaxConcurrent = max(p.MaxConcurrent, n)
	d.byPhase[k] = p
}

// probeStats returns the probes seen overall.
func (d *dependency) probeStats() ProbeStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.probes
}

// probeStatsIn returns the probes seen during phase number k.
func (d *dependency) probeStatsIn(k int) ProbeStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byPhase[k]
}
