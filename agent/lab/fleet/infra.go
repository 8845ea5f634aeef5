package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// startEtcd starts the embedded etcd in dir (embedded.TestConfig: fast
// elections, no fsync, free ports).
func startEtcd(ctx context.Context, dir string) (*embedded.Server, error) {
	srv, err := embedded.Start(ctx, embedded.TestConfig(dir))
	if err != nil {
		return nil, fmt.Errorf("fleet: embedded etcd: %w", err)
	}
	return srv, nil
}

// writePolicy writes p as the fleet default to the etcd at endpoints, as
// an operator would (fuseboxctl policy set _default).
func writePolicy(ctx context.Context, endpoints []string, p sharedstate.Policy) error {
	cli, err := store.Dial(ctx, store.ClientOptions{Endpoints: endpoints})
	if err != nil {
		return fmt.Errorf("fleet: etcd client: %w", err)
	}
	defer cli.Close()
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if _, err := st.PutPolicyOf(ctx, sharedstate.DefaultPolicyName, p, store.WriteOptions{Actor: "fleet"}); err != nil {
		return fmt.Errorf("fleet: write the policy: %w", err)
	}
	return nil
}

// startCoordinator starts a coordinator on etcd with every listener on
// loopback port 0 and short gossip and tick intervals, then tune's
// changes and more options.
func startCoordinator(ctx context.Context, etcd []string, tune func(*coordinator.Config), more []coordinator.Option) (*coordinator.Coordinator, error) {
	cfg := coordinator.DefaultConfig()
	cfg.Name = "coordinator"
	cfg.DataDir = ""
	cfg.Etcd = etcd
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 2 * time.Second
	if tune != nil {
		tune(&cfg)
	}
	opts := []coordinator.Option{
		coordinator.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		coordinator.WithGossip(func(g *gossip.Config) {
			g.GossipInterval, g.ProbeInterval, g.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
		}),
		coordinator.WithTickInterval(50 * time.Millisecond)}
	c, err := coordinator.New(cfg, append(opts, more...)...)
	if err != nil {
		return nil, fmt.Errorf("fleet: coordinator: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("fleet: coordinator: %w", err)
	}
	return c, nil
}
