package redisstore_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/redisstore"
)

const benchBody = `{"customer":"c-1029","amount":4200,"currency":"EUR","card":"tok_4242"}`

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_1","status":"succeeded"}`)
	})
}

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

// BenchmarkMiddleware: the cost per request of the middleware over Redis
// (a local redis-server, over its unix socket and over loopback TCP), for a
// new key (reserve, run, complete: two round trips) and for a replay (one),
// with the bare handler as the baseline of the same run.
func BenchmarkMiddleware(b *testing.B) {
	rs := startRedis(b, true)
	b.Run("bare", func(b *testing.B) {
		h := benchHandler()
		b.ReportAllocs()
		for b.Loop() {
			benchServe(b, h, "k")
		}
	})
	for _, tc := range []struct {
		name string
		rdb  func() *redis.Client
	}{
		{"redis-unix", func() *redis.Client { return rs.client(b) }},
		{"redis-tcp", func() *redis.Client { return rs.tcpClient(b) }},
	} {
		newMW := func(b *testing.B) http.Handler {
			d, err := idempotency.New(redisstore.New(tc.rdb(), redisstore.WithPrefix(prefix())))
			if err != nil {
				b.Fatal(err)
			}
			return d.Middleware(benchHandler())
		}
		b.Run(tc.name+"/new-key", func(b *testing.B) {
			h := newMW(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				benchServe(b, h, "key-"+strconv.Itoa(i))
			}
		})
		b.Run(tc.name+"/replay", func(b *testing.B) {
			h := newMW(b)
			benchServe(b, h, "key")
			b.ReportAllocs()
			for b.Loop() {
				benchServe(b, h, "key")
			}
		})
	}
}
