package clients

// Who may name a dependency through the egress proxy of real agents, and
// what reaches the fleet: a local process can neither speak for a
// dependency by naming it nor fill the fleet's tables with names.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// withStrictProxy turns the proxy on with its default naming rule.
func withStrictProxy(c *agent.Config) {
	c.Proxy.Addr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
}

// One local process sends successes under a dead dependency's name
// through the proxy, to an upstream of its own: refused, so the failures
// the dependency's real callers see on two agents open its fleet breaker.
func TestProxyCallerCannotSpeakForADependency(t *testing.T) {
	w := newWorldWith(t, 2, withStrictProxy)
	a0 := w.agents[0]
	const dep = "payments-api"
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fine") }))
	defer liar.Close()
	pc, plain := proxyClient(t, a0), &http.Client{Timeout: 20 * time.Second}

	deps := make([]*clientlib.Dependency, len(w.agents))
	for i, a := range w.agents {
		deps[i] = newClient(t, a, fmt.Sprintf("checkout-%d", i), func(c *clientlib.Config) { c.Dependencies = []string{dep} }).Dependency(dep)
	}
	fromAgent(t, deps...)
	var refused atomic.Int64
	lie := func(n int) {
		for range n {
			// Both forms: the liar's upstream in absolute form, and in
			// reverse form through Fusebox-Upstream.
			resp, _ := call(t, pc, http.MethodGet, liar.URL+"/", "", proxy.HeaderDependency, dep)
			if resp.StatusCode == 400 && resp.Header.Get(proxy.HeaderError) == "dependency-not-allowed" {
				refused.Add(1)
			}
			resp, _ = call(t, plain, http.MethodGet, "http://"+a0.ProxyAddr()+"/", "", proxy.HeaderUpstream, liar.URL, proxy.HeaderDependency, dep)
			if resp.StatusCode == 400 && resp.Header.Get(proxy.HeaderError) == "dependency-not-allowed" {
				refused.Add(1)
			}
		}
	}
	lie(25) // 50 successes would dilute 16 failures to a 24% failure rate
	for _, d := range deps {
		for range 8 { // 8 + 8 ≥ minimumRequests 10, from 2 nodes
			if err := d.Do(context.Background(), clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error {
				return errBoom
			}); !errors.Is(err, errBoom) && !errors.Is(err, clientlib.ErrOpen) {
				t.Fatalf("failure not returned: %v", err)
			}
		}
		lie(25)
	}
	if n := refused.Load(); n != 150 {
		t.Errorf("%d of 150 lies refused with dependency-not-allowed", n)
	}
	sstest.Eventually(t, 10*time.Second, "both agents open the breaker of "+dep, func() bool {
		for _, a := range w.agents {
			if s := a.Engine().Snapshot(dep); s == nil || s.State != sharedstate.Open {
				return false
			}
		}
		return true
	})
	if c := localCounts(a0, dep); c.Successes != 0 {
		t.Errorf("agent-0 counted %d successes of %s", c.Successes, dep)
	}
}

// 300 names of a caller's choosing: refused, none tracked, a call to a
// new upstream still served. 300 upstreams that answer nobody (names the
// rule admits: their own host:port) are tracked and decided on the agent
// that saw them, and none reaches the other agent; a dependency whose
// upstream answered does.
func TestProxyNamesReachTheFleetOnlyConfirmed(t *testing.T) {
	w := newWorldWith(t, 2, withStrictProxy)
	a0, a1 := w.agents[0], w.agents[1]
	pc := proxyClient(t, a0)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()

	for i := range 300 {
		resp, _ := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, fmt.Sprintf("junk-%03d", i))
		if resp.StatusCode != 400 || resp.Header.Get(proxy.HeaderError) != "dependency-not-allowed" {
			t.Fatalf("junk name %d: %d %q", i, resp.StatusCode, resp.Header.Get(proxy.HeaderError))
		}
	}
	for _, d := range a0.Engine().Dependencies() {
		if strings.HasPrefix(d, "junk-") {
			t.Fatalf("agent-0 tracks %s", d)
		}
	}

	// Upstreams where nothing listens: ports bound and let go.
	var dead []string
	for range 300 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, ln.Addr().String())
		ln.Close()
	}
	for _, addr := range dead {
		if resp, _ := call(t, pc, http.MethodGet, "http://"+addr+"/", "", proxy.HeaderTimeoutMs, "2000"); resp.StatusCode < 500 {
			t.Fatalf("%s: %d", addr, resp.StatusCode)
		}
	}
	if resp, body := call(t, pc, http.MethodGet, up.URL+"/", ""); resp.StatusCode != 200 {
		t.Fatalf("a new upstream after the junk: %d %q", resp.StatusCode, body)
	}
	live := strings.TrimPrefix(up.URL, "http://")
	sstest.Eventually(t, 10*time.Second, "agent-1 has agent-0's row of "+live, func() bool {
		for _, r := range a1.Engine().Rows(live) {
			if r.Node == a0.Name() && r.Successes > 0 {
				return true
			}
		}
		return false
	})
	tracked := 0
	for _, addr := range dead {
		if a0.Engine().Snapshot(addr) != nil {
			tracked++
		}
		if a1.Engine().Snapshot(addr) != nil {
			t.Errorf("agent-1 learned %s, which no traffic confirmed", addr)
		}
	}
	if tracked == 0 {
		t.Error("agent-0 tracks none of the dead upstreams: they are to be decided locally")
	}
	withheld := scrape(t, a0, "fusebox_agent_gossip_withheld_total")
	if !strings.Contains(withheld, `kind="row"`) || strings.Contains(withheld, `kind="row"} 0`) {
		t.Errorf("agent-0 withheld no row:\n%s", withheld)
	}
}

// scrape returns the lines of a's /metrics that start with name.
func scrape(t *testing.T, a *agent.Agent, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
