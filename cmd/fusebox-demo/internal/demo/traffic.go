package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Counts are what the demo's services did with one dependency, counted on
// the callers' side.
type Counts struct {
	// Calls is the number of Dependency.Do calls that ended (a call may
	// make several attempts). Calls cut short by the demo stopping are not
	// counted.
	Calls uint64
	// Succeeded, Failed and Rejected split Calls: Rejected calls were
	// refused by the breaker before any attempt (clientlib.ErrOpen), Failed
	// calls made attempts and ended with an error.
	Succeeded, Failed, Rejected uint64
	// BudgetDenied is the number of calls whose retry the fleet retry
	// budget refused (clientlib.ErrBudgetExhausted); they are also Failed.
	BudgetDenied uint64
	// FirstAttempts is the number of first attempts sent, probes included.
	FirstAttempts uint64
	// Retries is the number of retries sent.
	Retries uint64
	// Probes is the number of half-open probes sent (also FirstAttempts).
	Probes uint64
}

// Attempts is the number of requests sent: first attempts plus retries.
func (c Counts) Attempts() uint64 { return c.FirstAttempts + c.Retries }

// Minus returns c − o, field by field.
func (c Counts) Minus(o Counts) Counts {
	return Counts{
		Calls: c.Calls - o.Calls, Succeeded: c.Succeeded - o.Succeeded, Failed: c.Failed - o.Failed,
		Rejected: c.Rejected - o.Rejected, BudgetDenied: c.BudgetDenied - o.BudgetDenied,
		FirstAttempts: c.FirstAttempts - o.FirstAttempts, Retries: c.Retries - o.Retries, Probes: c.Probes - o.Probes,
	}
}

// counters are the cumulative Counts of one dependency, shared by every
// service's workers.
type counters struct {
	calls, succeeded, failed, rejected, budgetDenied atomic.Uint64
	first, retries, probes                           atomic.Uint64
}

// ended counts a call that ended: it succeeded, or was rejected before
// any attempt, or failed; budgetDenied says the budget refused its retry.
func (c *counters) ended(ok, rejected, budgetDenied bool) {
	c.calls.Add(1)
	switch {
	case ok:
		c.succeeded.Add(1)
	case rejected:
		c.rejected.Add(1)
	default:
		c.failed.Add(1)
	}
	if budgetDenied {
		c.budgetDenied.Add(1)
	}
}

func (c *counters) load() Counts {
	return Counts{
		Calls: c.calls.Load(), Succeeded: c.succeeded.Load(), Failed: c.failed.Load(),
		Rejected: c.rejected.Load(), BudgetDenied: c.budgetDenied.Load(),
		FirstAttempts: c.first.Load(), Retries: c.retries.Load(), Probes: c.probes.Load(),
	}
}

// service is one simulated service: a clientlib client connected to one
// agent's socket (or, for a service as one in another language would be,
// only its agent's egress proxy), and workers calling the dependencies at
// a steady pace.
type service struct {
	name   string
	client *clientlib.Client    // nil for a service behind the proxy
	reg    *prometheus.Registry // the client's metrics
	http   *http.Client
}

// newProxiedService is a service that links no clientlib: its requests go
// through the egress proxy at addr (host:port), which applies the agent's
// breaker, budget and retries to them. The proxy is set on the transport:
// http.ProxyFromEnvironment never proxies a loopback upstream.
func newProxiedService(name, addr string) *service {
	u := &url.URL{Scheme: "http", Host: addr}
	tr := &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	return &service{name: name, http: &http.Client{Transport: tr}}
}

// newService connects a service's client to the agent at address;
// onChange and onAgent, when not nil, receive its state changes and agent
// events.
func newService(name, address string, onChange func(clientlib.StateChange), onAgent func(clientlib.AgentEvent)) (*service, error) {
	reg := prometheus.NewRegistry()
	c, err := clientlib.New(clientlib.Config{
		AgentAddress:  address,
		OnStateChange: onChange,
		OnAgentChange: onAgent,
		Service:       name,
		Instance:      name + "-1",
		Dependencies:  []string{ShippingAPI, CatalogAPI},
		Registerer:    reg,
		// Three agents, etcd, a coordinator and the traffic share one
		// process: give the agent more than the default 50ms to answer a
		// retry or probe request before the client decides locally.
		AgentWait: DefaultAgentWait,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: service %s: %w", name, err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	return &service{name: name, client: c, reg: reg, http: &http.Client{Transport: tr}}, nil
}

// ready reports whether the client decides from its agent's snapshots for
// every dependency.
func (s *service) ready() bool {
	if s.client == nil {
		return true // the proxy decides with the agent's engine itself
	}
	if !s.client.AgentConnected() {
		return false
	}
	for _, dep := range []string{ShippingAPI, CatalogAPI} {
		if !s.client.Dependency(dep).Status().FromAgent {
			return false
		}
	}
	return true
}

func (s *service) close() {
	if s.client != nil {
		_ = s.client.Close()
	}
	s.http.CloseIdleConnections()
}

// fallbacks returns how many synchronous questions to the agent this
// client decided locally, by call (acquire_retry, acquire_probe, check).
func (s *service) fallbacks() map[string]uint64 {
	out := map[string]uint64{}
	if s.reg == nil {
		return out
	}
	mfs, err := s.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "fusebox_client_agent_fallbacks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "call" {
					out[l.GetValue()] += uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// worker calls dep at url once per interval until ctx is done. A call
// slower than the interval delays the next one (ticks are dropped), as a
// real worker pool of that size would.
func (s *service) worker(ctx context.Context, dep, url string, interval time.Duration, c *counters) {
	call := func(ctx context.Context) { s.callProxy(ctx, dep, url, c) }
	if s.client != nil {
		handle := s.client.Dependency(dep)
		call = func(ctx context.Context) { s.call(ctx, handle, url, c) }
	}
	// Spread the workers over the interval.
	if !ctxtime.Sleep(ctx, rand.N(interval)) {
		return
	}
	call(ctx)
	ctxtime.Every(ctx, interval, func() { call(ctx) })
}

// call makes one call through clientlib (idempotent GETs: retried by the
// policy and the budget) and counts it.
func (s *service) call(ctx context.Context, dep *clientlib.Dependency, url string, c *counters) {
	cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	defer cancel()
	attempts := 0
	err := dep.Do(cctx, clientlib.Idempotent, func(actx context.Context, a clientlib.Attempt) error {
		attempts++
		if a.Number == 1 {
			c.first.Add(1)
		} else {
			c.retries.Add(1)
		}
		if a.Probe {
			c.probes.Add(1)
		}
		req, err := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
		if err != nil {
			return errors.Join(clientlib.ErrNotRetryable, err)
		}
		a.SetHeaders(req.Header) // Fusebox-Probe on a probe: the dependency counts them
		req.Header.Set(HeaderService, s.name)
		resp, err := s.http.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return clientlib.CheckResponse(resp)
	})
	if ctx.Err() != nil {
		return // the demo is stopping: the call says nothing about the dependency
	}
	c.ended(err == nil, attempts == 0 && errors.Is(err, clientlib.ErrOpen), errors.Is(err, clientlib.ErrBudgetExhausted))
}

// callProxy makes one call through the agent's egress proxy, as a
// service in another language would (an idempotent GET: the proxy retries
// it as the policy and the budget allow), and counts it from the proxy's
// answer headers.
func (s *service) callProxy(ctx context.Context, dep, url string, c *counters) {
	cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout+time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	req.Header.Set(proxy.HeaderDependency, dep)
	req.Header.Set(proxy.HeaderService, s.name)
	req.Header.Set(proxy.HeaderTimeoutMs, strconv.FormatInt(DefaultCallTimeout.Milliseconds(), 10))
	req.Header.Set(HeaderService, s.name)
	resp, err := s.http.Do(req)
	if ctx.Err() != nil {
		if err == nil {
			resp.Body.Close()
		}
		return // the demo is stopping
	}
	if err != nil { // the proxy itself is away
		c.ended(false, false, false)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	attempts, _ := strconv.Atoi(resp.Header.Get(proxy.HeaderAttempts))
	if attempts > 0 {
		c.first.Add(1)
		c.retries.Add(uint64(attempts - 1))
	}
	if resp.Header.Get(proxy.HeaderProbe) == "1" {
		c.probes.Add(1)
	}
	rejected := resp.Header.Get(proxy.HeaderRejected)
	c.ended(resp.StatusCode < 400, attempts == 0 && rejected != "", rejected == "budget-exhausted")
}

// pace returns how many workers, each calling once per interval, make rate
// calls per second: at most 10 calls per second per worker.
func pace(rate int) (workers int, interval time.Duration) {
	workers = (rate + 9) / 10
	return workers, time.Duration(workers) * time.Second / time.Duration(rate)
}
