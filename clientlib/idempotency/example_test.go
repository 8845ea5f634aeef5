package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// The server runs the first request with a key and replays its answer to
// every duplicate. The memory store suits a single instance; behind a
// load balancer use the Redis store (clientlib/idempotency/redisstore),
// shared by every instance.
func ExampleDeduper_Middleware() {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	dd, err := idempotency.New(store)
	if err != nil {
		fmt.Println(err)
		return
	}
	charges := 0
	h := dd.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", charges)
	}))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount": 100}`))
		req.Header.Set("Idempotency-Key", "order-1001")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Body.String(), "replayed:", w.Header().Get(idempotency.HeaderReplayed) == "true")
	}
	fmt.Println("charged", charges, "time")
	// Output:
	// 201 charge 1 replayed: false
	// 201 charge 1 replayed: true
	// charged 1 time
}

// Safe retries end to end: clientlib retries a POST with one key on every
// attempt, and the server's Deduper makes the retry replay the first
// attempt's answer instead of charging again. Here the first answer is
// lost on the way back (the caller sees a 503), as when a timeout cuts a
// call whose side effect already happened.
func ExampleDeduper_Middleware_withClientlib() {
	store, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	dd, _ := idempotency.New(store)
	charges := 0
	payments := dd.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
	}))
	lost := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lost { // run the request, then lose its answer
			lost = true
			payments.ServeHTTP(httptest.NewRecorder(), r)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		payments.ServeHTTP(w, r)
	}))
	defer srv.Close()

	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	client := &http.Client{Transport: fb.RoundTripper(srv.Client().Transport)}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount": 100}`))
	// A POST is retried only with a key: IdempotentWithKey makes one for
	// the call and sends it on every attempt.
	req = req.WithContext(clientlib.ContextWithClass(req.Context(), clientlib.IdempotentWithKey))
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get(idempotency.HeaderReplayed), "charges:", charges)
	// Output: 201 replayed: true charges: 1
}

// A handler whose request had no effect says so with NothingRan: the
// Deduper then releases the key instead of storing the answer, and the
// retry runs. Without it, every answer of a handler that started is stored
// and replayed, 5xx included, because a retrier repeats 502, 503 and 504
// and the Deduper cannot know what a failed handler did.
func ExampleNothingRan() {
	store, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	dd, _ := idempotency.New(store)
	ledgerUp, charges := false, 0
	h := dd.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ledgerUp {
			// Refused before anything was charged: a retry may run again.
			idempotency.NothingRan(r.Context())
			http.Error(w, "ledger unavailable", http.StatusServiceUnavailable)
			return
		}
		charges++
		w.WriteHeader(http.StatusCreated)
	}))

	for _, up := range []bool{false, true, true} {
		ledgerUp = up
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount": 100}`))
		req.Header.Set("Idempotency-Key", "order-1001")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Println(w.Code, "replayed:", w.Header().Get(idempotency.HeaderReplayed) == "true")
	}
	fmt.Println("charged", charges, "time")
	// Output:
	// 503 replayed: false
	// 201 replayed: false
	// 201 replayed: true
	// charged 1 time
}
