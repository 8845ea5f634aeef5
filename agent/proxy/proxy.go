package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
)

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("proxy: closed")

// Proxy is the agent's HTTP egress proxy. Build it with New (which
// binds), run it with Serve, stop it with Close. It is an http.Handler.
type Proxy struct {
	cfg    Config
	client *clientlib.Client // decides, makes and counts every call, through cfg.Engine

	ln    *limitListener
	srv   *http.Server
	rt    *router
	allow []allowRule
	guard *guard
	m     *metrics

	transport *http.Transport // http and https upstreams
	h2c       *http.Transport // HTTP/2 without TLS
	dialer    *dialer

	deps      depTable
	inFlight  atomic.Int64
	bodyBytes atomic.Int64 // held by buffered request bodies (BodyBufferBudget)

	tunnelMu    sync.Mutex
	tunnels     map[net.Conn]struct{} // hijacked client connections of open tunnels
	tunnelCount atomic.Int64

	ctx       context.Context // canceled by Close: the flush loop ends
	cancel    context.CancelFunc
	wg        sync.WaitGroup // flush loop, tunnels
	served    atomic.Bool
	closing   atomic.Bool
	closeOnce sync.Once
}

// New validates cfg, reads CAFile, binds Addr (or takes cfg.Listener) and
// registers the metrics. Nothing is served until Serve. On error nothing
// stays bound (cfg.Listener is closed).
func New(cfg Config) (_ *Proxy, err error) {
	inner := cfg.Listener // or the one bound to Addr below
	defer func() {
		if err != nil && inner != nil {
			inner.Close()
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, tunnels: map[net.Conn]struct{}{}}
	lg := cmp.Or(cfg.Logger, slog.Default())
	p.rt, _ = newRouter(cfg.Routes) // validated
	for _, h := range cfg.AllowHosts {
		r, _ := ParseAllowHost(h)
		p.allow = append(p.allow, r)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS != nil {
		tlsCfg = cfg.TLS.Clone()
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("proxy: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("proxy: CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if inner == nil {
		if inner, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("proxy: listen: %w", err)
		}
	}
	p.m = newMetrics(p)
	p.ln = newLimitListener(inner, cfg.MaxConns, cfg.MaxConnsPerClient, func(reason int) { p.m.connsRef[reason].Inc() })
	p.guard = newGuard(append(append([]string(nil), cfg.Own...), inner.Addr().String()))

	p.dialer = &dialer{Dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.guard.control},
		confirm: cfg.Confirm}
	p.transport = &http.Transport{
		Proxy:                 nil, // never the environment's HTTP_PROXY: that may be this proxy
		DialContext:           p.dialer.DialContext,
		TLSClientConfig:       tlsCfg,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // Accept-Encoding and the body pass through as they are
	}
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	p.h2c = &http.Transport{
		Proxy: nil, DialContext: p.dialer.DialContext, Protocols: &h2,
		MaxIdleConns: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		// Twice the limit: the handler answers what lies between with a
		// named 431 and counts it; net/http cuts off what is far beyond.
		MaxHeaderBytes: 2 * cfg.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(lg.Handler(), slog.LevelDebug),
	}
	// The proxy's calls go through clientlib's attempt loop, deciding and
	// counting through the engine in process; its table is the client's
	// (same cap, forgotten together). A nil Random is clientlib's default.
	p.client, err = clientlib.NewInProcess(clientlib.Config{
		Service: cfg.Service, MaxDependencies: cfg.MaxDependencies, Random: cfg.Random, Logger: lg,
		FlushInterval: min(cfg.FlushInterval, clientlib.DefaultFlushInterval),
	}, cfg.Engine)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	defer func() {
		if err != nil {
			p.client.Close()
		}
	}()
	if cfg.Registerer != nil {
		if err := p.m.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Addr returns the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Serve serves until Close; it returns nil after Close and ErrClosed when
// called after it (or a second time).
func (p *Proxy) Serve() error {
	if p.closing.Load() || !p.served.CompareAndSwap(false, true) {
		return ErrClosed
	}
	p.wg.Go(p.flushLoop)
	if err := p.srv.Serve(p.ln); !errors.Is(err, http.ErrServerClosed) && !p.closing.Load() {
		return err
	}
	return nil
}

// Close stops the proxy, in this order: it stops accepting connections
// (its copy of the listening socket closes: a copy held elsewhere, by
// systemd or a successor, keeps listening, and the connections waiting in
// its backlog go to the next process that accepts); for half of
// ShutdownTimeout, or until the clients closed them, connections stay
// open for one more request each, answered with Connection: close, so
// that callers with kept-alive connections move on without an error; then
// it lets the requests in flight finish (until ShutdownTimeout, then
// cancels them), closes open CONNECT tunnels, stops the flush loop and
// closes its clientlib client, which reports its last counts and hands
// every dependency back to the engine (in-flight counts to 0, Release).
// It waits for every goroutine it started and is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		start := time.Now()
		p.closing.Store(true)
		p.ln.Close()
		p.awaitConns(start.Add(p.cfg.ShutdownTimeout / 2))
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(p.cfg.ShutdownTimeout))
		if err := p.srv.Shutdown(ctx); err != nil {
			p.srv.Close()
		}
		cancel()
		p.tunnelMu.Lock()
		for c := range p.tunnels {
			c.Close()
		}
		p.tunnelMu.Unlock()
		p.cancel()
		p.wg.Wait()
		p.transport.CloseIdleConnections()
		p.h2c.CloseIdleConnections()
		p.client.Close()
	})
	return nil
}

// awaitConns waits until no client connection is open, or until deadline.
func (p *Proxy) awaitConns(deadline time.Time) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.ln.open.Load() > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
}

// exchange is what the proxy keeps of one request while it serves it.
type exchange struct {
	p        *Proxy
	dep      string      // the dependency it counts under (Config.Confirm)
	reserved int64       // bytes its buffered body took from BodyBufferBudget (handler only)
	stalled  atomic.Bool // its body did not arrive within BodyTimeout
}

// ServeHTTP proxies one request. A request's body must arrive within
// BodyTimeout: a client that stalls is cut off, its connection closed
// without an answer, and counted.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	if p.closing.Load() { // draining: the caller's next request goes to the next process
		w.Header().Set("Connection", "close")
	}
	t, rerr := p.parseTarget(r)
	if rerr != nil {
		p.answerInvalid(w, t.form, rerr)
		return
	}
	x := &exchange{p: p, dep: t.dep}
	defer x.release()
	r = r.WithContext(p.withExchange(r.Context(), x))
	if t.form == formConnect {
		p.serveConnect(w, r, &t)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// Cleared by net/http once the body is read whole.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(p.cfg.BodyTimeout))
		r.Body = &bodyReader{ReadCloser: r.Body, x: x}
	}
	p.forward(w, r, &t)
	if x.stalled.Load() {
		p.m.stalled.Inc()
		panic(http.ErrAbortHandler) // no answer: the connection is closed
	}
}

// answerInvalid answers a request the proxy refuses for what it is.
func (p *Proxy) answerInvalid(w http.ResponseWriter, f form, e *requestError) {
	result := resultInvalid
	if e.status == http.StatusForbidden {
		result = resultForbidden
	}
	p.m.requests[f][result].Inc()
	p.m.invalid.WithLabelValues(label(e.reason)).Inc()
	h := w.Header()
	h.Set(HeaderError, e.reason)
	h.Set(HeaderAttempts, "0")
	if e.status == http.StatusRequestHeaderFieldsTooLarge {
		h.Set("Connection", "close")
	}
	http.Error(w, e.msg, e.status)
}
