// Package embeddedtest starts an embedded etcd for a test and closes it
// when the test ends. It imports package testing, so only _test.go files
// may import it: production code links package embedded alone (`make
// verify` fails when a binary links package testing).
//
//	srv := embeddedtest.Start(t)          // t.TempDir(), closed in t.Cleanup
//	cli := embeddedtest.Client(t, srv)    // closed in t.Cleanup, before srv
package embeddedtest

import (
	"context"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Start starts a server with embedded.TestConfig in t.TempDir() on a free
// port and closes it in t.Cleanup. It fails the test if etcd does not start
// within 20 s. Use it from integration tests of any package.
func Start(t testing.TB, opts ...func(*embedded.Config)) *embedded.Server {
	t.Helper()
	cfg := embedded.TestConfig(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := embedded.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Client returns a client of s that is closed in t.Cleanup (before s, when
// s was started earlier in the same test, since cleanups run last in, first
// out).
func Client(t testing.TB, s *embedded.Server) *store.Client {
	t.Helper()
	c, err := s.NewClient()
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
