package redisstore_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/internal/storetest"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/redisstore"
)

// BenchmarkMiddleware: the cost per request of the middleware over Redis
// (a local redis-server, over its unix socket and over loopback TCP), for a
// new key (reserve, run, complete: two round trips) and for a replay (one),
// with the bare handler as the baseline of the same run.
func BenchmarkMiddleware(b *testing.B) {
	rs := startRedis(b, true)
	storetest.BenchBare(b)
	for name, rdb := range map[string]func() *redis.Client{
		"redis-unix": func() *redis.Client { return rs.client(b) },
		"redis-tcp":  func() *redis.Client { return rs.tcpClient(b) },
	} {
		storetest.BenchNewKeyAndReplay(b, name, func(b *testing.B) http.Handler {
			d, err := idempotency.New(redisstore.New(rdb(), redisstore.WithPrefix(prefix())))
			if err != nil {
				b.Fatal(err)
			}
			return d.Middleware(storetest.BenchHandler())
		})
	}
}
