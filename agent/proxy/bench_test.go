//go:build unix

package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// The proxy's cost on loopback, next to net/http/httputil.ReverseProxy
// forwarding the same requests and to the client calling the upstream
// directly, in one binary (agent/README.md, "Performance"). Every variant sends
// GET http://UPSTREAM/item?id=42 with a few headers, in absolute form to
// the proxies, and reads a 64-byte answer; client, proxy and upstream
// share the process, so cpu-ns/op is the CPU of all three per request and
// the proxy's own cost is a variant's figure minus direct's. The
// sub-benchmarks are named variant=NAME: benchstat -col /variant puts the
// three side by side.

// benchUpstream answers every request with 64 bytes.
func benchUpstream(b *testing.B) *httptest.Server {
	body := strings.Repeat("x", 64)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, body)
	}))
	b.Cleanup(s.Close)
	return s
}

// benchTransport is the client's (and ReverseProxy's) transport: keep-alive
// pools large enough for RunParallel.
func benchTransport(proxy *url.URL) *http.Transport {
	t := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	if proxy != nil {
		t.Proxy = http.ProxyURL(proxy)
	}
	return t
}

// benchVariants builds the three ways to reach the upstream: direct, via
// ReverseProxy, via the Fusebox proxy (a real engine, the default policy).
func benchVariants(b *testing.B, up *httptest.Server) map[string]*http.Client {
	b.Helper()
	target, _ := url.Parse(up.URL)
	rpTransport := benchTransport(nil)
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host },
		Transport: rpTransport,
		ErrorLog:  nil,
	}
	rpSrv := httptest.NewServer(rp)
	b.Cleanup(func() { rpSrv.Close(); rpTransport.CloseIdleConnections() })

	le, err := NewLocalEngine(sharedstate.EngineConfig{Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	eng := le.Engine
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Engine = le
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Confirm = func(string) {} // as in the agent, which hears every connection to an upstream
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve()
	b.Cleanup(func() { p.Close() })
	// The engine ticks as in the agent (Record attributes counts to the
	// last tick's time).
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctxtime.Every(ctx, 100*time.Millisecond, func() { eng.Tick() })
	}()
	b.Cleanup(func() { cancel(); wg.Wait() })

	rpURL, _ := url.Parse(rpSrv.URL)
	fbURL, _ := url.Parse("http://" + p.Addr())
	out := map[string]*http.Client{}
	for name, pu := range map[string]*url.URL{"direct": nil, "reverseproxy": rpURL, "fusebox": fbURL} {
		tr := benchTransport(pu)
		b.Cleanup(tr.CloseIdleConnections)
		out[name] = &http.Client{Transport: tr}
	}
	return out
}

func benchRequest(b *testing.B, c *http.Client, u string) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("User-Agent", "bench/1")
	req.Header.Set("X-Request-Id", "0123456789abcdef")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkProxy sends requests one after the other: ns/op is a request's
// latency (p50-ns and p99-ns its quantiles), cpu-ns/op the process's CPU
// per request.
func BenchmarkProxy(b *testing.B) {
	up := benchUpstream(b)
	clients := benchVariants(b, up)
	u := up.URL + "/item?id=42"
	for _, name := range []string{"direct", "reverseproxy", "fusebox"} {
		c := clients[name]
		b.Run("variant="+name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			cpu := benchStart(b, c, u)
			for range b.N {
				start := time.Now()
				benchRequest(b, c, u)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
		})
	}
}

// BenchmarkProxyParallel sends requests from GOMAXPROCS×4 goroutines:
// ns/op is the inverse of the throughput, cpu-ns/op the CPU per request.
func BenchmarkProxyParallel(b *testing.B) {
	up := benchUpstream(b)
	clients := benchVariants(b, up)
	u := up.URL + "/item?id=42"
	for _, name := range []string{"direct", "reverseproxy", "fusebox"} {
		c := clients[name]
		b.Run("variant="+name, func(b *testing.B) {
			b.SetParallelism(4)
			cpu := benchStart(b, c, u)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchRequest(b, c, u)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchStart warms the connection pools and starts measuring; it
// returns the process's CPU time at the start.
func benchStart(b *testing.B, c *http.Client, u string) time.Duration {
	for range 100 {
		benchRequest(b, c, u)
	}
	b.ReportAllocs()
	cpu := processCPU()
	b.ResetTimer()
	return cpu
}

// processCPU is the CPU time (user + system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
