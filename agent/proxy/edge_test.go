package proxy

// The proxy's edge against hostile or careless local callers: bodies grow
// with the bytes that arrive, within a budget; a stalled body is cut off;
// one client address cannot take every connection; only traffic that
// reached its upstream confirms a dependency; a drained proxy hands its
// callers to whoever shares its socket.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// dialFrom connects to addr from the loopback address src (the whole
// 127.0.0.0/8 is local).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientFrom is an HTTP client whose connections come from src.
func clientFrom(t *testing.T, src string, proxyAddr string) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{
		Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr}),
		DialContext: d.DialContext,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// A body's buffer grows with the bytes that arrived, whatever the request
// announced; the budget of all buffered bodies streams the next one to a
// single attempt instead of refusing it.
func TestBodyBufferGrowsWithTheBytesThatArrive(t *testing.T) {
	var calls, got atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		w.WriteHeader(http.StatusServiceUnavailable) // retried when the body was kept
	})
	h := newHarness(t, nil, func(c *Config) { c.BodyBufferBudget = 200 << 10 })

	// 10 KiB of a PUT that announces 1 MiB: the proxy holds one small buffer.
	c := dialFrom(t, "127.0.0.1", h.p.Addr())
	fmt.Fprintf(c, "PUT %s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", up.URL, hostOf(up), 1<<20, strings.Repeat("a", 10<<10))
	sstest.Eventually(t, 10*time.Second, "the proxy buffers what arrived", func() bool {
		return h.counter("fusebox_agent_proxy_body_buffer_bytes") > 0
	})
	if held := h.counter("fusebox_agent_proxy_body_buffer_bytes"); held > 32<<10 {
		t.Errorf("%v bytes held for 10 KiB received of 1 MiB announced", held)
	}

	// A 300 KiB body finds 200 KiB less what the first holds: streamed to
	// one attempt, whole, and said so.
	resp := h.do(h.forward, http.MethodPut, up.URL+"/", strings.Repeat("b", 300<<10))
	if calls.Load() != 1 || got.Load() != 300<<10 || resp.Header.Get(HeaderNotRetried) != "buffers-full" {
		t.Errorf("over the budget: %d attempts, upstream got %d bytes, %s %q; want 1 attempt of the whole body, buffers-full",
			calls.Load(), got.Load(), HeaderNotRetried, resp.Header.Get(HeaderNotRetried))
	}
	if n := h.counter("fusebox_agent_proxy_body_buffers_full_total"); n != 1 {
		t.Errorf("body_buffers_full_total = %v", n)
	}
	// The first one ends: its bytes go back to the budget.
	c.Close()
	sstest.Eventually(t, 10*time.Second, "the budget is given back", func() bool {
		return h.counter("fusebox_agent_proxy_body_buffer_bytes") == 0
	})
	calls.Store(0)
	resp = h.do(h.forward, http.MethodPut, up.URL+"/", strings.Repeat("c", 100<<10))
	if calls.Load() != 3 || resp.Header.Get(HeaderNotRetried) != "" {
		t.Errorf("within the budget: %d attempts, %s %q; want 3 (kept for retries)", calls.Load(), HeaderNotRetried, resp.Header.Get(HeaderNotRetried))
	}
}

// A client that does not send the body it announced is cut off after
// BodyTimeout, without an answer, counted; the upstream never sees a
// request it was to retry, and one it was streaming to ends.
func TestStalledBodyIsCutOff(t *testing.T) {
	var calls atomic.Int64
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
	})
	h := newHarness(t, nil, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	for i, method := range []string{http.MethodPut, http.MethodPost} { // buffered, streamed
		c := dialFrom(t, "127.0.0.1", h.p.Addr())
		fmt.Fprintf(c, "%s %s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nonly this", method, up.URL, hostOf(up))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil || len(b) != 0 {
			t.Errorf("%s: the stalled client got %q, %v; want the connection closed without an answer", method, b, err)
		}
		if n := h.counter("fusebox_agent_proxy_body_timeouts_total"); n != float64(i+1) {
			t.Errorf("%s: body_timeouts_total = %v", method, n)
		}
	}
	if n := calls.Load(); n > 1 {
		t.Errorf("the upstream saw %d requests; at most the streamed one", n)
	}
	// A call that ends well after them: once it is counted, so are they.
	if resp := h.get(up.URL + "/"); resp.StatusCode != 200 {
		t.Fatalf("a request after the stalled ones: %d", resp.StatusCode)
	}
	h.window(hostOf(up), "the last request's success", func(c sharedstate.Counts) bool { return c.Successes >= 1 })
	if c := h.counts(hostOf(up)); c.Failures != 0 {
		t.Errorf("a stalled client counted against its upstream: %+v", c)
	}
}

// One client address holds at most MaxConnsPerClient connections; callers
// from another address still get in.
func TestConnectionLimitPerClient(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := newHarness(t, nil, func(c *Config) { c.MaxConnsPerClient = 2 })
	for range 2 {
		dialFrom(t, "127.0.0.1", h.p.Addr())
	}
	sstest.Eventually(t, 10*time.Second, "both connections are counted", func() bool {
		return h.counter("fusebox_agent_proxy_connections") == 2
	})
	c := dialFrom(t, "127.0.0.1", h.p.Addr())
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\nHost: %s\r\n\r\n", up.URL, hostOf(up))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "too-many-client-connections" {
		t.Fatalf("a third connection from 127.0.0.1: %v %v", resp, err)
	}
	if n := h.counter("fusebox_agent_proxy_connections_refused_total", "reason", "max_conns_per_client"); n != 1 {
		t.Errorf("connections_refused_total{max_conns_per_client} = %v", n)
	}
	other := clientFrom(t, "127.0.0.2", h.p.Addr())
	r2, err := other.Get(up.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 {
		t.Errorf("a caller from 127.0.0.2: %d", r2.StatusCode)
	}
}

// Config.Confirm hears a dependency when the proxy reached its upstream
// (a dial, a kept-alive connection reused, a tunnel), never when it did
// not.
func TestConfirmOnlyWhatReachedItsUpstream(t *testing.T) {
	var mu sync.Mutex
	heard := map[string]int{}
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there
	h := newHarness(t, nil, func(c *Config) {
		c.Routes = []string{hostOf(up) + "=echo-api"}
		c.Confirm = func(dep string) {
			mu.Lock()
			heard[dep]++
			mu.Unlock()
		}
	})
	count := func(dep string) int {
		mu.Lock()
		defer mu.Unlock()
		return heard[dep]
	}
	for range 2 { // the second on the kept-alive connection
		if resp := h.get(up.URL + "/"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := count("echo-api"); n < 2 {
		t.Errorf("echo-api confirmed %d times for 2 requests that reached it", n)
	}
	if resp := h.get("http://" + deadAddr + "/"); resp.StatusCode != 502 {
		t.Errorf("to a closed port: %d", resp.StatusCode)
	}
	if n := count(deadAddr); n != 0 {
		t.Errorf("%s confirmed %d times, but nothing answers there", deadAddr, n)
	}
	c := dialFrom(t, "127.0.0.1", h.p.Addr())
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	before := count("echo-api")
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostOf(up), hostOf(up))
	if r, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err != nil || r.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", r, err)
	}
	if count("echo-api") != before+1 {
		t.Errorf("a tunnel to echo-api's upstream did not confirm it")
	}
}

// Two proxies share one listening socket, as an old agent and its
// successor do (a socket held by systemd, inherited): while callers keep
// calling, the first is closed; every call is answered.
func TestDrainHandsCallersToTheSharedSocket(t *testing.T) {
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the holder's copy (systemd's)
	copyOf := func() net.Listener {
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		l, err := net.FileListener(f)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old := newHarness(t, nil, func(c *Config) { c.Listener = copyOf(); c.ShutdownTimeout = 2 * time.Second })
	client := clientFrom(t, "127.0.0.1", ln.Addr().String())

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				method, body := http.MethodGet, ""
				if i%2 == 1 {
					method, body = http.MethodPut, strings.Repeat("p", 1000)
				}
				req, _ := http.NewRequest(method, fmt.Sprintf("%s/%d/%d", up.URL, w, i), strings.NewReader(body))
				resp, err := client.Do(req)
				calls.Add(1)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d %s", resp.StatusCode, resp.Header.Get(HeaderError))
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	sstest.Eventually(t, 10*time.Second, "calls go through the first proxy", func() bool { return calls.Load() > 50 })
	successor := newHarness(t, nil, func(c *Config) { c.Listener = copyOf() })
	if err := old.p.Close(); err != nil {
		t.Fatal(err)
	}
	served := successor.counter("fusebox_agent_proxy_requests_total", "form", "forward", "result", "upstream")
	sstest.Eventually(t, 10*time.Second, "calls go through the successor", func() bool {
		return successor.counter("fusebox_agent_proxy_requests_total", "form", "forward", "result", "upstream") > served+50
	})
	stop()
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed while the first proxy drained; the first: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d calls, none failed", calls.Load())
}
