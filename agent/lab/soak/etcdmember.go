package soak

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// EtcdMember configures one member of the soak's etcd cluster: etcd's own
// server (go.etcd.io/etcd/server/v3/embed, the version the store's client
// is built against) in a process of its own, so that it can be killed and
// restarted like a real member.
type EtcdMember struct {
	// Name, Dir (data directory), ClientURL and PeerURL of the member
	// (required); InitialCluster lists every member as name=peerURL,…
	// (required); Token is the cluster token (required).
	Name, Dir, ClientURL, PeerURL, InitialCluster, Token string
}

// Validate names every missing or malformed field.
func (m EtcdMember) Validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"name", m.Name}, {"dir", m.Dir}, {"initial-cluster", m.InitialCluster}, {"token", m.Token}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("soak: etcd member: %s is required", f.name))
		}
	}
	for _, f := range []struct{ name, v string }{{"client-url", m.ClientURL}, {"peer-url", m.PeerURL}} {
		if u, err := url.Parse(f.v); err != nil || u.Scheme != "http" || u.Host == "" {
			errs = append(errs, fmt.Errorf("soak: etcd member: %s must be http://host:port, got %q", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// RunEtcdMember runs the member until ctx ends (or etcd fails). It logs
// "etcd member ready" on stderr once the member serves (a quorum of the
// cluster is up).
//
// The settings are production ones (100 ms heartbeat, 1 s election
// timeout, history compacted every 5 minutes) except fsync: the soak's
// crashes are process kills, after which the kernel still holds every
// write, so fsync would only load the shared disk.
func RunEtcdMember(ctx context.Context, m EtcdMember) error {
	if err := m.Validate(); err != nil {
		return err
	}
	cu, _ := url.Parse(m.ClientURL)
	pu, _ := url.Parse(m.PeerURL)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, m.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken = m.InitialCluster, m.Token
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the data dir holds a member
	cfg.TickMs, cfg.ElectionMs = 100, 1000
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "5m"
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("soak: etcd member %s: %w", m.Name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd member ready: %s %s\n", m.Name, m.ClientURL)
	case err := <-e.Err():
		return fmt.Errorf("soak: etcd member %s: %w", m.Name, err)
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("soak: etcd member %s: %w", m.Name, err)
	case <-ctx.Done():
		return nil
	}
}

// initialCluster returns name=peerURL,… for members.
func initialCluster(names, peers []string) string {
	parts := make([]string, len(names))
	for i := range names {
		parts[i] = names[i] + "=" + peers[i]
	}
	return strings.Join(parts, ",")
}

// etcdStartTimeout bounds the cluster's first start.
const etcdStartTimeout = 2 * time.Minute
