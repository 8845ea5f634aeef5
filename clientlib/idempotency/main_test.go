package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

func (r req) do(h http.Handler) *httptest.ResponseRecorder {
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
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
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

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
