package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// loseFirstAnswer runs the first request to the end (the operation is
// done), throws its answer away and cuts the connection: the caller sees
// the connection close without a response, as when a server or a proxy
// dies after the work.
func loseFirstAnswer(next http.Handler) http.Handler {
	var cut atomic.Bool
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cut.CompareAndSwap(false, true) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&discard{h: http.Header{}}, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	})
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// charges is a payment endpoint: every run charges once.
type charges struct {
	mu    sync.Mutex
	n     int
	keys  []string
	calls int
}

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.n++
	n := c.n
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "charge "+string(body)+" #"+string(rune('0'+n)))
}

func (c *charges) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// keysSeen records the Idempotency-Key of every request that arrives.
func keysSeen(c *charges, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.calls++
		c.keys = append(c.keys, r.Header.Get(clientlib.HeaderIdempotencyKey))
		c.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// TestLostAnswerRetriedThroughClientlib: a POST made IdempotentWithKey
// through clientlib's RoundTripper loses its first answer after the server
// charged; clientlib retries with the same key and the Deduper replays the
// charge instead of charging again. Without the Deduper the same retry
// charges twice, which is what the test guards against.
func TestLostAnswerRetriedThroughClientlib(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dedup       bool
		wantCharges int
	}{
		{"with the Deduper the charge happens once", true, 1},
		{"without it the retry charges again", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &charges{}
			var h http.Handler = c
			if tc.dedup {
				store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
				if err != nil {
					t.Fatal(err)
				}
				dd, err := idempotency.New(store)
				if err != nil {
					t.Fatal(err)
				}
				h = dd.Middleware(h)
			}
			srv := httptest.NewServer(keysSeen(c, loseFirstAnswer(h)))
			t.Cleanup(srv.Close)

			fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "checkout", Instance: "checkout-1",
				Random: func() uint64 { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fb.Close() })
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: fb.RoundTripper(tr, clientlib.HTTPDependency("payments"))}

			ctx := clientlib.ContextWithClass(context.Background(), clientlib.IdempotentWithKey)
			// A generous per-attempt timeout: on a loaded machine the default
			// 500 ms could add a third attempt the test does not expect.
			ctx = clientlib.ContextWithCallOptions(ctx, clientlib.WithAttemptTimeout(30*time.Second))
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", bytes.NewReader([]byte("42 EUR")))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("the call failed: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			c.mu.Lock()
			calls, keys := c.calls, c.keys
			c.mu.Unlock()
			if calls != 2 || keys[0] == "" || keys[0] != keys[1] {
				t.Fatalf("server saw %d requests with keys %q; want the first and one retry, same key", calls, keys)
			}
			if got := c.count(); got != tc.wantCharges {
				t.Fatalf("charged %d times, want %d", got, tc.wantCharges)
			}
			if resp.StatusCode != http.StatusCreated || string(body) != "charge 42 EUR #"+string(rune('0'+tc.wantCharges)) {
				t.Fatalf("answer %d %q", resp.StatusCode, body)
			}
			if replayed := resp.Header.Get(idempotency.HeaderReplayed) == "true"; replayed != tc.dedup {
				t.Fatalf("Idempotent-Replayed = %q", resp.Header.Get(idempotency.HeaderReplayed))
			}
		})
	}
}
