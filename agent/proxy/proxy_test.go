package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// hostOf is the host:port of a test server's URL.
func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestForwardAndReverseForms(t *testing.T) {
	var seen sync.Map // path → the request the upstream got
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.Path, r.Clone(r.Context()))
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set(HeaderRejected, "open") // as another proxy's answer would say
		w.Header().Set(HeaderAttempts, "7")
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.RequestURI())
	})
	h := newHarness(t, nil, func(c *Config) { c.Routes = []string{hostOf(up) + "=shipping-api"} })

	t.Run("absolute form", func(t *testing.T) {
		resp := h.get(up.URL+"/a?x=1", "Connection", "X-Secret", "X-Secret", "hop")
		if resp.StatusCode != 200 || bodyOf(t, resp) != "hello GET /a?x=1" || resp.Header.Get("X-Upstream") != "yes" {
			t.Fatalf("status %d %v", resp.StatusCode, resp.Header)
		}
		if got := resp.Header.Get(HeaderAttempts); got != "1" || resp.Header.Get(HeaderRejected) != "" {
			t.Errorf("%s = %q, %s = %q: want this proxy's 1 and nothing", HeaderAttempts, got, HeaderRejected, resp.Header.Get(HeaderRejected))
		}
		v, _ := seen.Load("/a")
		r := v.(*http.Request)
		if r.Header.Get("X-Secret") != "" {
			t.Error("a header named by Connection was forwarded")
		}
		if r.Header.Get(HeaderRetryOwner) != "shipping-api" {
			t.Errorf("upstream saw %s %q, want the route's dependency, the owner of a request naming no service",
				HeaderRetryOwner, r.Header.Get(HeaderRetryOwner))
		}
		if r.Host != hostOf(up) {
			t.Errorf("upstream saw Host %q, want %q", r.Host, hostOf(up))
		}
	})
	t.Run("reverse form with Fusebox-Upstream", func(t *testing.T) {
		resp := h.do(h.plain, http.MethodGet, h.base+"/b", "", HeaderUpstream, up.URL, HeaderService, "checkout")
		if resp.StatusCode != 200 || bodyOf(t, resp) != "hello GET /b" {
			t.Fatalf("status %d", resp.StatusCode)
		}
		v, _ := seen.Load("/b")
		r := v.(*http.Request)
		if r.Header.Get(HeaderUpstream) != "" || r.Header.Get(HeaderService) != "" {
			t.Error("the proxy's own headers were forwarded")
		}
		if r.Header.Get(HeaderRetryOwner) != "checkout" {
			t.Errorf("retry owner %q, want the calling service", r.Header.Get(HeaderRetryOwner))
		}
	})
	t.Run("reverse form with the dependency's route", func(t *testing.T) {
		resp := h.do(h.plain, http.MethodGet, h.base+"/c", "", HeaderDependency, "shipping-api")
		if resp.StatusCode != 200 || bodyOf(t, resp) != "hello GET /c" {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	// Every request counted under the route's dependency.
	h.window("shipping-api", "3 first attempts and successes", func(c sharedstate.Counts) bool {
		return c.FirstAttempts == 3 && c.Successes == 3
	})
	if got := h.counter("fusebox_agent_proxy_requests_total", "form", "reverse", "result", "upstream"); got != 2 {
		t.Errorf("requests_total{reverse,upstream} = %v, want 2", got)
	}
}

func TestDependencyNames(t *testing.T) {
	var owner atomic.Value
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) { owner.Store(r.Header.Get(HeaderRetryOwner)) })
	h := newHarness(t, nil, func(c *Config) { c.Routes = []string{hostOf(up) + "=routed-api"} })
	h.get(up.URL+"/", HeaderDependency, hostOf(up)) // the upstream's own name
	if owner.Load() != DefaultService {
		t.Errorf("a request naming no service and no route: retry owner %q, want %q", owner.Load(), DefaultService)
	}
	h.get(up.URL + "/") // its route's
	if owner.Load() != "routed-api" {
		t.Errorf("a request naming no service, counted under its route: retry owner %q, want routed-api", owner.Load())
	}
	h.get(up.URL+"/", HeaderDependency, "routed-api")
	h.window(hostOf(up), "1 first attempt (clientlib's name for the host)",
		func(c sharedstate.Counts) bool { return c.FirstAttempts == 1 })
	h.window("routed-api", "2 first attempts", func(c sharedstate.Counts) bool { return c.FirstAttempts == 2 })
	// Any other name is refused by default, and counts nothing.
	resp := h.get(up.URL+"/", HeaderDependency, "payments")
	if resp.StatusCode != 400 || resp.Header.Get(HeaderError) != "dependency-not-allowed" ||
		!strings.Contains(bodyOf(t, resp), "--proxy-allow-any-dependency") {
		t.Errorf("a name of the caller's choosing: %d %s=%q", resp.StatusCode, HeaderError, resp.Header.Get(HeaderError))
	}
	if c := h.counts("payments"); c.Requests() != 0 {
		t.Errorf("the refused name was counted: %+v", c)
	}
	if got := h.counter("fusebox_agent_proxy_invalid_requests_total", "reason", "dependency_not_allowed"); got != 1 {
		t.Errorf("invalid_requests_total{dependency_not_allowed} = %v", got)
	}
	// A route's name belongs to its upstream only.
	other := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	if resp := h.get(other.URL+"/", HeaderDependency, "routed-api"); resp.StatusCode != 400 {
		t.Errorf("another upstream under routed-api's name: %d", resp.StatusCode)
	}
	// AllowAnyDependency lets the caller name it.
	lax := newHarness(t, nil, func(c *Config) { c.AllowAnyDependency = true })
	lax.get(up.URL+"/", HeaderDependency, "named-by-header")
	lax.window("named-by-header", "1 first attempt", func(c sharedstate.Counts) bool { return c.FirstAttempts == 1 })
}

func TestRetries(t *testing.T) {
	var calls atomic.Int64
	var mu sync.Mutex
	var keys []string
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get(HeaderIdempotencyKey)+"|"+string(b))
		mu.Unlock()
		if calls.Add(1)%3 != 0 { // two failures, then a success
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "busy")
			return
		}
		io.WriteString(w, "done")
	})
	h := newHarness(t, nil, nil)
	for _, tc := range []struct {
		name     string
		method   string
		hdr      []string
		attempts int
		status   int
	}{
		{"GET is retried", http.MethodGet, nil, 3, 200},
		{"PUT is retried", http.MethodPut, nil, 3, 200},
		{"POST without a key is not", http.MethodPost, nil, 1, 503},
		{"POST with Idempotency-Key is", http.MethodPost, []string{HeaderIdempotencyKey, "order-42"}, 3, 200},
		{"PATCH without a key is not", http.MethodPatch, nil, 1, 503},
		{"a request whose caller owns retries gets one attempt", http.MethodGet, []string{HeaderRetryOwner, "frontend"}, 1, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			mu.Lock()
			keys = nil
			mu.Unlock()
			resp := h.do(h.forward, tc.method, up.URL+"/x", "payload", tc.hdr...)
			if resp.StatusCode != tc.status || int(calls.Load()) != tc.attempts || resp.Header.Get(HeaderAttempts) != strconv.Itoa(tc.attempts) {
				t.Fatalf("status %d after %d upstream calls (%s %q), want %d after %d",
					resp.StatusCode, calls.Load(), HeaderAttempts, resp.Header.Get(HeaderAttempts), tc.status, tc.attempts)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if k != keys[0] || !strings.HasSuffix(k, "|payload") {
					t.Errorf("attempts sent %q: every attempt must carry the same key and the whole body", keys)
				}
			}
			if tc.status == 503 && bodyOf(t, resp) != "busy" {
				t.Error("the upstream's last answer was not handed on")
			}
		})
	}
	if got := h.counter("fusebox_agent_proxy_attempts_total", "kind", "retry"); got != 6 {
		t.Errorf("attempts_total{retry} = %v, want 6", got)
	}
}

func TestRetryBudgetLimitsRetries(t *testing.T) {
	var calls atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	// No ratio, a floor of 1 retry per second over a 10 s window: 10
	// retries in the window at most; far more requests fail. The breaker
	// must not get in the way.
	h := newHarness(t, func(p *sharedstate.Policy) {
		p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 0, MinRetriesPerSecond: 1}
		p.Breaker.MinimumRequests = 10000
	}, nil)
	const requests = 40
	refused := 0
	for range requests {
		resp := h.get(up.URL + "/")
		if resp.StatusCode != 503 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if resp.Header.Get(HeaderRejected) == "budget-exhausted" {
			refused++
		}
	}
	retries := int(calls.Load()) - requests
	if retries > 10 || retries < 1 {
		t.Errorf("%d retries for %d failing requests: the budget allows 10", retries, requests)
	}
	if refused == 0 {
		t.Error("no answer said budget-exhausted")
	}
	h.window(hostOf(up), fmt.Sprintf("%d first attempts and %d retries", requests, retries), func(c sharedstate.Counts) bool {
		return c.Retries == uint64(retries) && c.FirstAttempts == requests
	})
}

func TestRetryAfterIsHonoured(t *testing.T) {
	var mu sync.Mutex
	var times []time.Time
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		n := len(times)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	h := newHarness(t, func(p *sharedstate.Policy) { p.Retry.Backoff.Max = sharedstate.Duration(2 * time.Second) }, nil)
	resp := h.get(up.URL + "/")
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 200 || len(times) != 2 {
		t.Fatalf("status %d after %d attempts", resp.StatusCode, len(times))
	}
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Errorf("the retry came %v after a Retry-After: 1", gap)
	}

	// A Retry-After that does not fit the caller's deadline: no retry, the
	// answer (with its Retry-After) goes to the caller.
	times = nil
	mu.Unlock()
	resp = h.get(up.URL+"/", HeaderTimeoutMs, "500")
	mu.Lock()
	if resp.StatusCode != http.StatusTooManyRequests || len(times) != 1 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("status %d after %d attempts, Retry-After %q: want the 429 at once",
			resp.StatusCode, len(times), resp.Header.Get("Retry-After"))
	}
}

func TestDeadlinePropagation(t *testing.T) {
	release := make(chan struct{})
	var seen atomic.Value
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get(HeaderTimeoutMs))
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
	})
	defer close(release)
	h := newHarness(t, func(p *sharedstate.Policy) { p.Retry.PerAttemptTimeout = sharedstate.Duration(5 * time.Second) }, nil)

	h.get(up.URL+"/", HeaderTimeoutMs, "800")
	ms, err := strconv.Atoi(seen.Load().(string))
	if err != nil || ms <= 0 || ms > 800 {
		t.Errorf("upstream saw %s %q, want the caller's remaining time (≤ 800)", HeaderTimeoutMs, seen.Load())
	}
	h.get(up.URL + "/")
	if ms, _ := strconv.Atoi(seen.Load().(string)); ms <= 0 || ms > 5000 {
		t.Errorf("without a caller deadline the upstream saw %s %q, want the attempt's (≤ 5000)", HeaderTimeoutMs, seen.Load())
	}

	start := time.Now()
	resp := h.get(up.URL+"/hang", HeaderTimeoutMs, "300")
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(HeaderError) != "timeout" {
		t.Fatalf("status %d %s %q, want 504 timeout", resp.StatusCode, HeaderError, resp.Header.Get(HeaderError))
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("a 300 ms deadline answered after %v", el)
	}
	h.window(hostOf(up), "1 failure: the missed deadline is the upstream's", func(c sharedstate.Counts) bool { return c.Failures == 1 })
	resp = h.get(up.URL+"/", HeaderTimeoutMs, "soon")
	if resp.StatusCode != 400 || resp.Header.Get(HeaderError) != "bad-timeout" {
		t.Errorf("%s: soon: status %d %q", HeaderTimeoutMs, resp.StatusCode, resp.Header.Get(HeaderError))
	}
}

func TestPerAttemptTimeoutRetries(t *testing.T) {
	var calls atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		io.WriteString(w, "second")
	})
	h := newHarness(t, func(p *sharedstate.Policy) { p.Retry.PerAttemptTimeout = sharedstate.Duration(200 * time.Millisecond) }, nil)
	resp := h.get(up.URL + "/")
	if resp.StatusCode != 200 || bodyOf(t, resp) != "second" || resp.Header.Get(HeaderAttempts) != "2" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get(HeaderAttempts))
	}
	h.window(hostOf(up), "the timed-out attempt a slow failure, then a success", func(c sharedstate.Counts) bool {
		return c.Failures == 1 && c.SlowCalls >= 1 && c.Successes == 1
	})
}

func TestBodyOverTheBufferIsOneAttempt(t *testing.T) {
	var calls atomic.Int64
	var got atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h := newHarness(t, nil, func(c *Config) { c.MaxBodyBuffer = 1024 })
	for _, size := range []int{1024, 1025} {
		calls.Store(0)
		body := strings.Repeat("x", size)
		resp := h.do(h.forward, http.MethodPut, up.URL+"/", body)
		over := size > 1024
		wantCalls := 3
		if over {
			wantCalls = 1
		}
		if int(calls.Load()) != wantCalls || got.Load() != int64(size) {
			t.Errorf("%d bytes: %d attempts, upstream got %d bytes; want %d attempts", size, calls.Load(), got.Load(), wantCalls)
		}
		if hv := resp.Header.Get(HeaderNotRetried); (hv == "body-too-large") != over {
			t.Errorf("%d bytes: %s = %q", size, HeaderNotRetried, hv)
		}
	}
	// Chunked (no Content-Length) over the bound: streamed whole to one attempt.
	calls.Store(0)
	req, _ := http.NewRequest(http.MethodPut, up.URL+"/", io.MultiReader(strings.NewReader(strings.Repeat("y", 3000))))
	req.ContentLength = -1
	resp, err := h.forward.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls.Load() != 1 || got.Load() != 3000 || resp.Header.Get(HeaderNotRetried) != "body-too-large" {
		t.Errorf("chunked 3000 bytes: %d attempts, %d bytes upstream, %q", calls.Load(), got.Load(), resp.Header.Get(HeaderNotRetried))
	}
	if got := h.counter("fusebox_agent_proxy_unbuffered_bodies_total"); got != 2 {
		t.Errorf("unbuffered_bodies_total = %v, want 2", got)
	}
}

func TestStreamingPassesThrough(t *testing.T) {
	next := make(chan struct{})
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select { // the second event only once the client saw the first
		case <-next:
		case <-time.After(10 * time.Second):
			return
		}
		io.WriteString(w, "data: two\n\n")
	})
	h := newHarness(t, nil, nil)
	resp, err := h.forward.Get(up.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v: not passed through before the stream ended", line, err)
	}
	close(next)
	rest, _ := io.ReadAll(rd)
	if string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest %q", rest)
	}
}

func TestBreakerOpensAndRefuses(t *testing.T) {
	var calls atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError) // a failure, not retried
	})
	h := newHarness(t, nil, nil)
	for range 5 {
		if resp := h.get(up.URL + "/"); resp.StatusCode != 500 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	h.window(hostOf(up), "5 failures", func(c sharedstate.Counts) bool { return c.Failures == 5 })
	h.eng.Tick() // the trip rule: 5 of 5 failed
	before := calls.Load()
	resp := h.get(up.URL + "/")
	if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "open" || resp.Header.Get(HeaderAttempts) != "0" {
		t.Fatalf("status %d %s=%q: want 503 open", resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 30 {
		t.Errorf("Retry-After %q: want the breaker's remaining open time, 1-30 s", resp.Header.Get("Retry-After"))
	}
	if calls.Load() != before {
		t.Error("a request reached the upstream while the breaker was open")
	}
	if got := h.counter("fusebox_agent_proxy_rejected_total", "reason", "open"); got != 1 {
		t.Errorf("rejected_total{open} = %v", got)
	}
	h.window(hostOf(up), "the refusal counted", func(c sharedstate.Counts) bool { return c.Rejected == 1 })
}

func TestForcedOpenAndConcurrencyLimit(t *testing.T) {
	release := make(chan struct{})
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
	})
	h := newHarness(t, func(p *sharedstate.Policy) { p.Concurrency.MaxInFlight = 1 }, nil)
	dep := hostOf(up)
	h.get(up.URL + "/ok")
	h.eng.Tick() // the concurrency share
	if s := h.eng.Snapshot(dep); s == nil || s.ConcurrencyLimit != 1 {
		t.Fatalf("snapshot %+v: want a concurrency limit of 1", s)
	}
	// One request holds the only slot; the next is refused at once.
	done := make(chan *http.Response, 1)
	go func() { done <- h.get(up.URL + "/slow") }()
	sstest.Eventually(t, 10*time.Second, "the first request is in flight", func() bool {
		return h.counter("fusebox_agent_proxy_in_flight") == 1
	})
	resp := h.get(up.URL + "/ok")
	if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "concurrency-limit" {
		t.Errorf("second request: %d %q, want 503 concurrency-limit", resp.StatusCode, resp.Header.Get(HeaderRejected))
	}
	close(release)
	select {
	case r := <-done:
		if r.StatusCode != 200 {
			t.Errorf("first request: %d", r.StatusCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end")
	}
	if resp := h.get(up.URL + "/ok"); resp.StatusCode != 200 {
		t.Errorf("after the slot came back: %d", resp.StatusCode)
	}

	if err := h.eng.SetOverride(dep, &sharedstate.Override{State: sharedstate.ForcedOpen, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	resp = h.get(up.URL + "/ok")
	if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "forced-open" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("forced open: %d %q", resp.StatusCode, resp.Header.Get(HeaderRejected))
	}
}

func TestHalfOpenProbe(t *testing.T) {
	clock := sharedstate.NewManualClock(time.Now())
	var fail, sawProbe atomic.Bool
	fail.Store(true)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderProbe) == "1" {
			sawProbe.Store(true)
		}
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	le, err := NewLocalEngine(sharedstate.EngineConfig{Node: "node-1", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	eng := le.Engine
	pol := testPolicy()
	pol.Breaker.ProbeSuccessThreshold = 1
	pol.Breaker.HalfOpenProbes = 1
	pol.Breaker.Scope = sharedstate.ScopeNode // the node is its own prober
	if err := eng.SetDefaultPolicy(pol); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, func(c *Config) { c.Engine = le })
	h.eng = eng
	for range 5 {
		h.get(up.URL + "/")
	}
	h.window(hostOf(up), "5 failures", func(c sharedstate.Counts) bool { return c.Failures == 5 })
	eng.Tick()
	if s := eng.Snapshot(hostOf(up)); s.State != sharedstate.Open {
		t.Fatalf("state %v", s.State)
	}
	clock.Advance(31 * time.Second)
	eng.Tick()
	fail.Store(false)
	resp := h.get(up.URL + "/")
	if resp.StatusCode != 200 || resp.Header.Get(HeaderProbe) != "1" || !sawProbe.Load() {
		t.Fatalf("the probe: %d %q, %s %q (upstream saw it: %v)", resp.StatusCode, resp.Header.Get(HeaderRejected),
			HeaderProbe, resp.Header.Get(HeaderProbe), sawProbe.Load())
	}
	eng.Tick()
	if s := eng.Snapshot(hostOf(up)); s.State != sharedstate.Closed {
		t.Errorf("after a successful probe the breaker is %v, want closed", s.State)
	}
}

func TestBadInputIsNamed(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, nil, func(c *Config) { c.MaxHeaderBytes = 4096 })
	for _, tc := range []struct {
		name, raw string
		status    int
		reason    string
	}{
		{"no upstream", "GET /x HTTP/1.1\r\nHost: proxy\r\n\r\n", 400, "missing-upstream"},
		{"unknown dependency route", "GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Dependency: nowhere\r\n\r\n", 400, "missing-upstream"},
		{"bad scheme", "GET ftp://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "malformed-uri"},
		{"user info", "GET http://u:p@" + hostOf(up) + "/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed-uri"},
		{"bad port", "GET http://example.com:99999/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed-uri"},
		{"bad upstream header", "GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Upstream: http://h/path\r\n\r\n", 400, "bad-upstream"},
		{"bad upstream scheme", "GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Upstream: gopher://h\r\n\r\n", 400, "bad-upstream"},
		{"bad dependency", "GET " + up.URL + "/ HTTP/1.1\r\nHost: x\r\nFusebox-Dependency: a b\r\n\r\n", 400, "invalid-dependency"},
		{"reserved dependency", "GET " + up.URL + "/ HTTP/1.1\r\nHost: x\r\nFusebox-Dependency: _default\r\n\r\n", 400, "invalid-dependency"},
		{"headers too large", "GET " + up.URL + "/ HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n", 431, "headers-too-large"},
		{"upgrade", "GET " + up.URL + "/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 501, "upgrade-unsupported"},
		{"CONNECT without port", "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "malformed-uri"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, rest := h.rawRequest(tc.raw)
			if status != tc.status || !strings.HasPrefix(rest, tc.reason+" fusebox proxy: ") {
				t.Errorf("%d %q, want %d naming %s", status, rest, tc.status, tc.reason)
			}
		})
	}
	if got := h.counter("fusebox_agent_proxy_invalid_requests_total", "reason", "headers_too_large"); got != 1 {
		t.Errorf("invalid_requests_total{headers_too_large} = %v", got)
	}
}

func TestNoOpenRelay(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") })
	own := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the agent itself") })
	_, ownPort, _ := net.SplitHostPort(hostOf(own))
	h := newHarness(t, nil, func(c *Config) {
		c.Own = []string{hostOf(own), "0.0.0.0:" + ownPort}
	})
	for _, target := range []string{own.URL, "http://localhost:" + ownPort, "http://[::1]:" + ownPort, "http://0.0.0.0:" + ownPort, h.base} {
		resp := h.get(target + "/")
		if resp.StatusCode != 403 || resp.Header.Get(HeaderError) != "own-listener" {
			t.Errorf("%s: %d %q, want 403 own-listener", target, resp.StatusCode, resp.Header.Get(HeaderError))
		}
	}
	resp := h.get("http://localhost.:" + ownPort + "/")
	if resp.StatusCode != 403 {
		t.Errorf("localhost.: %d %q", resp.StatusCode, bodyOf(t, resp))
	}
	// A name that resolves to the agent is refused when it is dialed (the
	// dialer's check, after resolution): this host's name, where it
	// resolves to loopback (/etc/hosts).
	if name, ok := loopbackHostName(); ok {
		resp := h.get("http://" + name + ":" + ownPort + "/")
		if resp.StatusCode != 403 || resp.Header.Get(HeaderError) != "own-listener" {
			t.Errorf("%s (resolves to loopback): %d %q", name, resp.StatusCode, bodyOf(t, resp))
		}
	} else {
		t.Log("this host's name does not resolve to loopback: the dial-time check of names is not exercised here")
	}
	// The proxy itself, through CONNECT.
	if status, _ := h.rawRequest("CONNECT " + h.p.Addr() + " HTTP/1.1\r\nHost: x\r\n\r\n"); status != 403 {
		t.Errorf("CONNECT to the proxy itself: %d", status)
	}
	if resp := h.get(up.URL + "/"); resp.StatusCode != 200 {
		t.Errorf("another upstream: %d", resp.StatusCode)
	}

	// The allow-list.
	h2 := newHarness(t, nil, func(c *Config) { c.AllowHosts = []string{"*.example.com", "10.0.0.0/8"} })
	resp = h2.get(up.URL + "/")
	if resp.StatusCode != 403 || resp.Header.Get(HeaderError) != "not-allowed" {
		t.Errorf("not allow-listed: %d %q", resp.StatusCode, resp.Header.Get(HeaderError))
	}
	h3 := newHarness(t, nil, func(c *Config) { c.AllowHosts = []string{"127.0.0.1"} })
	if resp := h3.get(up.URL + "/"); resp.StatusCode != 200 {
		t.Errorf("allow-listed: %d", resp.StatusCode)
	}

	// Non-loopback listening needs the explicit permission.
	cfg := DefaultConfig()
	cfg.Addr, cfg.Engine = "0.0.0.0:0", &LocalEngine{}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("Validate(0.0.0.0) = %v", err)
	}
	cfg.AllowNonLoopback = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate(0.0.0.0, allowed) = %v", err)
	}
}

// loopbackHostName returns this host's name when it resolves to loopback
// addresses only (and is no IP or "localhost", which the proxy checks
// before dialing).
func loopbackHostName() (string, bool) {
	name, err := os.Hostname()
	if err != nil || name == "" || strings.HasPrefix(name, "localhost") {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil || len(ips) == 0 {
		return "", false
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return "", false
		}
	}
	return name, true
}

func TestConnectTunnel(t *testing.T) {
	// An echo server stands for anything spoken through a tunnel.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		io.Copy(c, c)
	}()
	h := newHarness(t, nil, nil)
	c, err := net.DialTimeout("tcp", h.p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The first bytes of the tunnel travel with the CONNECT, as TLS
	// clients send them.
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly", ln.Addr(), ln.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(c, " late")
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "early late" {
		t.Errorf("through the tunnel: %q", got)
	}
	dep := ln.Addr().String()
	h.window(dep, "the dial one successful attempt", func(c sharedstate.Counts) bool {
		return c.FirstAttempts == 1 && c.Successes == 1
	})
	// A dial that fails is a failure, answered 502.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	if status, _ := h.rawRequest("CONNECT " + addr + " HTTP/1.1\r\nHost: x\r\n\r\n"); status != 502 {
		t.Errorf("CONNECT to a closed port: %d", status)
	}
	h.window(addr, "the refused dial a failure", func(c sharedstate.Counts) bool { return c.Failures == 1 })
}

func TestH2CUpstream(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s", r.Proto)
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	up.Config.Protocols = &p
	up.Start()
	defer up.Close()
	h := newHarness(t, nil, func(c *Config) { c.Routes = []string{"h2c://" + hostOf(up) + "=grpc-ish"} })
	resp := h.get(up.URL + "/")
	if resp.StatusCode != 200 || bodyOf(t, resp) != "HTTP/2.0" {
		t.Fatalf("through the h2c route: %d", resp.StatusCode)
	}
	resp = h.do(h.plain, http.MethodGet, h.base+"/", "", HeaderUpstream, "h2c://"+hostOf(up))
	if resp.StatusCode != 200 || bodyOf(t, resp) != "HTTP/2.0" {
		t.Fatalf("with Fusebox-Upstream h2c://: %d", resp.StatusCode)
	}
}

func TestTLSOrigination(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %v", r.TLS != nil)
	}))
	defer up.Close()
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "https://"))
	h := newHarness(t, nil, func(c *Config) {
		c.TLS = &tls.Config{RootCAs: pool}
		c.Routes = []string{"https://127.0.0.1:" + port + "=secure"}
	})
	// The app speaks plain HTTP; the route makes the proxy speak TLS.
	resp := h.get("http://127.0.0.1:" + port + "/")
	if resp.StatusCode != 200 || bodyOf(t, resp) != "tls true" {
		t.Fatalf("route: %d", resp.StatusCode)
	}
	h.window("secure", "1 success", func(c sharedstate.Counts) bool { return c.Successes == 1 })
	resp = h.do(h.plain, http.MethodGet, h.base+"/", "", HeaderUpstream, up.URL)
	if resp.StatusCode != 200 || bodyOf(t, resp) != "tls true" {
		t.Fatalf("Fusebox-Upstream https://: %d", resp.StatusCode)
	}
	// An untrusted certificate is a failure the proxy names.
	h2 := newHarness(t, nil, nil)
	resp = h2.do(h2.plain, http.MethodGet, h2.base+"/", "", HeaderUpstream, up.URL)
	if resp.StatusCode != 502 || !strings.Contains(bodyOf(t, resp), "certificate") {
		t.Errorf("untrusted certificate: %d", resp.StatusCode)
	}
}

func TestConnectionLimit(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) { c.MaxConns = 1 })
	c, err := net.DialTimeout("tcp", h.p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sstest.Eventually(t, 10*time.Second, "the first connection is counted", func() bool {
		return h.counter("fusebox_agent_proxy_connections") == 1
	})
	status, rest := h.rawRequest("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
	if status != 503 || !strings.Contains(rest, "too many connections") {
		t.Errorf("second connection: %d %q", status, rest)
	}
	if got := h.counter("fusebox_agent_proxy_connections_refused_total"); got != 1 {
		t.Errorf("connections_refused_total = %v", got)
	}
}

// A full table never refuses a request: past the cap, the request is
// forwarded untracked, and says so.
func TestTooManyDependencies(t *testing.T) {
	var calls atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	h := newHarness(t, nil, func(c *Config) { c.MaxDependencies = 2; c.AllowAnyDependency = true })
	for i, untracked := range []bool{false, false, true} {
		resp := h.get(up.URL+"/", HeaderDependency, "dep-"+strconv.Itoa(i))
		if resp.StatusCode != 200 || (resp.Header.Get(HeaderUntracked) == "too-many-dependencies") != untracked ||
			resp.Header.Get(HeaderAttempts) != "1" {
			t.Errorf("dependency %d: %d, %s %q, %s %q; want 200, untracked %v", i, resp.StatusCode, HeaderUntracked,
				resp.Header.Get(HeaderUntracked), HeaderAttempts, resp.Header.Get(HeaderAttempts), untracked)
		}
	}
	if calls.Load() != 3 {
		t.Errorf("the upstream got %d requests, want all 3", calls.Load())
	}
	if got := h.counter("fusebox_agent_proxy_untracked_requests_total"); got != 1 {
		t.Errorf("untracked_requests_total = %v, want 1", got)
	}
	if got := h.counter("fusebox_agent_proxy_dependencies"); got != 2 {
		t.Errorf("dependencies = %v, want the cap, 2", got)
	}
}

func TestIdleDependenciesAreForgotten(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, nil, func(c *Config) { c.IdleDependencyTTL = 50 * time.Millisecond; c.FlushInterval = 10 * time.Millisecond })
	h.get(up.URL + "/")
	sstest.Eventually(t, 10*time.Second, "the idle dependency is forgotten", func() bool {
		return h.counter("fusebox_agent_proxy_dependencies") == 0
	})
	if resp := h.get(up.URL + "/"); resp.StatusCode != 200 {
		t.Errorf("after forgetting: %d", resp.StatusCode)
	}
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	c := Config{Addr: "nope", Routes: []string{"x", "ftp://a=b", "h:0=d"}, AllowHosts: []string{"a b", "300.0.0.0/8"},
		Own: []string{"x"}, MaxBodyBuffer: -1}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a zero config")
	}
	for _, want := range []string{"Addr", "Engine", "Own", `route "x"`, `scheme "ftp"`, `port "0"`, `allowed host "a b"`,
		`allowed host "300.0.0.0/8"`, "Service", "MaxConns", "MaxHeaderBytes", "MaxBodyBuffer", "MaxDependencies",
		"ReadHeaderTimeout", "FlushInterval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not name %s:\n%v", want, err)
		}
	}
	good := DefaultConfig()
	good.Addr, good.Engine = "127.0.0.1:0", &LocalEngine{}
	good.Routes = []string{"shipping.internal=shipping-api", "https://payments.example.com:8443=payments", "h2c://[::1]:50051=grpc"}
	good.AllowHosts = []string{"*.internal", "10.0.0.0/8", "::1", "payments.example.com"}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
}

func TestServeAfterClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	le, _ := NewLocalEngine(sharedstate.EngineConfig{Node: "n"})
	cfg.Engine = le
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(); err != ErrClosed {
		t.Errorf("Serve after Close = %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the listener is still open after Close")
	}
}

func TestKeepAlive(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	h := newHarness(t, nil, nil)
	for range 20 {
		if resp := h.get(up.URL + "/"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 requests one after the other took %d upstream connections, want 1 kept alive", n)
	}
	if n := h.counter("fusebox_agent_proxy_connections"); n != 1 {
		t.Errorf("the client holds %v connections to the proxy, want 1 kept alive", n)
	}
}
