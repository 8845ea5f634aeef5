package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for a condition in these tests.
const waitTimeout = 15 * time.Second

type env struct {
	srv *embedded.Server
	cli *clientv3.Client
	st  *store.Store
}

// newEnv starts etcd and returns a store on it, all closed in t.Cleanup.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := embedded.StartForTest(t)
	cli := embedded.ClientForTest(t, srv)
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, cli: cli, st: st}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func as(actor string) store.WriteOptions { return store.WriteOptions{Actor: actor} }

func defaultJSON(t *testing.T, edit func(*sharedstate.Policy)) []byte {
	t.Helper()
	p := sharedstate.DefaultPolicy()
	if edit != nil {
		edit(&p)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recorder is a Handler that records every call and lets a test wait for a
// condition on what it recorded.
type recorder struct {
	mu      sync.Mutex
	syncs   []store.State
	events  []store.Event
	invalid []*store.InvalidValueError
	errs    []error
	changed chan struct{}

	// syncHook, when set, runs inside Sync (before recording), on the
	// watcher's goroutine.
	syncHook func(n int)
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) Sync(st store.State) {
	r.mu.Lock()
	n := len(r.syncs)
	hook := r.syncHook
	r.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	r.mu.Lock()
	r.syncs = append(r.syncs, st)
	r.mu.Unlock()
	r.notify()
}

func (r *recorder) Apply(_ int64, events []store.Event) {
	r.mu.Lock()
	r.events = append(r.events, events...)
	r.mu.Unlock()
	r.notify()
}

func (r *recorder) Invalid(err *store.InvalidValueError) {
	r.mu.Lock()
	r.invalid = append(r.invalid, err)
	r.mu.Unlock()
	r.notify()
}

func (r *recorder) Error(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.notify()
}

// waitFor waits until cond (called with r locked) holds, failing the test
// after waitTimeout.
func (r *recorder) waitFor(t *testing.T, what string, cond func(r *recorder) bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond(r)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s; syncs=%d events=%d invalid=%v errs=%v",
				what, len(r.syncs), len(r.events), r.invalid, r.errs)
		}
	}
}

func (r *recorder) hasEvent(kind store.EventKind, name string) bool {
	for _, e := range r.events {
		if e.Kind == kind && e.Name == name {
			return true
		}
	}
	return false
}

func (r *recorder) lastSync() store.State { return r.syncs[len(r.syncs)-1] }

// proxy is a TCP proxy in front of etcd that a test can cut (close every
// connection and refuse new ones) and restore, to disconnect one client
// while etcd keeps running.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) endpoint() string { return "http://" + p.l.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.wg.Add(1)
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	if !p.track(u) {
		return
	}
	defer p.forget(u)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// setCut cuts (true) or restores (false) the proxy.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.setCut(true)
	p.l.Close()
	p.wg.Wait()
}

// clientVia returns a client of srv that connects through p.
func clientVia(t *testing.T, srv *embedded.Server, p *proxy) *clientv3.Client {
	t.Helper()
	cfg := srv.ClientConfig()
	cfg.Endpoints = []string{p.endpoint()}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustConflict(t *testing.T, err error, expected, current int64) {
	t.Helper()
	var ce *store.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("err = %v, want a *ConflictError", err)
	}
	if ce.Expected != expected || ce.Current != current {
		t.Fatalf("conflict = expected %d current %d, want expected %d current %d", ce.Expected, ce.Current, expected, current)
	}
}
