package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// TestReplayed503IsNotRetriedThroughClientlib: the handler of a keyed POST
// fails with a 503 once it has started; the Deduper stores that answer.
// clientlib's RoundTripper retries the 503 once under the same key, gets
// the stored 503 replayed (Idempotent-Replayed: true) and stops there: a
// further retry would only be replayed again, spending retry budget for
// nothing. The caller gets the replayed answer.
func TestReplayed503IsNotRetriedThroughClientlib(t *testing.T) {
	c := &charges{}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dd, err := idempotency.New(store)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "ledger unavailable")
	})
	srv := httptest.NewServer(keysSeen(c, dd.Middleware(failing)))
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
	ctx = clientlib.ContextWithCallOptions(ctx, clientlib.WithAttemptTimeout(30*time.Second), clientlib.WithMaxAttempts(3))
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
	if n := ran.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once (the Deduper replays its 503)", n)
	}
	if calls != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("the server saw %d requests with keys %q; want the first and one retry, answered from the store, and no third", calls, keys)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "ledger unavailable" ||
		resp.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("answer %d %q (%s %q), want the replayed 503", resp.StatusCode, body,
			idempotency.HeaderReplayed, resp.Header.Get(idempotency.HeaderReplayed))
	}
}
