package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// stopGrace is how long past its shutdown timeout a process that was sent
// SIGTERM gets before SIGKILL.
const stopGrace = 5 * time.Second

// Fleet is N real agents and, when asked, an embedded etcd and a
// coordinator (Config). Its methods are safe for concurrent use.
type Fleet struct {
	cfg     Config
	net     *simnet.Network // nil off the simulated network
	etcd    *embedded.Server
	coord   *coordinator.Coordinator
	sockDir string       // the agents' unix sockets ("" on the simulated network)
	hc      *http.Client // reads the processes' /metrics
	// memo is the in-process agents' shared memo of signature checks:
	// every agent receives the same signed batches, and one check of
	// each is enough in one process.
	memo   *gossip.VerifyMemo
	nsHTTP sync.Map // namespace -> *http.Client that dials inside it

	mu        sync.Mutex
	members   []*member // nil while one is being (re)started
	addrs     []string  // each agent's gossip address ("" before its first start)
	started   time.Time // when the first agent started
	closeOnce sync.Once
}

// member is one running agent: in process, or a process.
type member struct {
	cfg    agent.Config
	agent  *agent.Agent    // in process
	inside agentopt.Inside // in process
	proc   *AgentProcess   // a process
	conn   *grpc.ClientConn
	client fuseboxv1.AgentClient
}

// New starts the etcd, the coordinator and the agents Config asks for and
// waits until every agent counts every other one alive and is ready, or
// ctx ends. On error it closes what it started.
func New(ctx context.Context, cfg Config) (_ *Fleet, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &Fleet{cfg: cfg, memo: gossip.NewVerifyMemo()}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if cfg.Sim != nil {
		if f.net, err = simnet.New(*cfg.Sim); err != nil {
			return nil, err
		}
	} else if f.sockDir, err = os.MkdirTemp("", "fbf"); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if cfg.Binary != "" {
		f.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}, Timeout: ScrapeTimeout}
	}
	if cfg.Etcd {
		if f.etcd, err = startEtcd(ctx, filepath.Join(cfg.Dir, "etcd")); err != nil {
			return nil, err
		}
	}
	if eps := f.Etcd(); eps != nil {
		if cfg.Policy != nil {
			if err := writePolicy(ctx, eps, *cfg.Policy); err != nil {
				return nil, err
			}
		}
		if cfg.Coordinator {
			if f.coord, err = startCoordinator(ctx, eps, cfg.CoordinatorTune, cfg.CoordinatorOptions); err != nil {
				return nil, err
			}
		}
	}
	f.members, f.addrs = make([]*member, cfg.N), make([]string, cfg.N)
	// The seeds one after the other (each joins the ones before), then the
	// others StartParallel at a time.
	seeds := min(cfg.Seeds, cfg.N)
	for i := range seeds {
		if err := f.startAt(ctx, i); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, cfg.N)
	sem := make(chan struct{}, StartParallel)
	for i := seeds; i < cfg.N; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f.startAt(ctx, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := f.WaitMembership(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// agentConfig is agent i's configuration: the fleet's base, then Tune.
func (f *Fleet) agentConfig(i int, gossipAddr string) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.Name = Name(i)
	cfg.Zone = "z1"
	cfg.DataDir = filepath.Join(f.cfg.Dir, cfg.Name)
	cfg.GossipAddr = gossipAddr
	cfg.GRPCAddr = ""
	if f.net != nil {
		cfg.Socket, cfg.HTTPAddr = "", ""
		// Simulated addresses are not loopback; the simulated network is
		// the process itself, so plaintext costs nothing a keyring would
		// protect (and saves CPU the large runs lack).
		cfg.InsecureGossip = true
	} else {
		cfg.Socket = filepath.Join(f.sockDir, fmt.Sprintf("%d.sock", i))
		cfg.HTTPAddr = ""
		if f.cfg.Binary != "" {
			cfg.HTTPAddr = "127.0.0.1:0" // WaitMembership reads /metrics
		}
		if ns := f.cfg.Namespaces; ns != nil {
			cfg.GossipAddr, cfg.HTTPAddr = ns.Addr(i)+":7946", ns.Addr(i)+":7951"
		}
	}
	cfg.Etcd = f.Etcd()
	f.mu.Lock()
	for s := range min(f.cfg.Seeds, len(f.members)) {
		if s != i && f.members[s] != nil {
			cfg.Join = append(cfg.Join, f.addrs[s])
		}
	}
	f.mu.Unlock()
	if f.cfg.Tune != nil {
		f.cfg.Tune(i, &cfg)
	}
	return cfg
}

// startAt starts agent i (at its old address on the simulated network) and
// puts it in the fleet.
func (f *Fleet) startAt(ctx context.Context, i int) error {
	f.mu.Lock()
	if f.started.IsZero() {
		f.started = time.Now()
	}
	addr := f.addrs[i]
	f.mu.Unlock()
	var m *member
	var err error
	if f.cfg.Binary != "" {
		m, err = f.startProcess(ctx, i)
	} else {
		m, err = f.startInProcess(ctx, i, addr)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members[i] = m
	switch {
	case m.proc != nil:
		f.addrs[i] = m.proc.GossipAddr()
	default:
		f.addrs[i] = m.agent.GossipAddr()
	}
	return nil
}

func (f *Fleet) startInProcess(ctx context.Context, i int, addr string) (*member, error) {
	gossipAddr := "127.0.0.1:0"
	var tr *simnet.Transport
	if f.net != nil {
		var err error
		if tr, err = f.net.NewTransport(addr); err != nil {
			return nil, err
		}
		gossipAddr = tr.Addr()
	}
	m := &member{cfg: f.agentConfig(i, gossipAddr)}
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	if f.cfg.Logger != nil {
		lg = f.cfg.Logger(i)
	}
	sim := agentopt.Sim{Attach: func(in agentopt.Inside) { m.inside = in }, VerifyMemo: f.memo}
	opts := []agent.Option{agent.WithLogger(lg)}
	if f.cfg.Clock != nil {
		opts = append(opts, agent.WithClock(f.cfg.Clock))
	}
	if f.cfg.Policy != nil && f.Etcd() == nil {
		opts = append(opts, agent.WithDefaultPolicy(*f.cfg.Policy))
	}
	if f.cfg.Options != nil {
		opts = append(opts, f.cfg.Options(i)...)
	}
	if tr != nil {
		sim.Transport, sim.Peers, sim.InProcessAPI = tr, f.registry, true
	}
	a, err := agent.New(m.cfg, append(opts, agentopt.WithSim(sim))...)
	if err != nil {
		if tr != nil {
			tr.Shutdown()
		}
		return nil, fmt.Errorf("fleet: %s: %w", m.cfg.Name, err)
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return nil, fmt.Errorf("fleet: %s: %w", m.cfg.Name, err)
	}
	m.agent = a
	if tr != nil {
		m.client = inProcessClient{m.inside.API}
		return m, nil
	}
	if err := m.dial(); err != nil {
		a.Close()
		return nil, err
	}
	return m, nil
}

func (f *Fleet) startProcess(ctx context.Context, i int) (*member, error) {
	cfg := f.agentConfig(i, "127.0.0.1:0")
	netns := ""
	if f.cfg.Namespaces != nil {
		netns = f.cfg.Namespaces.NS(i)
	}
	bin := f.cfg.Binary
	if f.cfg.BinaryOf != nil {
		if b := f.cfg.BinaryOf(i); b != "" {
			bin = b
		}
	}
	p, err := startAgentProcess(ctx, bin, netns, cfg, filepath.Join(f.cfg.Dir, cfg.Name+".log"))
	if err != nil {
		return nil, err
	}
	m := &member{cfg: p.Config(), proc: p}
	if err := m.dial(); err != nil {
		p.Stop(syscall.SIGKILL, 0)
		return nil, err
	}
	return m, nil
}

// dial makes m's client: gRPC over its unix socket.
func (m *member) dial() error {
	conn, err := grpc.NewClient("unix://"+m.cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("fleet: %s: dial %s: %w", m.cfg.Name, m.cfg.Socket, err)
	}
	m.conn, m.client = conn, fuseboxv1.NewAgentClient(conn)
	return nil
}

// stop stops m: Close in process, SIGTERM for a process (it leaves the
// gossip; SIGKILL after its shutdown timeout and a grace).
func (m *member) stop() {
	if m.conn != nil {
		m.conn.Close()
	}
	switch {
	case m.agent != nil:
		m.agent.Close()
	case m.proc != nil:
		m.proc.Stop(syscall.SIGTERM, m.cfg.ShutdownTimeout+stopGrace)
	}
}

// ChecksSaved is how many signature checks of its in-process agents the
// fleet's shared memo answered (gossip.VerifyMemo): checks each agent of a
// real fleet computes on its own host.
func (f *Fleet) ChecksSaved() uint64 { return f.memo.Hits() }

// registry lists the running agents' gossip addresses, as the etcd member
// registry lists the agents that started: on the simulated network agents
// join and reconcile membership through it as a production fleet does.
func (f *Fleet) registry() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, m := range f.members {
		if m != nil {
			out = append(out, f.addrs[i])
		}
	}
	return out
}

// Add starts one more agent (joining the seeds) and returns its index. It
// does not wait for membership.
func (f *Fleet) Add(ctx context.Context) (int, error) {
	f.mu.Lock()
	i := len(f.members)
	f.members, f.addrs = append(f.members, nil), append(f.addrs, "")
	f.mu.Unlock()
	return i, f.startAt(ctx, i)
}

// Restart stops agent i (it leaves the gossip, as on SIGTERM) and starts
// it again with the same name, data directory and socket (and, on the
// simulated network, address), joining through the seeds. It returns when
// the new agent has started; its Ready tells when it has joined.
func (f *Fleet) Restart(ctx context.Context, i int) error {
	f.mu.Lock()
	old := f.members[i]
	f.members[i] = nil
	f.mu.Unlock()
	if old != nil && old.proc != nil {
		if old.conn != nil {
			old.conn.Close()
		}
		if err := old.proc.Restart(ctx); err != nil {
			return err
		}
		m := &member{cfg: old.cfg, proc: old.proc}
		if err := m.dial(); err != nil {
			return err
		}
		f.mu.Lock()
		f.members[i], f.addrs[i] = m, m.proc.GossipAddr()
		f.mu.Unlock()
		return nil
	}
	if old != nil {
		old.stop()
	}
	return f.startAt(ctx, i)
}

// Close stops every agent (all at once, each leaving the gossip), then the
// coordinator, the etcd and the simulated network. Idempotent.
func (f *Fleet) Close() {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		members := append([]*member(nil), f.members...)
		for i := range f.members {
			f.members[i] = nil
		}
		f.mu.Unlock()
		var wg sync.WaitGroup
		for _, m := range members {
			if m != nil {
				wg.Go(m.stop)
			}
		}
		wg.Wait()
		if f.coord != nil {
			f.coord.Close()
		}
		if f.etcd != nil {
			f.etcd.Close()
		}
		if f.net != nil {
			f.net.Close()
		}
		if f.hc != nil {
			f.hc.CloseIdleConnections()
		}
		f.closeNSClients()
		if f.sockDir != "" {
			os.RemoveAll(f.sockDir)
		}
	})
}
