package coordinator

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger discards logs unless FUSEBOX_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("FUSEBOX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testConfig is a coordinator on loopback port 0 everywhere, embedded etcd
// in a temp dir.
func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Name = "coordinator-" + filepath.Base(t.TempDir())
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedEtcdURL = "http://127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.ShutdownTimeout = 2 * time.Second
	return cfg
}

// testOptions are fast elections, a silent etcd, quick gossip and ticks.
func testOptions(extra ...Option) []Option {
	opts := []Option{
		WithLogger(testLogger()),
		WithEmbeddedEtcd(func(c *embedded.Config) {
			*c = embedded.TestConfig(c.Dir)
			c.ClientURL = "http://127.0.0.1:0"
		}),
		WithGossip(func(g *gossip.Config) {
			g.GossipInterval = 50 * time.Millisecond
			g.ProbeInterval = 200 * time.Millisecond
			g.PushPullInterval = time.Second
		}),
		WithTickInterval(50 * time.Millisecond),
	}
	return append(opts, extra...)
}

// startCoordinator starts a coordinator and closes it in t.Cleanup.
func startCoordinator(t testing.TB, cfg Config, opts ...Option) *Coordinator {
	t.Helper()
	c, err := New(cfg, testOptions(opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tokenCreds sends a bearer token over plaintext (tests only).
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

// adminClient dials the coordinator's Admin API, with token when not empty.
func adminClient(t testing.TB, addr, token string, extra ...grpc.DialOption) fuseboxv1.AdminClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(token)))
	}
	opts = append(opts, extra...)
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fuseboxv1.NewAdminClient(conn)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// writeTokens writes a tokens file and returns its path.
func writeTokens(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	adminToken  = "admin-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef"
	testTokens  = "# test tokens\nadmin " + adminToken + " ops-admin\nviewer " + viewerToken + "\n"
)

// clientFor returns a new etcd client of c's etcd: another writer than the
// coordinator.
func clientFor(c *Coordinator) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// otherWriter returns clientFor(c) and a store on it under c's prefix:
// another writer than the coordinator. Both close when the test ends.
func otherWriter(t testing.TB, c *Coordinator) (*clientv3.Client, *store.Store) {
	t.Helper()
	cli, err := clientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	other, err := store.New(store.Config{Client: cli, Prefix: DefaultEtcdPrefix})
	if err != nil {
		t.Fatal(err)
	}
	return cli, other
}

// metricValue returns the value of the series of name with exactly labels
// (a counter, gauge or untyped), failing the test when there is none.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				return m.GetUntyped().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// seedHistory gives dep a history, as if a node had reported it for two
// seconds (its series began before the coordinator did: its first row is a
// baseline, the others add 10 calls each).
func seedHistory(c *Coordinator, dep string) {
	now := c.clock.Now()
	since := now.Add(-time.Hour).UnixMilli()
	for i := range 20 {
		at := now.Add(-time.Duration(20-i) * 100 * time.Millisecond)
		c.history.ObserveRow(at, sharedstate.NodeWindow{Node: "seed-node", Dependency: dep, Seq: uint64(i + 1),
			Counts: sharedstate.Counts{FirstAttempts: 10, Successes: 10},
			Cumulative: sharedstate.Cumulative{Counts: sharedstate.Counts{FirstAttempts: uint64(10 * i), Successes: uint64(10 * i)},
				Since: since, At: at.UnixMilli()}}, 10*time.Second)
	}
}
