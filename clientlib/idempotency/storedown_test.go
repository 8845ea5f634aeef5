package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// failingStore is a MemoryStore with an injected failure: while fail is
// set, every call fails; with hang also set, it first waits for its
// context to end, as a Redis behind a dropped link does.
type failingStore struct {
	*idempotency.MemoryStore
	fail, hang atomic.Bool
}

var errInjected = errors.New("injected: connection refused")

func (s *failingStore) failure(ctx context.Context) error {
	if !s.fail.Load() {
		return nil
	}
	if s.hang.Load() {
		t := time.NewTimer(10 * time.Second) // the requests carry a 500 ms deadline
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("injected: read: i/o timeout: %w", ctx.Err())
		case <-t.C:
			return errors.New("injected: the request's context did not end within 10 s")
		}
	}
	return errInjected
}

func (s *failingStore) Reserve(ctx context.Context, key, fp string, ttl time.Duration) (string, *idempotency.Record, error) {
	if err := s.failure(ctx); err != nil {
		return "", nil, err
	}
	return s.MemoryStore.Reserve(ctx, key, fp, ttl)
}

func (s *failingStore) Get(ctx context.Context, key string) (*idempotency.Record, error) {
	if err := s.failure(ctx); err != nil {
		return nil, err
	}
	return s.MemoryStore.Get(ctx, key)
}

// keyedPost sends a keyed POST with the deadline clientlib propagates by
// default (Fusebox-Timeout-Ms: 500) and returns the status and the
// Fusebox-Idempotency header.
func keyedPost(t *testing.T, h http.Handler, key string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("2 books"))
	r.Header.Set(clientlib.HeaderIdempotencyKey, key)
	r.Header.Set(clientlib.HeaderRetryOwner, "checkout")
	r.Header.Set(clientlib.HeaderTimeoutMs, "500")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header().Get(idempotency.HeaderStatus)
}

// TestStoreDownAnswersUnavailableWhateverTheDeadline: with the store
// failing, a keyed request under a 500 ms propagated deadline gets 503
// store-unavailable (which clientlib retries), never 409 in-progress
// (which it does not): whether the store fails at once, or only once the
// deadline has passed, and for a duplicate waiting on the first request
// when the store fails under it.
func TestStoreDownAnswersUnavailableWhateverTheDeadline(t *testing.T) {
	fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "orders", Instance: "orders-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "the store fails at once", true: "the store fails at the deadline"}[hang]
		t.Run(name, func(t *testing.T) {
			mem, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			store := &failingStore{MemoryStore: mem}
			store.hang.Store(hang)
			dd, err := idempotency.New(store)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			gate := make(chan struct{})
			h := fb.Middleware(dd.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				<-gate
				w.WriteHeader(http.StatusCreated)
			})))

			store.fail.Store(true)
			if code, reason := keyedPost(t, h, "new-key"); code != http.StatusServiceUnavailable || reason != "store-unavailable" {
				t.Errorf("a new key with the store down: %d %q, want 503 store-unavailable", code, reason)
			}
			if runs.Load() != 0 {
				t.Fatal("the handler ran without its record")
			}

			// A duplicate waiting for a running first request, when the
			// store fails under it.
			store.fail.Store(false)
			first := make(chan int, 1)
			go func() { code, _ := keyedPost(t, h, "running"); first <- code }()
			sstest.Eventually(t, 10*time.Second, "the first request to run", func() bool { return runs.Load() == 1 })
			dup := make(chan [2]any, 1)
			go func() { code, reason := keyedPost(t, h, "running"); dup <- [2]any{code, reason} }()
			store.fail.Store(true)
			got := <-dup
			if got[0] != http.StatusServiceUnavailable || got[1] != "store-unavailable" {
				t.Errorf("a waiting duplicate with the store down: %v %q, want 503 store-unavailable", got[0], got[1])
			}
			close(gate)
			<-first
			if runs.Load() != 1 {
				t.Errorf("%d runs, want 1", runs.Load())
			}
		})
	}
}
