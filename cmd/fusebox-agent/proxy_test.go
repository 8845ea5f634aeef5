package main

// The egress proxy of the real fusebox-agent against hostile local
// callers and through restarts.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// memoryLimit is what the agent must stay under while attacked: half the
// 256 MiB the shipped systemd unit and Kubernetes manifests allow it.
const memoryLimit = 128 << 20

// Slow bodies cannot grow the agent nor lock callers out, from one
// address as from a script: (a) 1,000 connections each announce a 1 MiB
// PUT and send 99% of it; (b) 1,024 connections announce a body and send
// none. The address gets its 256 connections (--proxy-max-conns-per-client),
// the others are refused; bodies are buffered within the budget (16 MiB)
// and the rest streamed; the body timeout closes the stalled ones. A
// caller from another address is answered within a second throughout, and
// the agent's peak resident memory (VmHWM) stays under 128 MiB.
func TestProxyHoldsAgainstSlowBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent and pushes 256 MB through it")
	}
	bin := buildAgent(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	defer up.CloseClientConnections()
	const bodyTimeout = 30 * time.Second // the default
	p := startProxyAgent(t, "hostile", bin, nil, "--proxy-addr", "127.0.0.1:0")
	legit := proxiedClient(t, "127.0.0.2", p.proxy, 5*time.Second)
	answered := func(when string) {
		t.Helper()
		start := time.Now()
		resp, err := legit.Get(up.URL + "/legit")
		if err != nil {
			t.Fatalf("%s: the caller from 127.0.0.2: %v", when, err)
		}
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != 200 || took > time.Second {
			t.Errorf("%s: the caller from 127.0.0.2 got %d after %v; want 200 within a second", when, resp.StatusCode, took)
		}
		t.Logf("%s: a caller from 127.0.0.2 answered in %v", when, took.Round(time.Millisecond))
	}
	attack := func(n int, payload string) []net.Conn {
		t.Helper()
		conns := make([]net.Conn, n)
		data := []byte(payload)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
				c, err := d.Dial("tcp", p.proxy)
				if err != nil {
					failed.Add(1)
					return
				}
				conns[i] = c
				_ = c.SetWriteDeadline(time.Now().Add(60 * time.Second))
				_, _ = c.Write(data) // a refused connection fails: it was answered 503
			}()
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d connections could not be made", n)
		}
		t.Cleanup(func() {
			for _, c := range conns {
				c.Close()
			}
		})
		return conns
	}
	refused := func() float64 {
		return p.metric(t, `fusebox_agent_proxy_connections_refused_total{reason="max_conns_per_client"}`)
	}
	base := p.status(t, "VmRSS")
	answered("at rest")

	// (a) Nearly whole bodies.
	const size = 1 << 20
	head := fmt.Sprintf("PUT %s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", up.URL, strings.TrimPrefix(up.URL, "http://"), size)
	start := time.Now()
	conns := attack(1000, head+strings.Repeat("x", size*99/100))
	t.Logf("(a) 1,000 connections sent (or were refused) in %v; agent RSS %d MiB (at rest %d MiB)",
		time.Since(start).Round(time.Millisecond), p.status(t, "VmRSS")>>20, base>>20)
	// A connection is refused when the agent accepts it from the backlog,
	// which may come after the attacker's write returned.
	sstest.Eventually(t, 30*time.Second, "(a) the 744 connections past the address's 256 are refused", func() bool {
		return refused() >= 1000-256
	})
	if r := refused(); r != 1000-256 {
		t.Errorf("(a) %v connections refused, want the 744 past the address's 256", r)
	}
	answered("(a) nearly whole bodies held")
	if full := p.metric(t, "fusebox_agent_proxy_body_buffers_full_total"); full == 0 {
		t.Error("(a) no body found the budget spent: the attack did not reach it")
	}
	for _, c := range conns {
		c.Close()
	}
	sstest.Eventually(t, 30*time.Second, "(a) the agent let go of the connections", func() bool {
		return p.metric(t, "fusebox_agent_proxy_connections") <= 1
	})

	// (b) Announced bodies that never come.
	timeouts, before := p.metric(t, "fusebox_agent_proxy_body_timeouts_total"), refused()
	conns = attack(1024, head)
	sstest.Eventually(t, 30*time.Second, "(b) the agent holds the address's 256 connections", func() bool {
		return refused() >= before+1024-256
	})
	answered("(b) 1,024 bodies announced, none sent")
	sstest.Eventually(t, bodyTimeout+30*time.Second, "(b) the body timeout closes the 256 stalled connections", func() bool {
		return p.metric(t, "fusebox_agent_proxy_body_timeouts_total") >= timeouts+256
	})
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := bufio.NewReader(c).ReadString('\n')
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("(b) connection %d still open after the body timeout", i)
		} else if err == nil && !strings.Contains(b, "503") {
			t.Errorf("(b) connection %d answered %q", i, b)
		}
	}
	answered("(b) after the body timeout")
	peak := p.status(t, "VmHWM")
	t.Logf("agent peak RSS %d MiB (limit %d MiB)", peak>>20, memoryLimit>>20)
	if peak > memoryLimit {
		t.Errorf("the agent's peak RSS reached %d MiB, over %d MiB", peak>>20, memoryLimit>>20)
	}
}

// A restart refuses no caller. The listening socket is held outside the
// agents, as systemd's socket unit holds it, and handed to each: callers
// keep calling through three agents while (1) a successor starts beside
// the first, which then drains on SIGTERM (a hand-over), and (2) the
// second drains and exits before the third starts (systemd's restart:
// calls wait in the socket's backlog meanwhile). Every call is answered.
func TestProxyRestartFailsNoCall(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := ln.Addr().String()
	start := func(name string) *proxyAgent {
		return startProxyAgent(t, name, "", []*os.File{f}, "--proxy-addr", addr, "--shutdown-timeout", "5s")
	}
	first := start("first")

	client := proxiedClient(t, "127.0.0.1", addr, 30*time.Second)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				method, body := http.MethodGet, ""
				if i%2 == 1 {
					method, body = http.MethodPut, strings.Repeat("p", 4096)
				}
				req, _ := http.NewRequest(method, fmt.Sprintf("%s/%d/%d", up.URL, w, i), strings.NewReader(body))
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("%s: status %d %s", req.URL.Path, resp.StatusCode, resp.Header.Get("Fusebox-Error"))
					}
				}
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	stopTraffic := func() {
		stop()
		wg.Wait()
	}
	defer stopTraffic()
	more := func(what string) {
		t.Helper()
		n := calls.Load()
		sstest.Eventually(t, 30*time.Second, what, func() bool { return calls.Load() >= n+100 })
	}
	more("calls go through the first agent")

	// (1) A hand-over: the successor serves beside the first, which drains.
	second := start("second")
	first.terminate()
	if !first.stop() {
		t.Error("the first agent did not exit within 15 s of SIGTERM")
	}
	more("calls go through the second agent")

	// (2) systemd's restart: the second exits before the third starts.
	if !second.stop() {
		t.Error("the second agent did not exit within 15 s of SIGTERM")
	}
	gapStart := time.Now()
	third := start("third")
	t.Logf("no agent served for %v: the calls of that time waited in the socket's backlog", time.Since(gapStart).Round(time.Millisecond))
	more("calls go through the third agent")
	stopTraffic()
	third.stop()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed through the restarts; the first: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d calls through three agents, %d failed", calls.Load(), failed.Load())
}
