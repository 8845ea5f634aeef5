package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestNewNamesEveryInvalidOption(t *testing.T) {
	_, err := New(nil, ResultTTL(0), ReservationTTL(-time.Second), MaxWait(-1), MaxResponseBytes(0),
		MaxRequestBytes(-5), HTTPScope(nil), GRPCScope(nil), OnStoreError(7))
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("New = %v, want ErrInvalidOption", err)
	}
	for _, want := range []string{"store: must not be nil", "ResultTTL: must be positive, got 0s",
		"ReservationTTL: must be positive, got -1s", "MaxWait: must not be negative", "MaxResponseBytes: must be positive, got 0",
		"MaxRequestBytes: must be positive, got -5", "HTTPScope: must not be nil", "GRPCScope: must not be nil",
		"OnStoreError: unknown policy 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := New(memStore(t, MemoryConfig{})); err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
}

func TestHTTPSemantics(t *testing.T) {
	t.Run("without a key the request passes through untouched", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(h)
		for range 2 {
			w := req{body: "a"}.do(mw)
			if w.Code != http.StatusCreated || w.Header().Get("X-Not-Stored") != "1" || w.Header().Get(HeaderReplayed) != "" {
				t.Fatalf("answer %d %v", w.Code, w.Header())
			}
		}
		if n := h.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
	})

	t.Run("a completed key is replayed with the stored status, headers and body", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(h)
		first := req{key: "k1", body: "order"}.do(mw)
		second := req{key: "k1", body: "order"}.do(mw)
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		if first.Header().Get(HeaderReplayed) != "" {
			t.Errorf("the first answer says it was replayed")
		}
		if second.Code != http.StatusCreated || second.Body.String() != "run 1 of order" || second.Body.String() != first.Body.String() {
			t.Fatalf("replay = %d %q, want 201 %q", second.Code, second.Body, first.Body)
		}
		if second.Header().Get(HeaderReplayed) != "true" || second.Header().Get("Location") != "/orders/1" ||
			second.Header().Get("Content-Type") != "text/plain" {
			t.Fatalf("replayed headers %v", second.Header())
		}
		if second.Header().Get("X-Not-Stored") != "" {
			t.Fatalf("a header outside StoredHeaders was replayed: %v", second.Header())
		}
	})

	t.Run("a key reused with another request is refused with 422", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(h)
		req{key: "k", body: "order"}.do(mw)
		for _, r := range []req{
			{key: "k", body: "another order"},
			{key: "k", body: "order", path: "/refunds"},
			{key: "k", body: "order", path: "/orders?dry=1"},
			{key: "k", body: "order", method: http.MethodPut},
		} {
			w := r.do(mw)
			if w.Code != http.StatusUnprocessableEntity || w.Header().Get(HeaderStatus) != "mismatch" {
				t.Errorf("%+v: answer %d %v, want 422 mismatch", r, w.Code, w.Header())
			}
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("keys are scoped by caller", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(h)
		a := req{key: "same", owner: "checkout", body: "x"}.do(mw)
		b := req{key: "same", owner: "billing", body: "y"}.do(mw) // another body: no 422 across scopes
		if a.Code != http.StatusCreated || b.Code != http.StatusCreated || h.runs.Load() != 2 {
			t.Fatalf("answers %d %d, runs %d; want two independent runs", a.Code, b.Code, h.runs.Load())
		}
		if w := (req{key: "same", owner: "checkout", body: "x"}).do(mw); w.Header().Get(HeaderReplayed) != "true" || w.Body.String() != a.Body.String() {
			t.Fatalf("checkout's retry was not replayed its own answer: %q", w.Body)
		}
	})

	t.Run("a custom scope function", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{}), HTTPScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") })).Middleware(h)
		for _, tenant := range []string{"a", "b", "a"} {
			r := httpRequest(http.MethodPost, "/orders", "k", "body")
			r.Header.Set("X-Tenant", tenant)
			serve(mw, r)
		}
		if n := h.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (one per tenant)", n)
		}
	})

	t.Run("every answer of a started handler is stored, 5xx included", func(t *testing.T) {
		for _, code := range []int{408, 429, 500, 502, 503, 504} {
			var runs int
			mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(code)
				io.WriteString(w, "charged, then failed")
			}))
			first := req{key: "k"}.do(mw)
			for range 2 {
				w := req{key: "k"}.do(mw)
				if w.Code != code || runs != 1 || w.Header().Get(HeaderReplayed) != "true" || w.Body.String() != first.Body.String() ||
					w.Header().Get("Content-Type") != "text/plain" {
					t.Fatalf("after a %d: answer %d %q %v, runs %d; want the %d replayed, one run", code, w.Code, w.Body, w.Header(), runs, code)
				}
			}
		}
	})

	t.Run("NothingRan releases the key whatever the answer", func(t *testing.T) {
		for _, code := range []int{201, 402, 503} {
			var runs int
			var said []bool
			mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				if runs == 1 {
					said = append(said, NothingRan(r.Context()))
					w.WriteHeader(code)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			if w := (req{key: "k"}).do(mw); w.Code != code || w.Header().Get(HeaderReplayed) != "" {
				t.Fatalf("first answer %d %v, want the handler's %d", w.Code, w.Header(), code)
			}
			if w := (req{key: "k"}).do(mw); w.Code != http.StatusCreated || runs != 2 || w.Header().Get(HeaderReplayed) != "" {
				t.Fatalf("after NothingRan and %d: answer %d, runs %d; want the retry to run", code, w.Code, runs)
			}
			if w := (req{key: "k"}).do(mw); w.Code != http.StatusCreated || runs != 2 || w.Header().Get(HeaderReplayed) != "true" {
				t.Fatalf("the run after the release: answer %d, runs %d; want it stored and replayed", w.Code, runs)
			}
			if len(said) != 1 || !said[0] {
				t.Fatalf("NothingRan reported %v, want true (a key was held)", said)
			}
		}
	})

	t.Run("NothingRan outside a keyed run reports false", func(t *testing.T) {
		var said []bool
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { said = append(said, NothingRan(r.Context())) })
		serve(newDeduper(t, memStore(t, MemoryConfig{})).Middleware(h), httpRequest(http.MethodPost, "/orders", "", "x"))
		serve(newDeduper(t, brokenStore{}, OnStoreError(FailOpen)).Middleware(h), httpRequest(http.MethodPost, "/orders", "k", "x"))
		serve(h, httpRequest(http.MethodPost, "/orders", "k", "x"))
		if len(said) != 3 || said[0] || said[1] || said[2] {
			t.Fatalf("NothingRan reported %v; want false without a key, failing open, and without a Deduper", said)
		}
	})

	t.Run("a panicking handler is stored as 500, not run again", func(t *testing.T) {
		var runs int
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated) // a partial answer is not what is stored
			panic("charged, then a nil map")
		}))
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not go on")
				}
			}()
			req{key: "k"}.do(mw)
		}()
		w := req{key: "k"}.do(mw)
		if runs != 1 || w.Code != http.StatusInternalServerError || w.Header().Get(HeaderStatus) != "panicked" ||
			w.Header().Get(HeaderReplayed) != "true" || !strings.Contains(w.Body.String(), "panicked after it started") {
			t.Fatalf("after a panic: answer %d %v %q, runs %d; want 500 panicked replayed, one run", w.Code, w.Header(), w.Body, runs)
		}
	})

	t.Run("NothingRan then a panic releases the key", func(t *testing.T) {
		var runs int
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				NothingRan(r.Context())
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusCreated)
		}))
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not go on")
				}
			}()
			req{key: "k"}.do(mw)
		}()
		if w := (req{key: "k"}).do(mw); w.Code != http.StatusCreated || runs != 2 {
			t.Fatalf("answer %d, runs %d; want the retry to run", w.Code, runs)
		}
	})

	t.Run("a handler whose caller went away is stored as it answered", func(t *testing.T) {
		var runs int
		mw := newDeduper(t, memStore(t, MemoryConfig{})).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			select { // the charge is made; the caller is gone
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
				t.Error("the handler's context was not cancelled with its caller's")
			}
			http.Error(w, "cancelled: "+r.Context().Err().Error(), http.StatusServiceUnavailable)
		}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		serve(mw, httpRequest(http.MethodPost, "/orders", "k", "").WithContext(ctx))
		w := req{key: "k"}.do(mw)
		if runs != 1 || w.Code != http.StatusServiceUnavailable || w.Header().Get(HeaderReplayed) != "true" ||
			!strings.Contains(w.Body.String(), "context canceled") {
			t.Fatalf("retry: %d %q, runs %d; want the stored 503, one run", w.Code, w.Body, runs)
		}
	})

	t.Run("bad keys and oversized bodies are refused", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, memStore(t, MemoryConfig{}), MaxRequestBytes(8)).Middleware(h)
		for _, tc := range []struct {
			r      req
			code   int
			reason string
		}{
			{req{key: strings.Repeat("k", MaxKeyLength+1)}, 400, "invalid-key"},
			{req{key: "tab\there"}, 400, "invalid-key"},
			{req{key: "k", owner: strings.Repeat("o", MaxScopeLength+1)}, 400, "invalid-key"},
			{req{key: "k", body: "123456789"}, 413, "request-too-large"},
		} {
			if w := tc.r.do(mw); w.Code != tc.code || w.Header().Get(HeaderStatus) != tc.reason {
				t.Errorf("answer %d %q, want %d %s", w.Code, w.Header().Get(HeaderStatus), tc.code, tc.reason)
			}
		}
		if w := (req{key: "k", body: "12345678"}).do(mw); w.Code != http.StatusCreated || w.Body.String() != "run 1 of 12345678" {
			t.Fatalf("a body at the limit: %d %q", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("a response larger than the limit reaches its caller but is not replayed", func(t *testing.T) {
		big := strings.Repeat("x", 100)
		var runs int
		mw := newDeduper(t, memStore(t, MemoryConfig{}), MaxResponseBytes(99)).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			io.WriteString(w, big[:50])
			io.WriteString(w, big[50:])
		}))
		if w := (req{key: "k"}).do(mw); w.Code != 200 || w.Body.String() != big {
			t.Fatalf("first answer %d, %d bytes", w.Code, w.Body.Len())
		}
		w := req{key: "k"}.do(mw)
		if w.Code != http.StatusConflict || w.Header().Get(HeaderStatus) != "not-stored" || runs != 1 ||
			!strings.Contains(w.Body.String(), "100-byte response was too large") {
			t.Fatalf("duplicate: %d %v %q, runs %d; want 409 not-stored and no rerun", w.Code, w.Header(), w.Body, runs)
		}
		small := req{key: "k2"}
		mw2 := newDeduper(t, memStore(t, MemoryConfig{}), MaxResponseBytes(100)).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, big)
		}))
		small.do(mw2)
		if w := small.do(mw2); w.Body.String() != big || w.Header().Get(HeaderReplayed) != "true" {
			t.Fatalf("a response at the limit was not replayed: %d %q", w.Code, w.Body)
		}
	})
}

func TestDuplicateWaitsForTheFirst(t *testing.T) {
	h := &sideEffect{gate: make(chan struct{})}
	d := newDeduper(t, memStore(t, MemoryConfig{}))
	mw := d.Middleware(h)
	var (
		wg      sync.WaitGroup
		answers [2]string
		replays [2]string
	)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := req{key: "k", body: "b"}.do(mw)
			answers[i], replays[i] = w.Body.String(), w.Header().Get(HeaderReplayed)
		}()
	}
	sstest.Eventually(t, 10*time.Second, "one run and one waiting duplicate", func() bool {
		return h.runs.Load() == 1 && testutil.ToFloat64(d.m.waiting) == 1
	})
	close(h.gate)
	wg.Wait()
	if h.runs.Load() != 1 || answers[0] != "run 1 of b" || answers[1] != answers[0] {
		t.Fatalf("runs %d, answers %q; want one run and the same answer twice", h.runs.Load(), answers)
	}
	if (replays[0] == "true") == (replays[1] == "true") {
		t.Fatalf("replayed headers %q: want exactly one replay", replays)
	}
	if v := testutil.ToFloat64(d.m.waiting); v != 0 {
		t.Fatalf("waiting gauge %v after the wait", v)
	}
}

// TestWaitingDuplicateRunsAfterNothingRan: a duplicate waiting for the
// first request runs itself when the first says NothingRan.
func TestWaitingDuplicateRunsAfterNothingRan(t *testing.T) {
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	var runs atomic.Int64
	d := newDeduper(t, memStore(t, MemoryConfig{}))
	mw := d.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-gate
			NothingRan(r.Context())
			http.Error(w, "ledger busy", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	first := make(chan int, 1)
	go func() { first <- req{key: "k"}.do(mw).Code }()
	sstest.Eventually(t, 10*time.Second, "the first request to run", func() bool { return runs.Load() == 1 })
	dup := make(chan *httptest.ResponseRecorder, 1)
	go func() { dup <- req{key: "k"}.do(mw) }()
	sstest.Eventually(t, 10*time.Second, "the duplicate to wait", func() bool { return testutil.ToFloat64(d.m.waiting) == 1 })
	open()
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want its 503", code)
	}
	w := <-dup
	if w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "" || runs.Load() != 2 {
		t.Fatalf("duplicate: %d (replayed %q), runs %d; want it to run after the release", w.Code, w.Header().Get(HeaderReplayed), runs.Load())
	}
}

func TestDuplicateGetsConflictWhenTheFirstOutlastsTheWait(t *testing.T) {
	h := &sideEffect{}
	open := h.openGate(t)
	reg := prometheus.NewRegistry()
	mw := newDeduper(t, memStore(t, MemoryConfig{}), MaxWait(0), WithRegisterer(reg)).Middleware(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req{key: "k"}.do(mw)
	}()
	sstest.Eventually(t, 10*time.Second, "the first request to run", func() bool { return h.runs.Load() == 1 })
	w := req{key: "k"}.doWithin(t, mw)
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "1" || w.Header().Get(HeaderStatus) != "in-progress" {
		t.Fatalf("duplicate: %d %v, want 409 in-progress with Retry-After", w.Code, w.Header())
	}
	open()
	<-done
	if w := (req{key: "k"}).do(mw); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("after the first finished: %d %v, want the replay", w.Code, w.Header())
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fusebox_idempotency_requests_total Keyed requests by outcome: executed (answer stored, whatever its status), panicked (stored as 500/Internal), released (the handler called NothingRan: key freed), replayed, in_progress (409/Aborted after waiting), mismatch (422/InvalidArgument), invalid_key, not_stored (completed, body too large to replay), store_unavailable (fail closed), unkeyed (store down, fail open), too_large (request body).
# TYPE fusebox_idempotency_requests_total counter
fusebox_idempotency_requests_total{outcome="executed"} 1
fusebox_idempotency_requests_total{outcome="in_progress"} 1
fusebox_idempotency_requests_total{outcome="invalid_key"} 0
fusebox_idempotency_requests_total{outcome="mismatch"} 0
fusebox_idempotency_requests_total{outcome="not_stored"} 0
fusebox_idempotency_requests_total{outcome="panicked"} 0
fusebox_idempotency_requests_total{outcome="released"} 0
fusebox_idempotency_requests_total{outcome="replayed"} 1
fusebox_idempotency_requests_total{outcome="store_unavailable"} 0
fusebox_idempotency_requests_total{outcome="too_large"} 0
fusebox_idempotency_requests_total{outcome="unkeyed"} 0
`), "fusebox_idempotency_requests_total"); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateWaitEndsAtItsDeadline(t *testing.T) {
	h := &sideEffect{}
	h.openGate(t)
	mw := newDeduper(t, memStore(t, MemoryConfig{}), MaxWait(time.Hour)).Middleware(h)
	go req{key: "k"}.do(mw)
	sstest.Eventually(t, 10*time.Second, "the first request to run", func() bool { return h.runs.Load() == 1 })
	r := httpRequest(http.MethodPost, "/orders", "k", "")
	ctx, cancel := contextWithTimeout(20 * time.Millisecond)
	defer cancel()
	w := serveWithin(t, mw, r.WithContext(ctx))
	if w.Code != http.StatusConflict || w.Header().Get(HeaderStatus) != "in-progress" {
		t.Fatalf("duplicate past its deadline: %d %v, want 409 in-progress", w.Code, w.Header())
	}
}

func TestStoreErrorPolicy(t *testing.T) {
	t.Run("fail closed by default", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, brokenStore{}).Middleware(h)
		w := req{key: "k"}.do(mw)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" ||
			w.Header().Get(HeaderStatus) != "store-unavailable" || !strings.Contains(w.Body.String(), "connection refused") {
			t.Fatalf("answer %d %v %q, want 503 store-unavailable naming the cause", w.Code, w.Header(), w.Body)
		}
		if h.runs.Load() != 0 {
			t.Fatal("the handler ran without its record")
		}
		if w := (req{}).do(mw); w.Code != http.StatusCreated {
			t.Fatalf("a request without a key needs no store: %d", w.Code)
		}
	})
	t.Run("fail open runs the handler without a record", func(t *testing.T) {
		h := &sideEffect{}
		mw := newDeduper(t, brokenStore{}, OnStoreError(FailOpen)).Middleware(h)
		for range 2 {
			if w := (req{key: "k"}).do(mw); w.Code != http.StatusCreated {
				t.Fatalf("answer %d, want the handler's 201", w.Code)
			}
		}
		if h.runs.Load() != 2 {
			t.Fatalf("runs %d, want 2 (at-least-once while the store is away)", h.runs.Load())
		}
	})
	t.Run("a full memory store is refused even when failing open", func(t *testing.T) {
		h := &sideEffect{}
		open := h.openGate(t)
		mw := newDeduper(t, memStore(t, MemoryConfig{MaxEntries: 1}), OnStoreError(FailOpen)).Middleware(h)
		go req{key: "a"}.do(mw)
		sstest.Eventually(t, 10*time.Second, "the first request to run", func() bool { return h.runs.Load() == 1 })
		w := req{key: "b"}.doWithin(t, mw) // run, it would wait at the gate
		open()
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "store full") {
			t.Fatalf("answer %d %q, want 503 naming the full store", w.Code, w.Body)
		}
	})
}
