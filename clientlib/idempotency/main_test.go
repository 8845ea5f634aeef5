package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func memStore(t testing.TB, cfg MemoryConfig) *MemoryStore {
	t.Helper()
	s, err := NewMemoryStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newDeduper(t testing.TB, s Store, opts ...Option) *Deduper {
	t.Helper()
	d, err := New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sideEffect is a handler that counts how often it ran and answers 201
// with the run's number, so that a replay is told apart from a rerun.
type sideEffect struct {
	runs atomic.Int64
	gate chan struct{} // when set, each run waits for it to close
}

func (h *sideEffect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	if h.gate != nil {
		<-h.gate
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Location", "/orders/1")
	w.Header().Set("X-Not-Stored", "1")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "run "+strconv.FormatInt(n, 10)+" of "+string(body))
}

type req struct {
	method, path, key, owner, body string
}

func (r req) do(h http.Handler) *httptest.ResponseRecorder { return serve(h, r.request()) }

// doWithin is do, bounded: see serveWithin.
func (r req) doWithin(t *testing.T, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	return serveWithin(t, h, r.request())
}

func (r req) request() *http.Request {
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/orders"
	}
	hr := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	if r.key != "" {
		hr.Header.Set("Idempotency-Key", r.key)
	}
	if r.owner != "" {
		hr.Header.Set("Fusebox-Retry-Owner", r.owner)
	}
	return hr
}

// brokenStore fails every operation, like an unreachable Redis.
type brokenStore struct{}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (brokenStore) Reserve(context.Context, string, string, time.Duration) (string, *Record, error) {
	return "", nil, errDown
}
func (brokenStore) Complete(context.Context, string, string, *Record, time.Duration) error {
	return errDown
}
func (brokenStore) Release(context.Context, string, string) error { return errDown }
func (brokenStore) Get(context.Context, string) (*Record, error)  { return nil, errDown }

func httpRequest(method, path, key, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// answerWait bounds serveWithin.
const answerWait = 10 * time.Second

// serveWithin serves r on h and waits at most answerWait for the answer. A
// test whose handler blocks on a gate serves the requests that must not
// reach it with serveWithin: a bug that lets one through then fails the
// test, naming the request, instead of hanging it until go test's timeout.
// The caller releases the gate at cleanup, so the handler's goroutine ends.
func serveWithin(t *testing.T, h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve(h, r) }()
	tm := time.NewTimer(answerWait)
	defer tm.Stop()
	select {
	case w := <-done:
		return w
	case <-tm.C:
		t.Fatalf("%s %s (Idempotency-Key %q): no answer within %v: it reached the blocked handler",
			r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), answerWait)
		return nil
	}
}

// openGate makes h's gate and returns the function that opens it, once; it
// also opens at cleanup, so that no run stays blocked after a failed test.
func (h *sideEffect) openGate(t *testing.T) func() {
	h.gate = make(chan struct{})
	open := sync.OnceFunc(func() { close(h.gate) })
	t.Cleanup(open)
	return open
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
