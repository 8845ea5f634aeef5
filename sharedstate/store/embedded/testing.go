package embedded

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StartForTest starts a server with TestConfig in t.TempDir() on a free
// port and closes it in t.Cleanup. It fails the test if etcd does not start
// within 20 s. Use it from integration tests of any package:
//
//	srv := embedded.StartForTest(t)
//	cli := embedded.ClientForTest(t, srv)
func StartForTest(t testing.TB, opts ...func(*Config)) *Server {
	t.Helper()
	cfg := TestConfig(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// ClientForTest returns a client of s that is closed in t.Cleanup (before
// s, when s was started earlier in the same test, since cleanups run last
// in, first out).
func ClientForTest(t testing.TB, s *Server) *clientv3.Client {
	t.Helper()
	c, err := s.NewClient()
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
