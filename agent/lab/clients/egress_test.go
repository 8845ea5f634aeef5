package clients

// The egress proxy of real agents (embedded etcd, real gossip on
// loopback), with real upstreams: what a service in another language
// gets by setting HTTP_PROXY to its agent's proxy.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// withProxy turns the proxy on (loopback, port 0) and the other TCP
// listeners too, so that the tests can aim at them; the tests' upstreams
// listen on ports of the moment, so their dependencies are named by
// Fusebox-Dependency (--proxy-allow-any-dependency).
func withProxy(c *agent.Config) {
	c.Proxy.Addr = "127.0.0.1:0"
	c.Proxy.AllowAnyDependency = true
	c.GRPCAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
}

// proxyClient is an HTTP client that uses a's proxy as HTTP_PROXY.
func proxyClient(t *testing.T, a *agent.Agent) *http.Client {
	t.Helper()
	u, err := url.Parse("http://" + a.ProxyAddr())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// call makes one request and returns the answer with its body read.
func call(t *testing.T, c *http.Client, method, target, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err)
	}
	return resp, string(b)
}

// localCounts is a's own window of dep, as it gossips it.
func localCounts(a *agent.Agent, dep string) sharedstate.Counts {
	for _, r := range a.Engine().Rows(dep) {
		if r.Node == a.Name() {
			return r.Counts
		}
	}
	return sharedstate.Counts{}
}

func TestProxyThroughRealAgents(t *testing.T) {
	w := newWorldWith(t, 2, withProxy)
	a0, a1 := w.agents[0], w.agents[1]
	pc := proxyClient(t, a0)
	plain := &http.Client{Timeout: 20 * time.Second}

	t.Run("absolute and reverse form", func(t *testing.T) {
		var got atomic.Value
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Store(r.Header.Get(proxy.HeaderRetryOwner))
			fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
		}))
		defer up.Close()
		if resp, body := call(t, pc, http.MethodGet, up.URL+"/abs", ""); resp.StatusCode != 200 || body != "GET /abs" {
			t.Errorf("absolute form: %d %q", resp.StatusCode, body)
		}
		resp, body := call(t, plain, http.MethodGet, "http://"+a0.ProxyAddr()+"/rev", "",
			proxy.HeaderUpstream, up.URL, proxy.HeaderDependency, "echo-api", proxy.HeaderService, "billing")
		if resp.StatusCode != 200 || body != "GET /rev" || got.Load() != "billing" {
			t.Errorf("reverse form: %d %q, owner %v", resp.StatusCode, body, got.Load())
		}
		// Counted in the agent's own window, which it gossips.
		dep := strings.TrimPrefix(up.URL, "http://")
		sstest.Eventually(t, 10*time.Second, "the other agent sees agent-0's row of "+dep, func() bool {
			for _, r := range a1.Engine().Rows(dep) {
				if r.Node == a0.Name() && r.Successes == 1 {
					return true
				}
			}
			return false
		})
		sstest.Eventually(t, 10*time.Second, "agent-0's window of echo-api: 1 first attempt, a success", func() bool {
			c := localCounts(a0, "echo-api")
			return c.FirstAttempts == 1 && c.Successes == 1
		})
	})

	t.Run("proxy and clientlib callers on two agents share the fleet breaker", func(t *testing.T) {
		const dep = "inventory-api"
		var calls atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusInternalServerError) // dead: a failure, not retried
		}))
		defer up.Close()
		c1 := newClient(t, a1, "checkout", func(c *clientlib.Config) { c.Dependencies = []string{dep} })
		fromAgent(t, c1.Dependency(dep))
		hc := &http.Client{Transport: c1.RoundTripper(nil, clientlib.HTTPDependency(dep)), Timeout: 20 * time.Second}
		t.Cleanup(hc.CloseIdleConnections)
		// Up to 8 through the proxy on agent-0 and 8 through clientlib on
		// agent-1, alternating: neither alone reaches minimumRequests (10),
		// nor minFailingNodes (2). The breaker may open before the last.
		opened := false
		for i := 0; i < 8 && !opened; i++ {
			resp, _ := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, dep)
			switch {
			case resp.StatusCode == 503 && resp.Header.Get(proxy.HeaderRejected) == "open":
				opened = true
				continue
			case resp.StatusCode != 500:
				t.Fatalf("through the proxy: %d", resp.StatusCode)
			}
			req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
			r, err := hc.Do(req)
			switch {
			case errors.Is(err, clientlib.ErrOpen):
				opened = true
			case err != nil:
				t.Fatalf("through clientlib: %v", err)
			default:
				r.Body.Close()
				if r.StatusCode != 500 {
					t.Fatalf("through clientlib: %d", r.StatusCode)
				}
			}
		}
		sstest.Eventually(t, 10*time.Second, "both agents hold the open breaker of "+dep, func() bool {
			for _, a := range w.agents {
				if s := a.Engine().Snapshot(dep); s == nil || s.State != sharedstate.Open {
					return false
				}
			}
			return true
		})
		before := calls.Load()
		resp, _ := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, dep)
		if resp.StatusCode != 503 || resp.Header.Get(proxy.HeaderRejected) != "open" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("proxy after the trip: %d %s=%q Retry-After=%q", resp.StatusCode, proxy.HeaderRejected,
				resp.Header.Get(proxy.HeaderRejected), resp.Header.Get("Retry-After"))
		}
		sstest.Eventually(t, 10*time.Second, "clientlib on agent-1 decides from the open snapshot", func() bool {
			return c1.Dependency(dep).Status().State == sharedstate.Open
		})
		req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
		if _, err := hc.Do(req); !errors.Is(err, clientlib.ErrOpen) {
			t.Errorf("clientlib after the trip: %v, want ErrOpen", err)
		}
		if n := calls.Load(); n != before {
			t.Errorf("%d calls reached the dead dependency after its breaker opened", n-before)
		}
	})

	t.Run("retries: GET and keyed POST, never a plain POST", func(t *testing.T) {
		var calls atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1)%2 == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		defer up.Close()
		for _, tc := range []struct {
			method   string
			hdr      []string
			attempts int64
		}{
			{http.MethodGet, nil, 2},
			{http.MethodPost, nil, 1},
			{http.MethodPost, []string{proxy.HeaderIdempotencyKey, "charge-7"}, 2},
		} {
			calls.Store(0)
			resp, _ := call(t, pc, tc.method, up.URL+"/", "{}", append(tc.hdr, proxy.HeaderDependency, "flaky-api")...)
			if calls.Load() != tc.attempts || resp.Header.Get(proxy.HeaderAttempts) != strconv.FormatInt(tc.attempts, 10) {
				t.Errorf("%s %v: %d attempts (%s %q), want %d", tc.method, tc.hdr, calls.Load(), proxy.HeaderAttempts,
					resp.Header.Get(proxy.HeaderAttempts), tc.attempts)
			}
		}
		if c := localCounts(a0, "flaky-api"); c.Retries != 2 {
			t.Errorf("agent-0's window: %+v, want the 2 retries from the fleet budget", c)
		}
	})

	t.Run("the fleet retry budget limits retries", func(t *testing.T) {
		const dep = "budget-api"
		w.putPolicy(t, dep, `{"schema":1,"dependency":"budget-api","retry":{"budget":{"ratio":0,"minRetriesPerSecond":1}},"breaker":{"minimumRequests":1000}}`,
			func(p sharedstate.Policy) bool { return p.Retry.Budget.Ratio == 0 && p.Breaker.MinimumRequests == 1000 })
		var calls atomic.Int64
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer up.Close()
		const requests = 20
		refused := 0
		for range requests {
			resp, _ := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, dep)
			if resp.Header.Get(proxy.HeaderRejected) == "budget-exhausted" {
				refused++
			}
		}
		// 1 retry/s over the 2 s window: 2 retries in the fleet.
		if retries := calls.Load() - requests; retries < 1 || retries > 4 || refused < requests-4 {
			t.Errorf("%d retries for %d requests (%d refused by the budget): the budget allows about 2", retries, requests, refused)
		}
	})

	t.Run("Retry-After and deadlines", func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Time
		var timeouts []string
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			at = append(at, time.Now())
			timeouts = append(timeouts, r.Header.Get(proxy.HeaderTimeoutMs))
			n := len(at)
			mu.Unlock()
			if r.URL.Path == "/retry-after" && n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			if r.URL.Path == "/hang" {
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			}
		}))
		defer up.Close()
		if resp, _ := call(t, pc, http.MethodGet, up.URL+"/retry-after", "", proxy.HeaderDependency, "slow-api"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		mu.Lock()
		if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
			t.Errorf("%d attempts; the retry after a Retry-After: 1 came %v later", len(at), at[len(at)-1].Sub(at[0]))
		}
		at, timeouts = nil, nil
		mu.Unlock()
		start := time.Now()
		resp, _ := call(t, pc, http.MethodGet, up.URL+"/hang", "", proxy.HeaderDependency, "slow-api", proxy.HeaderTimeoutMs, "400")
		if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > 5*time.Second {
			t.Errorf("a 400 ms deadline: %d after %v", resp.StatusCode, time.Since(start))
		}
		mu.Lock()
		defer mu.Unlock()
		if ms, err := strconv.Atoi(timeouts[0]); err != nil || ms > 400 || ms < 1 {
			t.Errorf("upstream saw %s %q, want what remains of 400 ms", proxy.HeaderTimeoutMs, timeouts[0])
		}
	})

	t.Run("large bodies, streams, CONNECT, h2c", func(t *testing.T) {
		var posts atomic.Int64
		next := make(chan struct{})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/upload":
				posts.Add(1)
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusServiceUnavailable)
			case "/stream":
				io.WriteString(w, "first\n")
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-time.After(10 * time.Second):
				}
				io.WriteString(w, "second\n")
			}
		}))
		defer up.Close()
		resp, _ := call(t, pc, http.MethodPut, up.URL+"/upload", strings.Repeat("z", proxy.DefaultMaxBodyBuffer+1), proxy.HeaderDependency, "upload-api")
		if posts.Load() != 1 || resp.Header.Get(proxy.HeaderNotRetried) != "body-too-large" {
			t.Errorf("a body over the buffer: %d attempts, %s %q", posts.Load(), proxy.HeaderNotRetried, resp.Header.Get(proxy.HeaderNotRetried))
		}

		sresp, err := pc.Get(up.URL + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(sresp.Body)
		if line, err := br.ReadString('\n'); line != "first\n" {
			t.Errorf("first line %q, %v: the stream was held back", line, err)
		}
		close(next)
		rest, _ := io.ReadAll(br)
		sresp.Body.Close()
		if string(rest) != "second\n" {
			t.Errorf("rest of the stream %q", rest)
		}

		// CONNECT to the upstream, then HTTP through the tunnel.
		c, err := net.DialTimeout("tcp", a0.ProxyAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		host := strings.TrimPrefix(up.URL, "http://")
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET /upload HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host, host, host)
		cr := bufio.NewReader(c)
		if r, err := http.ReadResponse(cr, &http.Request{Method: http.MethodConnect}); err != nil || r.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", r, err)
		}
		if r, err := http.ReadResponse(cr, nil); err != nil || r.StatusCode != 503 {
			t.Errorf("through the tunnel: %v %v", r, err)
		}

		h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		h2.Config.Protocols = &p
		h2.Start()
		defer h2.Close()
		if resp, body := call(t, plain, http.MethodGet, "http://"+a0.ProxyAddr()+"/", "", proxy.HeaderUpstream, "h2c://"+strings.TrimPrefix(h2.URL, "http://")); resp.StatusCode != 200 || body != "HTTP/2.0" {
			t.Errorf("h2c upstream: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("no open relay: the agent's own listeners", func(t *testing.T) {
		for name, addr := range map[string]string{"grpc": a0.GRPCAddr(), "http": a0.HTTPAddr(), "gossip": a0.GossipAddr(), "proxy": a0.ProxyAddr()} {
			resp, body := call(t, pc, http.MethodGet, "http://"+addr+"/metrics", "")
			if resp.StatusCode != 403 || resp.Header.Get(proxy.HeaderError) != "own-listener" {
				t.Errorf("%s %s: %d %q", name, addr, resp.StatusCode, body)
			}
			_, port, _ := net.SplitHostPort(addr)
			if resp, _ := call(t, pc, http.MethodGet, "http://localhost:"+port+"/", ""); resp.StatusCode != 403 {
				t.Errorf("%s as localhost:%s: %d", name, port, resp.StatusCode)
			}
		}
		// Another agent's listeners are upstreams like any other.
		if resp, body := call(t, pc, http.MethodGet, "http://"+a1.HTTPAddr()+"/healthz", ""); resp.StatusCode != 200 {
			t.Errorf("agent-1's /healthz through agent-0's proxy: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("bad input is named", func(t *testing.T) {
		for _, tc := range []struct {
			hdr    []string
			reason string
		}{
			{nil, "missing-upstream"},
			{[]string{proxy.HeaderUpstream, "http://x/path"}, "bad-upstream"},
			{[]string{proxy.HeaderUpstream, "http://x", proxy.HeaderDependency, "no spaces"}, "invalid-dependency"},
		} {
			resp, body := call(t, plain, http.MethodGet, "http://"+a0.ProxyAddr()+"/", "", tc.hdr...)
			if resp.StatusCode != 400 || resp.Header.Get(proxy.HeaderError) != tc.reason || !strings.Contains(body, "fusebox proxy:") {
				t.Errorf("%v: %d %q %q, want 400 %s", tc.hdr, resp.StatusCode, resp.Header.Get(proxy.HeaderError), body, tc.reason)
			}
		}
	})
}
