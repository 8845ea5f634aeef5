package idempotency

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

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_1","status":"succeeded"}`)
	})
}

// benchServe runs one keyed POST through h (key "" = the same key each
// time) and checks the status.
func benchServe(b *testing.B, h http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(benchBody))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Fusebox-Retry-Owner", "checkout")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

// BenchmarkMiddleware: the cost per request of the middleware over the
// in-memory store, for a new key (reserve, run, complete) and for a replay
// (one lookup), with the bare handler as the baseline of the same run.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		h := benchHandler()
		b.ReportAllocs()
		for b.Loop() {
			benchServe(b, h, "k")
		}
	})
	newMW := func(b *testing.B) http.Handler {
		s, err := NewMemoryStore(MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		d, err := New(s)
		if err != nil {
			b.Fatal(err)
		}
		return d.Middleware(benchHandler())
	}
	b.Run("memory/new-key", func(b *testing.B) {
		h := newMW(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			benchServe(b, h, "key-"+strconv.Itoa(i))
		}
	})
	b.Run("memory/replay", func(b *testing.B) {
		h := newMW(b)
		benchServe(b, h, "key")
		b.ReportAllocs()
		for b.Loop() {
			benchServe(b, h, "key")
		}
	})
}
