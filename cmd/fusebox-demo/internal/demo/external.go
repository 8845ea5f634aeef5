package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// readHeaderTimeout bounds how long the demo's HTTP servers (its own and
// the dependencies') wait for a request's headers.
const readHeaderTimeout = 5 * time.Second

// servicesReady reports whether every service's client is connected to its
// agent and decides with its snapshots.
func (d *Demo) servicesReady() bool {
	for _, s := range d.services {
		if !s.ready() {
			return false
		}
	}
	return len(d.services) == len(serviceNames)
}

// startHTTP serves /healthz (the process runs) and /readyz (every service
// decides with the agent's snapshots) on Config.HTTPAddr.
func (d *Demo) startHTTP() error {
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("demo: http-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if d.httpServicesReady() {
			_, _ = fmt.Fprintln(w, "ok")
			return
		}
		http.Error(w, "not ready: the services do not all decide with the agent's snapshots ("+d.cfg.Agent+")", http.StatusServiceUnavailable)
	})
	d.httpLn = ln
	d.http = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout}
	d.httpDone = make(chan struct{})
	go func() {
		defer close(d.httpDone)
		_ = d.http.Serve(ln)
	}()
	return nil
}

// httpServicesReady is servicesReady for the HTTP handler, which may run
// while Start still appends services.
func (d *Demo) httpServicesReady() bool {
	select {
	case <-d.stop:
		return false
	default:
	}
	return d.started.Load() && d.servicesReady()
}

// closeHTTP stops the HTTP server, if any, and waits for it.
func (d *Demo) closeHTTP() {
	if d.http == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := d.http.Shutdown(ctx); err != nil {
		_ = d.http.Close()
	}
	<-d.httpDone
}

// running reports whether the traffic runs: started, and not finished.
func (d *Demo) running() bool {
	if !d.started.Load() {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

func (d *Demo) agentChanged(e clientlib.AgentEvent) {
	if e.Connected && e.Node != "" {
		node := e.Node
		d.agentNode.Store(&node)
	}
	if d.running() {
		state := "lost"
		if e.Connected {
			state = "connected"
		}
		d.printf("%7.2fs  agent       %s %s (%s)\n", time.Since(d.sched.start).Seconds(), d.agentName(), state, d.cfg.Agent)
	}
}

// agentName is the external agent's node name, once its Welcome arrived,
// else its address.
func (d *Demo) agentName() string {
	if n := d.agentNode.Load(); n != nil {
		return *n
	}
	return d.cfg.Agent
}

// clientChanged turns a state change the first service's client sees into
// a Transition, as the watcher does with the in-process agents' snapshots.
// Changes before the traffic starts (the first snapshots) or after it
// stopped (the clients closing) are not transitions, nor are changes of
// the deciding side alone.
func (d *Demo) clientChanged(c clientlib.StateChange) {
	if !d.running() {
		return
	}
	from, to, ok := clientTransition(c)
	if !ok {
		return
	}
	now := time.Now()
	k := d.sched.index(now)
	d.recordTransition(Transition{
		At: now, Elapsed: now.Sub(d.sched.start), Agent: d.agentName(), Dependency: c.Dependency,
		From: from, To: to, Generation: c.To.Generation,
		Cycle: k / int(numPhases), Phase: Phase(k % int(numPhases)),
	})
}

// clientTransition names a client's state change's two ends; ok is false
// when it is no transition: nothing moved, or only the deciding side did
// (the local fallback handing over to the agent's push, or back).
func clientTransition(c clientlib.StateChange) (from, to string, ok bool) {
	if c.From.FromAgent != c.To.FromAgent && decidedStateName(c.From) == decidedStateName(c.To) {
		return "", "", false
	}
	from, to = clientStateName(c.From), clientStateName(c.To)
	if from == to && c.From.Generation == c.To.Generation {
		return "", "", false
	}
	return from, to, true
}

// clientStateName is a client's Status as the dashboard names it (see
// stateName); "local-fallback:" prefixes what the client decides alone.
func clientStateName(s clientlib.Status) string {
	name := decidedStateName(s)
	if !s.FromAgent {
		name = "local-fallback:" + name
	}
	return name
}

// decidedStateName is a client's Status as the dashboard names it, whoever
// decided it.
func decidedStateName(s clientlib.Status) string {
	snap := &sharedstate.Snapshot{State: s.State, LocalState: s.LocalState, Override: s.Override}
	if s.Shadow {
		snap.Policy = &sharedstate.Policy{Breaker: sharedstate.BreakerPolicy{Mode: sharedstate.ModeShadow}}
	}
	return stateName(snap)
}

// printExternalBanner is printBanner with Config.Agent.
func (d *Demo) printExternalBanner() {
	if d.cfg.Headless {
		d.printf("fusebox-demo: agent %s (%s)  health http://%s/readyz\n", d.agentName(), d.cfg.Agent, d.HTTPAddr())
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nFusebox demo services on an external agent: %s (node %s).\n\n", d.cfg.Agent, d.agentName())
	fmt.Fprintf(&b, "  Services       %s, calling %s and %s through clientlib\n", strings.Join(serviceNames, ", "), ShippingAPI, CatalogAPI)
	fmt.Fprintf(&b, "  Readiness      http://%s/readyz\n", d.HTTPAddr())
	fmt.Fprintf(&b, "\n  %s cycles every %v: healthy -> failing -> slow -> recovering (%v each);\n",
		ShippingAPI, 4*d.cfg.PhaseDuration, d.cfg.PhaseDuration)
	fmt.Fprintf(&b, "  %s stays healthy. The agent's policies apply (%s policy get %s), not the demo's.\n", CatalogAPI, shellWord(d.cfg.Fuseboxctl), ShippingAPI)
	fmt.Fprintf(&b, "  Transitions are the ones the services' clients see; Ctrl-C stops the demo and prints a summary.\n\n")
	d.printf("%s", b.String())
}
