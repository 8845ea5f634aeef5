package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// depEntry is a dependency in the proxy's table: its clientlib handle (and
// its RoundTrippers to either transport) and its requests in flight (an
// entry with requests in flight is never forgotten).
type depEntry struct {
	name      string
	dep       *clientlib.Dependency // classifying with classify
	rt, h2c   http.RoundTripper
	untracked bool // past the table's cap: one request's, never in the table
	inFlight  atomic.Int64
	used      atomic.Bool // a request came since the last flush
	evicted   atomic.Bool

	idleFrom time.Time // owned by the flusher
}

// enter counts a request in flight; it fails when the entry is being
// evicted (look it up again).
func (e *depEntry) enter() bool {
	e.inFlight.Add(1)
	if e.evicted.Load() {
		e.inFlight.Add(-1)
		return false
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return true
}

func (e *depEntry) leave() { e.inFlight.Add(-1) }

// roundTripper sends e's requests on the proxy's transport for scheme
// (h2c: HTTP/2 without TLS).
func (e *depEntry) roundTripper(scheme string) http.RoundTripper {
	if scheme == schemeH2C {
		return e.h2c
	}
	return e.rt
}

// depTable holds the dependencies the proxy's requests named. It holds the
// names its clientlib client tracks, no more: at most
// Config.MaxDependencies (the client's cap), idle ones forgotten after
// Config.IdleDependencyTTL by both. Lookups take no lock.
type depTable struct {
	m  sync.Map // name → *depEntry
	n  atomic.Int64
	mu sync.Mutex // creation and eviction
}

// dependency returns the entry of t's dependency in the table, counting
// the request in flight (the caller calls e.leave). Past the table's cap
// the entry is the request's own, untracked: the request goes through
// untracked, said in Fusebox-Untracked and counted. With ok false it
// answered the request itself (an invalid dependency name).
func (p *Proxy) dependency(w http.ResponseWriter, t *target) (e *depEntry, ok bool) {
	for {
		if v, found := p.deps.m.Load(t.dep); found {
			if e := v.(*depEntry); e.enter() {
				return e, true
			}
			continue
		}
		d := p.addEntry(t.dep)
		if d == nil {
			continue // added (or added meanwhile): enter it
		}
		if err := d.Err(); err != nil {
			p.answerInvalid(w, t.form, badRequest("invalid-dependency", "fusebox proxy: "+err.Error()))
			return nil, false
		}
		w.Header().Set(HeaderUntracked, "too-many-dependencies")
		p.m.untracked.Inc()
		return p.newEntry(t.dep, d), true
	}
}

// newEntry is the entry of d: its handle classifying with classify, and
// its RoundTrippers to either transport.
func (p *Proxy) newEntry(name string, d *clientlib.Dependency) *depEntry {
	e := &depEntry{name: name, dep: d.With(clientlib.WithClassifier(classify)), untracked: d.Untracked(), idleFrom: time.Now()}
	e.rt, e.h2c = e.dep.RoundTripper(p.transport), e.dep.RoundTripper(p.h2c)
	return e
}

// addEntry adds dep to the table, unless it is there already (it returns
// nil then too); it returns the handle of a name it could not add: an
// invalid one, or one past the cap (untracked).
func (p *Proxy) addEntry(dep string) *clientlib.Dependency {
	p.deps.mu.Lock()
	defer p.deps.mu.Unlock()
	if _, ok := p.deps.m.Load(dep); ok {
		return nil
	}
	d := p.client.Dependency(dep)
	if d.Err() != nil || d.Untracked() {
		return d
	}
	p.deps.m.Store(dep, p.newEntry(dep, d))
	p.deps.n.Add(1)
	return nil
}

// evict forgets e, in the table and in the client, unless a request
// entered it meanwhile.
func (p *Proxy) evict(e *depEntry) {
	p.deps.mu.Lock()
	defer p.deps.mu.Unlock()
	e.evicted.Store(true)
	if e.inFlight.Load() != 0 { // a request came in: keep it
		e.evicted.Store(false)
		return
	}
	p.deps.m.Delete(e.name)
	p.deps.n.Add(-1)
	p.client.Forget(e.name)
}

// flush forgets the dependencies idle for IdleDependencyTTL.
func (p *Proxy) flush(now time.Time) {
	p.deps.m.Range(func(_, v any) bool {
		e := v.(*depEntry)
		if e.used.Swap(false) {
			e.idleFrom = now
		}
		if e.inFlight.Load() == 0 && now.Sub(e.idleFrom) >= p.cfg.IdleDependencyTTL {
			p.evict(e)
		}
		return true
	})
}

// flushLoop runs flush every FlushInterval until the proxy closes.
func (p *Proxy) flushLoop() {
	ctxtime.Every(p.ctx, p.cfg.FlushInterval, func() { p.flush(time.Now()) })
}

// exchangeKey carries a request's exchange in its context: ServeHTTP puts
// it there once parseTarget has named the dependency, so that what runs
// under the request (the dialer, the transport's trace) knows it.
type exchangeKey struct{}

// exchangeOf is the exchange ctx carries (nil when none).
func exchangeOf(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

// withExchange carries x in ctx and, when Config.Confirm is set, tells it
// x's dependency whenever the transport holds a connection for the
// request: a new one (after its TLS handshake, for https) or one kept
// alive (which the dialer does not see again).
func (p *Proxy) withExchange(ctx context.Context, x *exchange) context.Context {
	ctx = context.WithValue(ctx, exchangeKey{}, x)
	if confirm := p.cfg.Confirm; confirm != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { confirm(x.dep) }})
	}
	return ctx
}

// dialer makes the proxy's upstream connections (the transports' and
// CONNECT's): net.Dialer with the guard's Control hook, and a dependency
// confirmed (Config.Confirm) by every connection to its upstream that
// succeeded: real traffic reaches it.
type dialer struct {
	net.Dialer
	confirm func(dep string) // nil: nobody asks
}

// DialContext dials as net.Dialer does, then confirms the dependency of
// the request ctx belongs to.
func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err == nil && d.confirm != nil {
		if x := exchangeOf(ctx); x != nil {
			d.confirm(x.dep)
		}
	}
	return c, err
}
