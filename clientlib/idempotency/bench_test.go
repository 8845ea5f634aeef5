package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/internal/storetest"
)

// BenchmarkMiddleware: the cost per request of the middleware over the
// in-memory store, for a new key (reserve, run, complete) and for a replay
// (one lookup), with the bare handler as the baseline of the same run.
func BenchmarkMiddleware(b *testing.B) {
	storetest.BenchBare(b)
	storetest.BenchNewKeyAndReplay(b, "memory", func(b *testing.B) http.Handler {
		s, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		d, err := idempotency.New(s)
		if err != nil {
			b.Fatal(err)
		}
		return d.Middleware(storetest.BenchHandler())
	})
}
