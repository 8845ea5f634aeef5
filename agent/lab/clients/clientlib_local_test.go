package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestClientlibKeepsFleetDecisionsWhileAgentRestarts: a rolling upgrade of
// the agent during an incident. A dependency forced open in etcd, one the
// fleet throttles and one under a concurrency limit; the agent goes away.
// The client keeps all three: no call reaches the forced-open dependency
// until the override's TTL passes (then calls flow again under the local
// breaker), first attempts stay throttled, and no more calls than the
// pushed share are in flight. A new agent on the same socket decides again.
func TestClientlibKeepsFleetDecisionsWhileAgentRestarts(t *testing.T) {
	w := newWorld(t, 1) // ready
	st, a1 := w.store, w.agents[0]

	const payments, ledger, catalog = "payments", "ledger", "catalog"
	// ledger: throttled, its breaker never trips, a 10 s window; catalog:
	// two calls in flight in the whole fleet (one agent, one client).
	w.putPolicy(t, ledger, `{"throttle":{"enabled":true,"k":1.5,"minRequests":10},"breaker":{"minimumRequests":1000000,"window":"10s"}}`,
		func(p sharedstate.Policy) bool {
			return p.Throttle.Enabled && p.Breaker.Window == sharedstate.Duration(10*time.Second)
		})
	w.putPolicy(t, catalog, `{"concurrency":{"maxInFlight":2}}`,
		func(p sharedstate.Policy) bool { return p.Concurrency.MaxInFlight == 2 })

	var hits atomic.Int64
	dependency := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "paid")
	}))
	defer dependency.Close()
	c := newClient(t, a1, "checkout", func(c *clientlib.Config) { c.Dependencies = []string{payments, ledger, catalog} })
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: c.RoundTripper(tr, clientlib.HTTPDependency(payments))}
	pay := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dependency.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	pd, ld, cd := c.Dependency(payments), c.Dependency(ledger), c.Dependency(catalog)
	fromAgent(t, pd, ld, cd)
	if err := pay(); err != nil {
		t.Fatalf("payments before the incident: %v", err)
	}

	// The fleet throttles ledger (its calls fail: accepts 0), and the
	// client follows (Random 0: every first attempt is refused).
	reached := func(d *clientlib.Dependency, fail bool) (bool, error) {
		called := false
		err := d.Do(context.Background(), clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error {
			called = true
			if fail {
				return errBoom
			}
			return nil
		})
		return called, err
	}
	sstest.Eventually(t, 10*time.Second, "the fleet to throttle ledger in the client", func() bool {
		_, err := reached(ld, true)
		return errors.Is(err, clientlib.ErrThrottled)
	})
	sstest.Eventually(t, 10*time.Second, "catalog's share pushed", func() bool { return cd.ConcurrencyLimit() == 2 })

	// The incident: payments forced open for 8 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ov, err := st.SetOverride(ctx, payments, store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: "incident 7", TTL: 8 * time.Second},
		store.WriteOptions{Actor: "oncall"})
	if err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the client to see the override", func() bool {
		s := pd.Status()
		return s.Override == clientlib.ForcedOpen && s.FromAgent
	})
	before := hits.Load()

	// The agent goes away (a rolling upgrade).
	closed := make(chan error, 1)
	go func() {
		w.Stop(0)
		closed <- a1.Close() // again: its error
	}()
	sstest.Eventually(t, 10*time.Second, "the client to notice the agent is gone", func() bool { return !c.AgentConnected() })

	if s := pd.Status(); s.Override != clientlib.ForcedOpen || s.FromAgent {
		t.Errorf("payments without the agent: %+v, want forced open, decided locally", s)
	}
	localCalls := 0
	for time.Now().Before(ov.Expires.Add(-time.Second)) && localCalls < 20 {
		if err := pay(); !errors.Is(err, clientlib.ErrForcedOpen) {
			t.Fatalf("payments without the agent, before the override's expiry: %v, want ErrForcedOpen", err)
		}
		localCalls++
	}
	if localCalls == 0 {
		t.Fatalf("the client noticed the agent's absence after the override had (nearly) expired at %v: no call checked", ov.Expires)
	}
	if got := hits.Load(); got != before {
		t.Errorf("%d calls reached the forced-open dependency while the agent was away", got-before)
	}
	if called, err := reached(ld, false); called || !errors.Is(err, clientlib.ErrThrottled) {
		t.Errorf("ledger without the agent: called %v, err %v; want still throttled", called, err)
	}
	var dones []func(clientlib.Outcome)
	for range 2 {
		done, err := cd.Allow(clientlib.First)
		if err != nil {
			t.Fatalf("catalog within its share: %v", err)
		}
		dones = append(dones, done)
	}
	if called, err := reached(cd, false); called || !errors.Is(err, clientlib.ErrConcurrencyLimit) {
		t.Errorf("a third catalog call in flight without the agent: called %v, err %v; want ErrConcurrencyLimit", called, err)
	}
	for _, done := range dones {
		done(clientlib.Success)
	}
	t.Logf("%d calls refused locally before the override's expiry at %v", localCalls, ov.Expires.Format(time.RFC3339Nano))

	// The override's TTL passes: calls flow again, under the local breaker.
	sstest.Eventually(t, 20*time.Second, "payments to be called again after the override expired", func() bool {
		return pay() == nil
	})
	if s := pd.Status(); s.Override != clientlib.OverrideNone || s.FromAgent || s.Rejecting() {
		t.Errorf("payments after the expiry: %+v, want the local breaker, closed", s)
	}
	if time.Now().Before(ov.Expires) {
		t.Errorf("a call reached payments at %v, before the override's expiry at %v", time.Now(), ov.Expires)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A new agent on the same socket decides again.
	if err := w.Start(fleettest.Ctx(t, 20*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 20*time.Second, "the client to reconnect to the new agent", func() bool {
		return c.AgentConnected() && pd.Status().FromAgent && cd.Status().FromAgent
	})
	if err := pay(); err != nil {
		t.Errorf("payments through the new agent: %v", err)
	}
}
