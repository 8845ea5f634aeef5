package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// testPolicy: 5 requests trip a breaker that then stays open for the
// test; retries wait at most 50 ms; the budget is generous unless a test
// lowers it.
func testPolicy() sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Breaker.MinimumRequests = 5
	p.Breaker.MinFailingNodes = 1
	p.Breaker.Confidence = 0
	p.Breaker.FastPath = false
	p.Breaker.OpenDuration = sharedstate.Duration(30 * time.Second)
	p.Breaker.MaxOpenDuration = sharedstate.Duration(time.Minute)
	p.Retry.PerAttemptTimeout = sharedstate.Duration(2 * time.Second)
	p.Retry.Backoff.Base = sharedstate.Duration(time.Millisecond)
	p.Retry.Backoff.Max = sharedstate.Duration(50 * time.Millisecond)
	p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 1, MinRetriesPerSecond: 1000}
	return p
}

// harness is a proxy on a real engine, and clients using it both ways.
type harness struct {
	t       *testing.T
	eng     *sharedstate.Engine
	p       *Proxy
	reg     *prometheus.Registry
	forward *http.Client // the proxy as HTTP_PROXY (absolute form)
	plain   *http.Client // no proxy (reverse form, direct calls)
	base    string       // http://proxy-addr
}

func newHarness(t *testing.T, policy func(*sharedstate.Policy), config func(*Config)) *harness {
	t.Helper()
	le, err := NewLocalEngine(sharedstate.EngineConfig{Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	eng := le.Engine
	pol := testPolicy()
	if policy != nil {
		policy(&pol)
	}
	if err := eng.SetDefaultPolicy(pol); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Engine = le
	cfg.Registerer = reg
	cfg.Random = func() uint64 { return 0 } // no backoff wait
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if config != nil {
		config(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve() }()
	h := &harness{t: t, eng: eng, p: p, reg: reg, base: "http://" + p.Addr()}
	pu, _ := url.Parse(h.base)
	ft := &http.Transport{Proxy: http.ProxyURL(pu)}
	pt := &http.Transport{}
	h.forward = &http.Client{Transport: ft, Timeout: 20 * time.Second}
	h.plain = &http.Client{Transport: pt, Timeout: 20 * time.Second}
	t.Cleanup(func() {
		ft.CloseIdleConnections()
		pt.CloseIdleConnections()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10s of Close")
		}
	})
	return h
}

// upstream starts an HTTP server for the test.
func upstream(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// get sends a GET in absolute form.
func (h *harness) get(url string, hdr ...string) *http.Response {
	h.t.Helper()
	return h.do(h.forward, http.MethodGet, url, "", hdr...)
}

// do sends a request and reads its body into resp.Body (closed).
func (h *harness) do(c *http.Client, method, url, body string, hdr ...string) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		h.t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// counter reads the proxy's metric name{labels...} (0 when absent).
func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// counts is dep's local window totals in the engine now.
func (h *harness) counts(dep string) sharedstate.Counts {
	h.eng.RowsToSend() // brings the rows LocalRows returns up to date
	for _, r := range h.eng.LocalRows() {
		if r.Dependency == dep {
			return r.Counts
		}
	}
	return sharedstate.Counts{}
}

// window waits until dep's local window in the engine satisfies ok (the
// proxy's client adds its counts every FlushInterval), and fails the test
// with what it is when it does not within 10 s; want says what ok wants.
func (h *harness) window(dep, want string, ok func(c sharedstate.Counts) bool) {
	h.t.Helper()
	sstest.EventuallyNoError(h.t, 10*time.Second, "the counts of "+dep, func() error {
		if c := h.counts(dep); !ok(c) {
			return fmt.Errorf("window %+v, want %s", c, want)
		}
		return nil
	})
}

// rawRequest writes raw to the proxy and returns the status line and the
// rest of the answer.
func (h *harness) rawRequest(raw string) (int, string) {
	h.t.Helper()
	c, err := net.DialTimeout("tcp", h.p.Addr(), 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		h.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		h.t.Fatalf("reading the answer to %q: %v", raw, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(HeaderError) + " " + string(b)
}
