package embeddedtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Cluster is an etcd cluster of several members running in this process,
// for tests of what clients do when a member, the leader in particular,
// fails. Members use the test settings of embedded.TestConfig (10 ms ticks,
// 100 ms elections, no fsync, a silent log) on loopback. Its methods are
// safe for concurrent use.
//
//	cl := embeddedtest.StartCluster(t, 3) // closed in t.Cleanup
//	cli := cl.Client(t)                   // all members' endpoints
//	i := cl.WaitLeader(t, 10*time.Second) // the leader's index
//	cl.Kill(i)                            // as a crash: no leadership transfer
//	err := cl.Restart(i)                  // back on its data and URLs
type Cluster struct {
	members []*member
	before  goleak.Option // the goroutines that ran before the cluster
}

// member is one etcd of a Cluster.
type member struct {
	name, dir string
	peerURL   string // http://127.0.0.1:port
	initial   string // the initial cluster, name=peerURL,...
	token     string

	mu   sync.Mutex  // serializes Kill and Restart; guards etcd
	etcd *embed.Etcd // nil once killed

	// clientURL has the port the kernel picked at the first start, before
	// StartCluster returned; never written again (read without mu).
	clientURL string

	grpcMu sync.Mutex
	grpcs  []*grpc.Server // the running etcd's client-facing gRPC servers
}

// start starts m's etcd on its data directory (its client URL on port 0
// the first time, on the same port afterwards) and returns at once: a
// member is ready only once a quorum runs (ready waits for it).
func (m *member) start() error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cu := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	if m.clientURL != "" {
		cu.Host = strings.TrimPrefix(m.clientURL, "http://")
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = m.token
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "fatal"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ServiceRegister = func(gs *grpc.Server) {
		m.grpcMu.Lock()
		defer m.grpcMu.Unlock()
		m.grpcs = append(m.grpcs, gs)
	}
	e, err := embed.StartEtcd(cfg) // cleans up after itself on error
	if err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	m.etcd = e
	if m.clientURL == "" {
		m.clientURL = "http://" + e.Clients[0].Addr().String()
	}
	return nil
}

// ready waits until m's etcd serves, or timer fires.
func (m *member) ready(timer *time.Timer) error {
	select {
	case <-m.etcd.Server.ReadyNotify():
		return nil
	case err, ok := <-m.etcd.Err():
		if !ok || err == nil {
			err = errors.New("stopped")
		}
		return fmt.Errorf("member %s failed before it was ready: %w", m.name, err)
	case <-timer.C:
		return fmt.Errorf("member %s not ready after 30s", m.name)
	}
}

// StartCluster starts an n-member cluster in t.TempDir() and closes it in
// t.Cleanup. Client listeners use port 0; peer ports are picked free just
// before the start, and the whole start is retried on new ports if one was
// taken in between. It fails the test if the cluster has no leader within
// 30 s.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("embeddedtest: a cluster of %d members", n)
	}
	before := goleak.IgnoreCurrent()
	var lastErr error
	for attempt := range 3 {
		c, err := startCluster(filepath.Join(t.TempDir(), fmt.Sprint(attempt)), n)
		if err == nil {
			c.before = before
			t.Cleanup(c.Close)
			return c
		}
		lastErr = err
	}
	t.Fatalf("embeddedtest: %d-member etcd cluster: %v", n, lastErr)
	return nil
}

func startCluster(dir string, n int) (c *Cluster, err error) {
	peers := make([]string, n)
	for i := range peers {
		if peers[i], err = freeLoopbackPort(); err != nil {
			return nil, err
		}
	}
	var initial []string
	for i, p := range peers {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, p))
	}
	cl := &Cluster{}
	defer func() {
		if err != nil {
			cl.Close() // not c: a failing return sets c to nil first
		}
	}()
	c = cl
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), peerURL: "http://" + peers[i],
			initial: strings.Join(initial, ","), token: "embeddedtest-" + filepath.Base(dir)}
		m.dir = filepath.Join(dir, m.name)
		if err := m.start(); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for _, m := range c.members {
		if err := m.ready(timer); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// freeLoopbackPort returns 127.0.0.1:port with a port free a moment ago.
func freeLoopbackPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Endpoints returns every member's client URL, killed ones included (as an
// operator's --etcd list would).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL }

// EndpointsFirst returns Endpoints with member i's first: an --etcd list
// a component that wrongly used only the first endpoint would lose with
// member i.
func (c *Cluster) EndpointsFirst(i int) []string {
	out := []string{c.members[i].clientURL}
	for j, m := range c.members {
		if j != i {
			out = append(out, m.clientURL)
		}
	}
	return out
}

// Client returns a client of every member, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) *store.Client {
	t.Helper()
	return ClientOf(t, c.Endpoints()...)
}

// ClientOf returns a client of the given etcd endpoints (store.Dial's
// settings), closed in t.Cleanup.
func ClientOf(t testing.TB, endpoints ...string) *store.Client {
	t.Helper()
	cli, err := store.Dial(context.Background(), store.ClientOptions{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("embeddedtest: client of %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the index of the member the running members agree is the
// leader, or -1 when they do not agree (an election is under way) or the
// leader is not running.
func (c *Cluster) Leader() int {
	lead := uint64(0)
	for _, m := range c.members {
		e := m.running()
		if e == nil {
			continue
		}
		l := e.Server.Lead()
		if l == 0 || (lead != 0 && l != lead) {
			return -1
		}
		lead = l
	}
	for i, m := range c.members {
		if e := m.running(); e != nil && uint64(e.Server.MemberID()) == lead {
			return i
		}
	}
	return -1
}

// running returns m's etcd, nil once killed.
func (m *member) running() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// WaitLeader waits until the running members agree on a running leader
// and returns its index; it fails the test after d.
func (c *Cluster) WaitLeader(t testing.TB, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if i := c.Leader(); i >= 0 {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("embeddedtest: the cluster has no leader after %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Kill stops member i as a crash would: its client connections are cut
// (in-flight requests fail, watches and keep-alives break), and its raft
// stops at once, without handing leadership over as a graceful stop does,
// so that the others elect a new leader after an election timeout. Its
// data directory is kept for Restart. Killing a killed member does
// nothing.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd == nil {
		return
	}
	m.grpcMu.Lock()
	servers := m.grpcs
	m.grpcs = nil
	m.grpcMu.Unlock()
	for _, gs := range servers {
		gs.Stop()
	}
	e := m.etcd
	m.etcd = nil
	e.Server.HardStop()
	// Close releases listeners and goroutines; with raft stopped it
	// attempts no leadership transfer (no peer is connected any more).
	e.Close()
}

// Restart starts killed member i again on its data directory, peer and
// client URLs, and waits until it serves (which needs a quorum of members
// running) or 30 s pass. It fails if another process took one of its
// ports meanwhile. Restarting a running member does nothing.
func (c *Cluster) Restart(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		return nil
	}
	if err := m.start(); err != nil {
		return err
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	return m.ready(timer)
}

// Running reports whether member i runs.
func (c *Cluster) Running(i int) bool { return c.members[i].running() != nil }

// Close kills every member that still runs and waits for it. Close
// clients first (t.Cleanup does, for clients made after the cluster).
// Calling it again is harmless.
//
// etcd's peer HTTP servers do not cut the connections a request is still
// reading from when they shut down: those goroutines end by themselves
// within rafthttp's 5 s read timeout. Close waits for that, up to 10 s,
// so that the package's goleak check sees the cluster gone: it waits for
// every goroutine started since StartCluster (of the test's other parts
// too, which should be closed by then) to end, and returns after 10 s
// without failing (goleak then names what is left).
func (c *Cluster) Close() {
	for i := range c.members {
		c.Kill(i)
	}
	if c.before == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for goleak.Find(c.before) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}
