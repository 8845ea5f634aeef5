package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// errTooManyDependencies: the proxy's table is full.
var errTooManyDependencies = errors.New("fusebox proxy: too many dependencies")

// depEntry is the proxy's state for one dependency: its requests in
// flight (for the concurrency limit and the node's in-flight count).
type depEntry struct {
	name     string
	inFlight atomic.Int64
	used     atomic.Bool // a request came since the last flush
	evicted  atomic.Bool

	// Owned by the flusher.
	reported uint64
	idleFrom time.Time
}

// enter counts a request in flight; it fails when the entry was evicted
// meanwhile (look it up again).
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

// depTable holds the dependencies the proxy's requests named, at most
// Config.MaxDependencies; idle ones are forgotten after
// Config.IdleDependencyTTL. Lookups take no lock.
type depTable struct {
	m  sync.Map // name → *depEntry
	n  atomic.Int64
	mu sync.Mutex // creation and eviction
}

// entry returns dep's entry, counting one request in flight; the caller
// calls leave. It fails with errTooManyDependencies or what Engine.Track
// returned.
func (p *Proxy) entry(dep string) (*depEntry, error) {
	for {
		if v, ok := p.deps.m.Load(dep); ok {
			if e := v.(*depEntry); e.enter() {
				return e, nil
			}
			continue
		}
		if err := p.addEntry(dep); err != nil {
			return nil, err
		}
	}
}

func (p *Proxy) addEntry(dep string) error {
	p.deps.mu.Lock()
	defer p.deps.mu.Unlock()
	if _, ok := p.deps.m.Load(dep); ok {
		return nil
	}
	if p.deps.n.Load() >= int64(p.cfg.MaxDependencies) {
		return fmt.Errorf("%w: the proxy tracks its limit of %d already", errTooManyDependencies, p.cfg.MaxDependencies)
	}
	if err := p.eng.Track(dep); err != nil {
		return err
	}
	p.deps.m.Store(dep, &depEntry{name: dep, idleFrom: time.Now()})
	p.deps.n.Add(1)
	return nil
}

// flush reports changed in-flight counts to the engine and forgets
// dependencies idle for IdleDependencyTTL (all of them when final).
func (p *Proxy) flush(now time.Time, final bool) {
	p.deps.m.Range(func(k, v any) bool {
		e := v.(*depEntry)
		n := uint64(max(e.inFlight.Load(), 0))
		if n != e.reported {
			p.eng.ReportInFlight(e.name, e.reported, n)
			e.reported = n
		}
		if e.used.Swap(false) {
			e.idleFrom = now
		}
		if final || (n == 0 && now.Sub(e.idleFrom) >= p.cfg.IdleDependencyTTL) {
			p.evict(e)
		}
		return true
	})
}

func (p *Proxy) evict(e *depEntry) {
	p.deps.mu.Lock()
	e.evicted.Store(true)
	p.deps.m.Delete(e.name)
	p.deps.n.Add(-1)
	p.deps.mu.Unlock()
	// A request that entered before the eviction is still counted: hand
	// its count back to the engine as it ends, then let go.
	if e.reported != 0 {
		p.eng.ReportInFlight(e.name, e.reported, 0)
		e.reported = 0
	}
	p.eng.Release(e.name)
}

// flushLoop runs flush every FlushInterval until the proxy closes.
func (p *Proxy) flushLoop() {
	defer p.wg.Done()
	ctxtime.Every(p.ctx, p.cfg.FlushInterval, func() { p.flush(time.Now(), false) })
}

// isRefusedName reports whether err refuses a dependency's name.
func isRefusedName(err error) bool {
	return errors.Is(err, sharedstate.ErrInvalidDependencyName)
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
