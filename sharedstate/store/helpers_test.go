package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
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
	srv := embeddedtest.Start(t)
	cli := embeddedtest.Client(t, srv)
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
	rewinds []store.Rewind
	calls   []string    // "sync", "apply", "rewound", in order
	state   store.State // the last Sync with the events since applied
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
	r.state = st.Clone()
	r.calls = append(r.calls, "sync")
	r.mu.Unlock()
	r.notify()
}

func (r *recorder) Apply(_ int64, events []store.Event) {
	r.mu.Lock()
	r.events = append(r.events, events...)
	for _, e := range events {
		switch e.Kind {
		case store.PolicyPut:
			r.state.Policies[e.Name] = e.Policy
		case store.PolicyDeleted:
			delete(r.state.Policies, e.Name)
		case store.OverridePut:
			r.state.Overrides[e.Name] = e.Override
		case store.OverrideDeleted:
			delete(r.state.Overrides, e.Name)
		}
	}
	r.calls = append(r.calls, "apply")
	r.mu.Unlock()
	r.notify()
}

func (r *recorder) Rewound(rw store.Rewind) {
	r.mu.Lock()
	r.rewinds = append(r.rewinds, rw)
	r.calls = append(r.calls, "rewound")
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
			t.Fatalf("timed out waiting for %s; syncs=%d events=%d invalid=%v errs=%v rewinds=%v",
				what, len(r.syncs), len(r.events), r.invalid, r.errs, r.rewinds)
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

// clientVia returns a client of srv that connects through p.
func clientVia(t *testing.T, srv *embedded.Server, p *embeddedtest.Proxy) *clientv3.Client {
	t.Helper()
	cfg := srv.ClientConfig()
	cfg.Endpoints = []string{p.Endpoint()}
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

// waitDone waits for done to be closed, failing the test after waitTimeout.
func waitDone(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
}
