package embedded_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxForTest(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  embedded.Config
		want []string // substrings of the error; none = valid
	}{
		{name: "zero with dir", cfg: embedded.Config{Dir: "/tmp/x"}},
		{name: "test config", cfg: embedded.TestConfig("/tmp/x")},
		{name: "unix client", cfg: embedded.Config{Dir: "/tmp/x", ClientURL: "unix:///tmp/x/etcd.sock"}},
		{
			name: "everything wrong",
			cfg: embedded.Config{
				ClientURL:    "https://127.0.0.1:0",
				PeerURL:      "unix:///tmp/peer.sock",
				TickMs:       100,
				ElectionMs:   200,
				LogLevel:     "loud",
				StartTimeout: -time.Second,
			},
			want: []string{"Dir is empty", "ClientURL", "PeerURL", "ElectionMs (200)", `LogLevel "loud"`, "StartTimeout"},
		},
		{name: "no port", cfg: embedded.Config{Dir: "d", ClientURL: "http://127.0.0.1"}, want: []string{"missing port"}},
		{name: "hostname", cfg: embedded.Config{Dir: "d", ClientURL: "http://example.com:2379"}, want: []string{"IP address or localhost"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, missing %q", err, w)
				}
			}
		})
	}
}

func TestStartPutGetStopRestart(t *testing.T) {
	srv := embeddedtest.Start(t)
	eps := srv.Endpoints()
	if len(eps) != 1 {
		t.Fatalf("Endpoints() = %v", eps)
	}
	u, err := url.Parse(eps[0])
	if err != nil || u.Port() == "0" || u.Port() == "" || u.Hostname() != "127.0.0.1" {
		t.Fatalf("Endpoints() = %v: want a resolved loopback port", eps)
	}
	cli := embeddedtest.Client(t, srv)
	ctx := ctxForTest(t)
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	srv.Stop() // idempotent
	if srv.Running() {
		t.Fatal("Running() after Stop")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = cli.Get(short, "k")
	cancel()
	if err == nil {
		t.Fatal("Get succeeded while etcd was stopped")
	}

	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if got := srv.Endpoints(); got[0] != eps[0] {
		t.Fatalf("Endpoints after restart = %v, want %v", got, eps)
	}
	// The old client reconnects by itself; the data survived.
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("Get after restart = %v, want v1", resp.Kvs)
	}

	srv.Close()
	srv.Close()
	if err := srv.Restart(ctx); !errors.Is(err, embedded.ErrClosed) {
		t.Fatalf("Restart after Close = %v, want embedded.ErrClosed", err)
	}
}

func TestTwoServersSideBySide(t *testing.T) {
	a, b := embeddedtest.Start(t), embeddedtest.Start(t)
	if a.Endpoints()[0] == b.Endpoints()[0] {
		t.Fatalf("both servers on %v", a.Endpoints())
	}
	ca, cb := embeddedtest.Client(t, a), embeddedtest.Client(t, b)
	ctx := ctxForTest(t)
	if _, err := ca.Put(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	resp, err := cb.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("server b sees server a's key: %v", resp.Kvs)
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.ClientURL = "unix://" + dir + "/etcd.sock" })
	cli := embeddedtest.Client(t, srv)
	if _, err := cli.Put(ctxForTest(t), "k", "v"); err != nil {
		t.Fatalf("Put over %v: %v", srv.Endpoints(), err)
	}
}

func TestStartFailsCleanlyWhenPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := embedded.TestConfig(t.TempDir())
	cfg.ClientURL = "http://" + l.Addr().String()
	srv, err := embedded.Start(ctxForTest(t), cfg)
	if err == nil {
		srv.Close()
		t.Fatal("embedded.Start on a taken port succeeded")
	}
	t.Logf("embedded.Start on a taken port: %v", err)
	// goleak in TestMain checks that nothing was left running.
}

// TestStartHonoursContext starts an etcd that cannot be ready before its
// first raft tick, 1 s away, with a context that ends after 200 ms: a
// Start that ignores its context returns a ready server, one that watches
// it returns the context's error. (etcd's Close waits for the server to be
// serving, so Start returns only after that tick either way.)
func TestStartHonoursContext(t *testing.T) {
	cfg := embedded.TestConfig(t.TempDir())
	cfg.TickMs, cfg.ElectionMs = 1000, 5000 // a single member elects itself on its first tick
	cfg.StartTimeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	srv, err := embedded.Start(ctx, cfg)
	took := time.Since(start)
	if err == nil {
		srv.Close()
		t.Fatalf("Start returned a ready server after %v although its context ended after 200ms: the context was ignored", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("embedded.Start with a context that ends = %v (after %v), want context.DeadlineExceeded", err, took)
	}
	t.Logf("Start returned %v after %v", err, took)
}
