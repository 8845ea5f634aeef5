package agent

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// egressEngine is the agent's side of the egress proxy (proxy.Engine, the
// clientlib.Engine its in-process client decides through): the agent's
// own engine, with the proxy counted as one more client of the
// dependencies it calls, as a clientlib session is. Its counts go into the
// node's window (what the agent gossips), its probe transitions go out at
// once, it gets its part of the node's concurrency share, and its
// snapshots are pushed by the hub as the sessions' are.
type egressEngine struct {
	*proxy.LocalEngine
	a *Agent
}

// Track implements proxy.Engine: the dependency is tracked and the proxy
// follows it (its share of the concurrency limit). A refused name counts
// in fusebox_agent_dependencies_refused_total.
func (e egressEngine) Track(dep string) error {
	if err := e.LocalEngine.Track(dep); err != nil {
		e.a.m.refused(err)
		return err
	}
	e.a.hub.follow(dep)
	e.a.hub.changed(dep) // the sessions' shares changed
	return nil
}

// Release implements proxy.Engine.
func (e egressEngine) Release(dep string) {
	e.a.hub.leave([]string{dep}, nil)
	e.a.hub.changed(dep)
}

// AddCounts implements clientlib.Engine: counted as a session's deltas.
func (e egressEngine) AddCounts(dep string, c sharedstate.Counts) error {
	if err := e.a.eng.AddCounts(dep, c); err != nil {
		e.a.m.refused(err)
		return err
	}
	e.a.egressOutcomes.Add(float64(c.Requests() + c.Rejected))
	return nil
}

// Watch implements clientlib.Engine: the hub calls f whenever it tells
// the sessions that a snapshot or a share changed.
func (e egressEngine) Watch(f func(dep string)) { e.a.hub.watchEgress(f) }

// ProbeOutcome implements proxy.Engine: a transition goes straight out.
func (e egressEngine) ProbeOutcome(dep string, o sharedstate.Outcome) {
	if rec, ok := e.a.eng.ProbeOutcome(dep, o); ok {
		e.a.proposeNow(rec)
	}
}

// ConcurrencyLimit implements proxy.Engine: the proxy's part of the
// node's share, as a session's.
func (e egressEngine) ConcurrencyLimit(dep string) int {
	s := e.a.eng.Snapshot(dep)
	if s == nil {
		return 0
	}
	return int(e.a.processShare(dep, s.ConcurrencyLimit))
}

// ReportInFlight implements proxy.Engine: the node's in-flight count is
// the sessions' and the proxy's.
func (e egressEngine) ReportInFlight(dep string, old, n uint64) {
	_ = e.a.eng.SetInFlight(dep, e.a.hub.setInFlight(dep, old, n))
}

// newProxy builds the egress proxy of cfg.Proxy (bound, not served).
func (a *Agent) newProxy() (*proxy.Proxy, error) {
	c := a.cfg.Proxy
	pc := proxy.DefaultConfig()
	pc.Addr = c.Addr
	if ln := a.opts.ProxyListener; ln != nil {
		if !sameAddr(ln.Addr().String(), c.Addr) {
			ln.Close()
			return nil, fmt.Errorf("the socket handed to the agent for the proxy is bound to %s, not %s", ln.Addr(), c.Addr)
		}
		pc.Listener = ln
	}
	pc.AllowNonLoopback = c.Insecure
	pc.Engine = egressEngine{LocalEngine: &proxy.LocalEngine{Engine: a.eng}, a: a}
	pc.Own = a.ownAddrs()
	pc.AllowHosts = c.AllowHosts
	pc.Routes = c.Routes
	pc.AllowAnyDependency = c.AllowAnyDependency
	pc.Confirm = a.confirm
	pc.MaxConns = c.MaxConns
	pc.MaxConnsPerClient = c.MaxConnsPerClient
	pc.MaxHeaderBytes = c.MaxHeaderBytes
	pc.MaxBodyBuffer = int64(c.MaxBodyBuffer)
	pc.BodyBufferBudget = int64(c.BodyBufferBudget)
	pc.BodyTimeout = c.BodyTimeout
	pc.MaxDependencies = a.cfg.MaxDependencies
	pc.CAFile = c.CAFile
	pc.ShutdownTimeout = max(a.cfg.ShutdownTimeout/3, 10*time.Millisecond)
	pc.Registerer = registerers{a.reg, a.opts.Registerer}
	pc.Logger = a.lg.With("component", "proxy")
	return proxy.New(pc)
}

// ownAddrs are the addresses of the agent's listeners: gossip (bound and
// advertised), local gRPC, HTTP.
func (a *Agent) ownAddrs() []string {
	var out []string
	if g := a.gossip; g != nil {
		adv := g.Addr()
		out = append(out, adv)
		if host, _, err := net.SplitHostPort(a.cfg.GossipAddr); err == nil {
			if _, port, err := net.SplitHostPort(adv); err == nil {
				out = append(out, net.JoinHostPort(host, port))
			}
		}
	}
	if a.cfg.AdvertiseAddr != "" {
		out = append(out, a.cfg.AdvertiseAddr)
	}
	for _, ln := range []net.Listener{a.tcpLn, a.httpLn} {
		if ln != nil {
			out = append(out, ln.Addr().String())
		}
	}
	return out
}

// ProxyAddr returns the address of the egress proxy, or "" when off.
func (a *Agent) ProxyAddr() string {
	if a.proxy == nil {
		return ""
	}
	return a.proxy.Addr()
}

// registerers registers collectors on each of its non-nil registerers.
type registerers []prometheus.Registerer

func (rs registerers) Register(c prometheus.Collector) error {
	for _, r := range rs {
		if r != nil {
			if err := r.Register(c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (rs registerers) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := rs.Register(c); err != nil {
			panic(err)
		}
	}
}

func (rs registerers) Unregister(c prometheus.Collector) bool {
	ok := false
	for _, r := range rs {
		if r != nil && r.Unregister(c) {
			ok = true
		}
	}
	return ok
}
