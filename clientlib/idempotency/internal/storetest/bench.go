package storetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// benchBody is a typical small JSON request.
const benchBody = `{"customer":"c-1029","amount":4200,"currency":"EUR","card":"tok_4242"}`

// BenchHandler answers every request 201 with a small JSON body: the
// handler the middleware benchmarks wrap.
func BenchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_1","status":"succeeded"}`)
	})
}

// ServeKeyed runs one keyed POST through h and fails b unless it is
// answered 201.
func ServeKeyed(b *testing.B, h http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(benchBody))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Fusebox-Retry-Owner", "checkout")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

// BenchNewKeyAndReplay runs the "new-key" (a fresh key per request) and
// "replay" (one key, answered from the store) sub-benchmarks of name over
// the handlers newMW returns.
func BenchNewKeyAndReplay(b *testing.B, name string, newMW func(b *testing.B) http.Handler) {
	b.Run(name+"/new-key", func(b *testing.B) {
		h := newMW(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			ServeKeyed(b, h, "key-"+strconv.Itoa(i))
		}
	})
	b.Run(name+"/replay", func(b *testing.B) {
		h := newMW(b)
		ServeKeyed(b, h, "key")
		b.ReportAllocs()
		for b.Loop() {
			ServeKeyed(b, h, "key")
		}
	})
}

// BenchBare is the baseline: the handler without middleware.
func BenchBare(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		h := BenchHandler()
		b.ReportAllocs()
		for b.Loop() {
			ServeKeyed(b, h, "k")
		}
	})
}
