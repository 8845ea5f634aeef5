package clients

// clientlib against real agents: in-process agents (real gossip on
// loopback, real gRPC on unix sockets, an embedded etcd), real clientlib
// clients connected to their sockets, real HTTP dependencies.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestClientlibThroughRealAgents(t *testing.T) {
	w := newWorld(t, 3)

	// (a) Failures made through clientlib on 2 of 3 agents open the fleet
	// breaker; a client of the third gets ErrOpen from the snapshot its
	// agent pushed, its fallback runs and its attempt function never does.
	t.Run("failures on two agents open the breaker for the third", func(t *testing.T) {
		const name = "shipping-api"
		deps := make([]*clientlib.Dependency, len(w.agents))
		for i, a := range w.agents {
			deps[i] = newClient(t, a, fmt.Sprintf("checkout-%d", i), func(c *clientlib.Config) {
				c.Dependencies = []string{name}
			}).Dependency(name)
		}
		fromAgent(t, deps...)
		for _, d := range deps[:2] {
			for range 8 { // 8 + 8 ≥ minimumRequests 10, from 2 nodes
				if err := d.Do(context.Background(), clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error {
					return errBoom
				}); !errors.Is(err, errBoom) {
					t.Fatalf("failure not returned: %v", err)
				}
			}
		}
		third := deps[2]
		sstest.Eventually(t, 10*time.Second, "the third agent pushes the open breaker to its client", func() bool {
			s := third.Status()
			return s.FromAgent && s.State == clientlib.Open
		})
		called := false
		var fbErr error
		err := third.Do(context.Background(), clientlib.Idempotent, func(context.Context, clientlib.Attempt) error {
			called = true
			return nil
		}, clientlib.WithFallback(func(_ context.Context, err error) error {
			fbErr = err
			return nil
		}))
		if err != nil || called || !errors.Is(fbErr, clientlib.ErrOpen) {
			t.Fatalf("err %v, fn called %v, fallback got %v: want the fallback with ErrOpen and no call", err, called, fbErr)
		}
		var rej *clientlib.RejectedError
		if !errors.As(fbErr, &rej) || rej.Dependency != name {
			t.Errorf("fallback error %#v: want a *RejectedError naming %s", fbErr, name)
		}
		if s := third.Status(); !s.FromAgent {
			t.Errorf("status %+v: the refusal did not come from the agent's snapshot", s)
		}
	})

	// (b) A force-open override written to etcd makes calls through every
	// agent fail fast with ErrForcedOpen.
	t.Run("force-open in etcd fails calls fast on every agent", func(t *testing.T) {
		const name = "billing-api"
		deps := make([]*clientlib.Dependency, len(w.agents))
		for i, a := range w.agents {
			deps[i] = newClient(t, a, fmt.Sprintf("invoice-%d", i), nil).Dependency(name)
		}
		for _, d := range deps { // the dependency works before the override
			if err := d.Do(context.Background(), clientlib.Idempotent, func(context.Context, clientlib.Attempt) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		fromAgent(t, deps...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := w.store.SetOverride(ctx, name, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "incident 42"},
			store.WriteOptions{Actor: "oncall"}); err != nil {
			t.Fatal(err)
		}
		sstest.Eventually(t, 10*time.Second, "every client sees the override", func() bool {
			for _, d := range deps {
				if s := d.Status(); s.Override != clientlib.ForcedOpen || !s.FromAgent {
					return false
				}
			}
			return true
		})
		for i, d := range deps {
			called := false
			err := d.Do(context.Background(), clientlib.Idempotent, func(context.Context, clientlib.Attempt) error {
				called = true
				return nil
			})
			if !errors.Is(err, clientlib.ErrForcedOpen) || !errors.Is(err, clientlib.ErrOpen) || called {
				t.Errorf("client of agent %d: err %v, fn called %v; want ErrForcedOpen without a call", i, err, called)
			}
		}
	})

	// (c) A total outage with retries through clientlib: the agents'
	// AcquireRetry budget caps the retries.
	//
	// Bound: node i admits a retry while its retries are below its share,
	// max(floor, ratio × F_i) × own_i / F_i, where F_i is the fleet's first
	// attempts as node i sees them (gossip makes F_i lag, never lead) and
	// own_i ≤ the first attempts its clients made. So node i admits at most
	// ratio × own_i + floor × own_i/F_i + 1 (the last admitted while below a
	// fractional share). With consistent views Σ own_i/F_i = 1; with stale
	// ones each term is at most 1. Over the test, per budget window:
	// retries ≤ ratio × firstAttempts + n × floor + n.
	t.Run("the fleet retry budget caps retries at a total outage", func(t *testing.T) {
		const (
			name    = "ledger-api"
			ratio   = 0.1
			perSec  = 1.0
			window  = 10 * time.Second
			workers = 4
			calls   = 60 // per worker and client: 720 calls in all
		)
		// The breaker must not open (it would stop the first attempts).
		w.putPolicy(t, name, fmt.Sprintf(`{"breaker":{"minimumRequests":1000000,"window":"%s"},"retry":{"budget":{"ratio":%g,"minRetriesPerSecond":%g}}}`,
			window, ratio, perSec), func(p sharedstate.Policy) bool {
			return p.Breaker.MinimumRequests == 1000000 && p.Retry.Budget.MinRetriesPerSecond == perSec
		})
		deps := make([]*clientlib.Dependency, len(w.agents))
		for i, a := range w.agents {
			deps[i] = newClient(t, a, fmt.Sprintf("payments-%d", i), func(c *clientlib.Config) {
				c.Dependencies = []string{name}
				c.AgentWait = 5 * time.Second // every retry is the agent's decision, none the local fallback's
			}).Dependency(name)
		}
		fromAgent(t, deps...)

		var first, retries, exhausted atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for _, d := range deps {
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range calls {
						err := d.Do(context.Background(), clientlib.Idempotent, func(_ context.Context, a clientlib.Attempt) error {
							if a.Number == 1 {
								first.Add(1)
							} else {
								retries.Add(1)
							}
							return errDown
						})
						if errors.Is(err, clientlib.ErrBudgetExhausted) {
							exhausted.Add(1)
						} else if !errors.Is(err, errDown) {
							t.Errorf("unexpected error: %v", err)
						}
					}
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(start)

		n := float64(len(w.agents))
		floor := perSec * window.Seconds()
		windows := 1 + float64(elapsed/window) // windows the test spanned
		bound := ratio*float64(first.Load()) + windows*(n*floor+n)
		t.Logf("%d first attempts, %d retries admitted (bound %.0f; %d without a budget), %d calls refused a retry, in %v",
			first.Load(), retries.Load(), bound, 2*first.Load(), exhausted.Load(), elapsed)
		if want := int64(len(deps) * workers * calls); first.Load() != want {
			t.Errorf("%d first attempts, want %d", first.Load(), want)
		}
		if float64(retries.Load()) > bound {
			t.Errorf("%d retries admitted, more than ratio × first attempts + n × floor + n = %.0f", retries.Load(), bound)
		}
		if retries.Load() == 0 || exhausted.Load() == 0 {
			t.Errorf("retries %d, refusals %d: want the budget to admit some and refuse the rest", retries.Load(), exhausted.Load())
		}
	})

	// (f) A dependency that answers every call, at 1.5 × slowCallDuration:
	// its slow calls trip the breaker, and half-open judges the probes by
	// the same rule. clientlib reports each probe slow, the agent reopens
	// the breaker on it (never closing it while the calls are slow), and it
	// closes once the calls are fast again.
	t.Run("slow probes keep the breaker open", func(t *testing.T) {
		const (
			name = "pricing-api"
			slow = 75 * time.Millisecond // 1.5 × slowCallDuration
		)
		w.putPolicy(t, name, `{"breaker":{"slowCallDuration":"50ms","slowCallRateThreshold":0.5,"openDuration":"500ms","maxOpenDuration":"500ms",`+
			`"fleetMaxOpenDuration":"500ms","probeSuccessThreshold":1,"probeTimeout":"5s","rampDuration":"0s"}}`, func(p sharedstate.Policy) bool {
			return p.Breaker.SlowCallDuration == sharedstate.Duration(50*time.Millisecond) && p.Breaker.OpenDuration == sharedstate.Duration(500*time.Millisecond)
		})
		deps := make([]*clientlib.Dependency, len(w.agents))
		for i, a := range w.agents {
			deps[i] = newClient(t, a, fmt.Sprintf("catalog-%d", i), func(c *clientlib.Config) {
				c.Dependencies = []string{name}
				c.AgentWait = 5 * time.Second // every probe is the agent's decision
			}).Dependency(name)
		}
		fromAgent(t, deps...)
		var latency atomic.Int64
		latency.Store(int64(slow))
		var probes, slowProbes atomic.Int64
		call := func(d *clientlib.Dependency) error {
			return d.Do(context.Background(), clientlib.NonRetryable, func(ctx context.Context, a clientlib.Attempt) error {
				l := time.Duration(latency.Load())
				if a.Probe {
					probes.Add(1)
					if l >= slow {
						slowProbes.Add(1)
					}
				}
				tm := time.NewTimer(l) // the dependency's answer time
				defer tm.Stop()
				select {
				case <-tm.C:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}
		// Traffic from every client until stop: slow, then fast.
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, d := range deps {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pace := time.NewTimer(0)
					defer pace.Stop()
					for ctx.Err() == nil {
						err := call(d)
						if err != nil && !errors.Is(err, clientlib.ErrOpen) {
							t.Errorf("call: %v", err)
							return
						}
						pace.Reset(5 * time.Millisecond) // a caller's pace, so that refusals do not spin
						select {
						case <-pace.C:
						case <-ctx.Done():
						}
					}
				}()
			}
		}
		defer func() { stop(); wg.Wait() }()
		eng := w.agents[0].Engine()
		sstest.Eventually(t, 20*time.Second, "slow calls open the breaker and slow probes reopen it twice", func() bool {
			s := eng.Snapshot(name)
			return s != nil && s.State != sharedstate.Closed && s.OpenCount >= 3
		})
		// Every transition since the trip was a reopen: a close would have
		// reset the open count (a trip starts it at 1).
		if s := eng.Snapshot(name); s.OpenCount != uint32(s.Generation) {
			t.Errorf("generation %d, open count %d: the breaker closed while every call was slow", s.Generation, s.OpenCount)
		}
		if slowProbes.Load() == 0 {
			t.Fatalf("%d probes, none slow: half-open was not exercised", probes.Load())
		}
		latency.Store(int64(time.Millisecond))
		sstest.Eventually(t, 20*time.Second, "fast calls close the breaker on every agent", func() bool {
			for _, a := range w.agents {
				if s := a.Engine().Snapshot(name); s == nil || s.State != sharedstate.Closed {
					return false
				}
			}
			return true
		})
		t.Logf("%d probes, %d of them slow", probes.Load(), slowProbes.Load())
	})

	// (e) Two services chained over HTTP, each on its own agent: the top
	// one owns retries, the middle one makes single attempts, so one user
	// request reaches the bottom dependency 3 times (maxAttempts), not 9.
	t.Run("one retrying layer across two services", func(t *testing.T) {
		var bottomHits, middleHits atomic.Int64
		bottom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bottomHits.Add(1)
			http.Error(w, "bottom is down", http.StatusServiceUnavailable)
		}))
		defer bottom.Close()

		mid := newClient(t, w.agents[1], "middle", nil)
		midTransport := &http.Transport{}
		defer midTransport.CloseIdleConnections()
		midHTTP := &http.Client{Transport: mid.RoundTripper(midTransport, clientlib.HTTPDependency("bottom"))}
		middle := httptest.NewServer(mid.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			middleHits.Add(1)
			req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, bottom.URL, nil)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			resp, err := midHTTP.Do(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			w.WriteHeader(resp.StatusCode)
		})))
		defer middle.Close()

		top := newClient(t, w.agents[0], "top", nil)
		topTransport := &http.Transport{}
		defer topTransport.CloseIdleConnections()
		topHTTP := &http.Client{Transport: top.RoundTripper(topTransport, clientlib.HTTPDependency("middle"))}
		// Both ends follow their agents' policy (maxAttempts 3).
		fromAgent(t, top.Dependency("middle"), mid.Dependency("bottom"))

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, middle.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := topHTTP.Do(req) // one user request
		if err != nil {
			t.Fatalf("top: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d, want the last 503", resp.StatusCode)
		}
		if got := bottomHits.Load(); got != 3 {
			t.Errorf("the bottom dependency saw %d attempts for one user request, want 3 (9 with two retrying layers)", got)
		}
		if got := middleHits.Load(); got != 3 {
			t.Errorf("the middle service saw %d attempts, want 3", got)
		}
	})
}

// (d) The agent is closed mid-traffic: no call outlives its deadline, calls
// keep succeeding on the local fallback against a healthy dependency, and
// the client reconnects to a new agent on the same socket path.
func TestClientlibSurvivesAgentRestart(t *testing.T) {
	w := startWorld(t, 1, false, nil)
	a1 := w.agents[0]

	var served atomic.Int64
	dependency := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer dependency.Close()

	const name = "catalog"
	var (
		evMu   sync.Mutex
		events []bool // AgentEvent.Connected, in order
	)
	c := newClient(t, a1, "storefront", func(c *clientlib.Config) {
		c.Dependencies = []string{name}
		c.OnAgentChange = func(ev clientlib.AgentEvent) {
			evMu.Lock()
			events = append(events, ev.Connected)
			evMu.Unlock()
		}
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: c.RoundTripper(tr, clientlib.HTTPDependency(name))}
	dep := c.Dependency(name)
	fromAgent(t, dep)

	var (
		calls, failed, late, localCalls atomic.Int64
		stop                            = make(chan struct{})
		wg                              sync.WaitGroup
	)
	const deadline = 2 * time.Second
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				viaAgent := dep.Status().FromAgent
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dependency.URL, nil)
				resp, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if ctx.Err() != nil {
					late.Add(1) // the call returned after its deadline
				}
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("call failed: %v", err)
				}
				calls.Add(1)
				if !viaAgent {
					localCalls.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // paces the traffic; waits for nothing
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	sstest.Eventually(t, 10*time.Second, "traffic counted by the agent", func() bool {
		f, ok := a1.Engine().Fleet(name)
		return ok && f.Node.Successes > 20
	})
	w.Stop(0)
	if err := a1.Close(); err != nil { // again: its error
		t.Fatalf("Close: %v", err)
	}
	sstest.Eventually(t, 10*time.Second, "the client to notice the agent is gone", func() bool { return !c.AgentConnected() })
	before := localCalls.Load()
	sstest.Eventually(t, 10*time.Second, "calls on the local fallback", func() bool { return localCalls.Load() > before+50 })

	if err := w.Start(fleettest.Ctx(t, 20*time.Second), 0); err != nil { // same socket path
		t.Fatal(err)
	}
	a2 := w.Agent(0)
	sstest.Eventually(t, 10*time.Second, "the client to reconnect to the new agent", func() bool {
		return c.AgentConnected() && dep.Status().FromAgent
	})
	sstest.Eventually(t, 10*time.Second, "traffic counted by the new agent", func() bool {
		f, ok := a2.Engine().Fleet(name)
		return ok && f.Node.Successes > 0
	})
	close(stop)
	wg.Wait()

	if failed.Load() != 0 || late.Load() != 0 {
		t.Errorf("%d of %d calls failed, %d outlived their deadline", failed.Load(), calls.Load(), late.Load())
	}
	if served.Load() < calls.Load() {
		t.Errorf("the dependency served %d requests for %d calls", served.Load(), calls.Load())
	}
	// Callbacks run on the client's own goroutine: wait for the last one.
	sstest.Eventually(t, 10*time.Second, "the reconnection reported to OnAgentChange", func() bool {
		evMu.Lock()
		defer evMu.Unlock()
		return len(events) >= 3 && events[len(events)-1]
	})
	evMu.Lock()
	if !events[0] || events[1] {
		t.Errorf("agent events (connected?) %v, want connected, lost, …, connected", events)
	}
	evMu.Unlock()
	t.Logf("%d calls, %d decided by the local fallback", calls.Load(), localCalls.Load())
}
