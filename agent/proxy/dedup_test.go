package proxy

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// TestKeyedPOSTRetriedThroughTheProxyRunsOnce: the proxy retries a keyed
// POST answered 503; behind the upstream's idempotency.Deduper, the
// handler that recorded a charge and then answered 503 runs once, and
// every retry gets the stored 503, marked replayed.
func TestKeyedPOSTRetriedThroughTheProxyRunsOnce(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dd, err := idempotency.New(store)
	if err != nil {
		t.Fatal(err)
	}
	var charges, requests, replays atomic.Int64
	charge := dd.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		http.Error(w, "payments: charged, but the ledger did not confirm", http.StatusServiceUnavailable)
	}))
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		charge.ServeHTTP(w, r)
		if w.Header().Get(idempotency.HeaderReplayed) == "true" {
			replays.Add(1)
		}
	})
	h := newHarness(t, nil, nil)
	resp := h.do(h.forward, http.MethodPost, up.URL+"/charges", "42 EUR", HeaderIdempotencyKey, "order-42")
	n := requests.Load()
	if n < 2 || resp.Header.Get(HeaderAttempts) != strconv.FormatInt(n, 10) {
		t.Fatalf("%d upstream requests (%s %q): want the proxy to retry the 503", n, HeaderAttempts, resp.Header.Get(HeaderAttempts))
	}
	if c, r := charges.Load(), replays.Load(); c != 1 || r != n-1 {
		t.Errorf("%d charges and %d replays over %d attempts, want 1 charge and every retry replayed", c, r, n)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "payments: charged, but the ledger did not confirm\n" ||
		resp.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("the caller got %d %q (replayed %q), want the stored 503", resp.StatusCode, body, resp.Header.Get(idempotency.HeaderReplayed))
	}
}
