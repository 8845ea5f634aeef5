package agent

// The egress proxy of a real agent against inputs that once got past it:
// each test shows the attack held.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// rawProxyRequest writes raw to a's proxy and returns its answer, body
// read.
func rawProxyRequest(t *testing.T, a *Agent, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", a.ProxyAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A keyed POST whose Connection header names Idempotency-Key: the key is
// not hop-by-hop to the proxy. It reaches the upstream on every attempt,
// and the retry class is judged on what is sent, so no keyless POST is
// ever retried.
func TestProxyKeyNamedByConnectionReachesEveryAttempt(t *testing.T) {
	a, _ := startProxyAgent(t, withProxy)
	var mu sync.Mutex
	var keys []string
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(proxy.HeaderIdempotencyKey))
		n := len(keys)
		mu.Unlock()
		if n < 3 {
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(rw, "charged once")
	}))
	defer up.Close()
	host := strings.TrimPrefix(up.URL, "http://")
	resp, body := rawProxyRequest(t, a.Agent, "POST "+up.URL+"/charge HTTP/1.1\r\nHost: "+host+
		"\r\nIdempotency-Key: k2\r\nConnection: Idempotency-Key\r\nContent-Length: 2\r\n\r\n{}")
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 200 || body != "charged once" || resp.Header.Get(proxy.HeaderAttempts) != "3" {
		t.Errorf("%d %q after %s attempt(s), want 200 on the third", resp.StatusCode, body, resp.Header.Get(proxy.HeaderAttempts))
	}
	for i, k := range keys {
		if k != "k2" {
			t.Errorf("attempt %d reached the upstream with Idempotency-Key %q, want k2 (every attempt: %q)", i+1, k, keys)
		}
	}
}

// A failed answer whose body stalls: reading it for a retry is bounded by
// the attempt's timeout, so the caller gets its answer (the retry's) soon
// after, not when the upstream lets the body go.
func TestProxyStalledFailedBodyIsBounded(t *testing.T) {
	a, st := startProxyAgent(t, withProxy)
	const dep = "stalling-api"
	putPolicy(t, st, a, dep, `{"schema":1,"dependency":"stalling-api","retry":{"perAttemptTimeout":"300ms"}}`,
		func(p sharedstate.Policy) bool { return p.Retry.PerAttemptTimeout.Std() == 300*time.Millisecond })
	release := make(chan struct{})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			rw.Header().Set("Content-Length", "100000")
			rw.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(rw, "the first bytes of an answer that stalls")
			rw.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(rw, "the retry's answer")
	}))
	defer up.Close()
	defer close(release)
	pc := proxyClient(t, a.Agent)
	start := time.Now()
	resp, body := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, dep)
	if el := time.Since(start); resp.StatusCode != 200 || body != "the retry's answer" || el > 10*time.Second {
		t.Errorf("%d %q after %v: want the retry's 200, the stalled body bounded by the 300ms attempt timeout", resp.StatusCode, body, el)
	}
}

// A full table never refuses a request: past the cap the proxy forwards it
// untracked, says so in Fusebox-Untracked, and counts it.
func TestProxyFullTableForwardsUntracked(t *testing.T) {
	a, _ := startProxyAgent(t, func(c *Config) {
		withProxy(c)
		c.MaxDependencies = 2
	})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer up.Close()
	pc := proxyClient(t, a.Agent)
	for i, untracked := range []bool{false, false, true, true} {
		resp, _ := call(t, pc, http.MethodGet, up.URL+"/", "", proxy.HeaderDependency, fmt.Sprintf("dep-%d", i))
		if resp.StatusCode != 200 || (resp.Header.Get(proxy.HeaderUntracked) == "too-many-dependencies") != untracked {
			t.Errorf("dep-%d: %d, %s %q; want 200, untracked %v", i, resp.StatusCode, proxy.HeaderUntracked,
				resp.Header.Get(proxy.HeaderUntracked), untracked)
		}
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("the upstream got %d requests, want all 4", n)
	}
	metrics, text := call(t, &http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+a.HTTPAddr()+"/metrics", "")
	if metrics.StatusCode != 200 || !strings.Contains(text, "fusebox_agent_proxy_untracked_requests_total 2\n") {
		t.Errorf("/metrics does not count the 2 untracked requests:\n%s", grepLines(text, "fusebox_agent_proxy_untracked"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
