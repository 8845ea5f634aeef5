package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/scale"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Ports inside the namespaces (each has its own addresses).
const (
	gossipPort      = 7946
	agentHTTPPort   = 7951
	coordGRPCPort   = 7960
	coordHTTPPort   = 7961
	etcdClientPort  = 2379
	etcdPeerPort    = 2380
	processStopWait = 15 * time.Second
)

// soakRun is the run inside the ctl namespace.
type soakRun struct {
	cfg   innerConfig
	lab   Lab
	sched Schedule
	m     *monitor
	out   *syncWriter
	hc    *http.Client

	etcd        []*fleet.Process
	coordinator *fleet.Process
	agents      []*fleet.Process
	sockets     []string
	endpoints   []string
	st          *store.Store
	closeStore  func()

	loadStart string // load average when the run started

	mu         sync.Mutex
	goroutines map[string]int64 // the last go_goroutines scraped, by process
	stopping   bool             // the run is stopping its processes: their exits are expected
}

// syncWriter serialises writes to the run's output.
type syncWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (r *soakRun) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%s %s\n", fmtOffset(time.Since(r.m.start)), fmt.Sprintf(format, args...))
}

// RunInner is the `inner` mode: the run itself, in the ctl namespace,
// configured by the file the outer process wrote. It returns the exit
// code: 0 no violation, 1 violations, 3 the soak itself failed.
func RunInner(ctx context.Context, cfgPath string) int {
	out := &syncWriter{w: os.Stdout}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(out, "soak:", err)
		return exitTrouble
	}
	var ic innerConfig
	if err := json.Unmarshal(b, &ic); err != nil {
		fmt.Fprintln(out, "soak:", err)
		return exitTrouble
	}
	sched, err := NewSchedule(ic.plan())
	if err != nil {
		fmt.Fprintln(out, err)
		return exitTrouble
	}
	r := &soakRun{cfg: ic, lab: Lab{Prefix: ic.Prefix, Agents: ic.Agents, EtcdMembers: etcdMembers}, sched: sched, out: out,
		hc:         &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}},
		goroutines: map[string]int64{}}
	r.m = newMonitor(time.Now(), out, ic.Agents)
	code := r.run(ctx)
	return code
}

func (r *soakRun) run(ctx context.Context) int {
	cfg := r.cfg
	fmt.Fprintf(r.out, "soak: seed %d (SEED=%d reproduces the schedule); %v; %d agents (%d sentinels never killed), %d etcd members, 1 coordinator\n",
		cfg.Seed, cfg.Seed, cfg.Duration, cfg.Agents, cfg.Sentinels, etcdMembers)
	r.loadStart = scale.LoadAvg()
	fmt.Fprintf(r.out, "soak: machine %s, load average %s; run directory %s\n", scale.Machine(), r.loadStart, cfg.RunDir)
	var counts []string
	for _, k := range Kinds {
		counts = append(counts, fmt.Sprintf("%d %s", r.sched.Count(k), k))
	}
	fmt.Fprintf(r.out, "soak: schedule: %s, %d writes (the whole schedule: %s)\n", strings.Join(counts, ", "), len(r.sched.Writes), filepath.Join(cfg.RunDir, "schedule.txt"))
	os.WriteFile(filepath.Join(cfg.RunDir, "schedule.txt"), []byte(r.sched.Table()), 0o600)
	if cfg.Verbose {
		fmt.Fprint(r.out, r.sched.Table())
	}
	defer r.stopAll()
	setup := time.Now()
	if err := r.startEtcd(ctx); err != nil {
		fmt.Fprintln(r.out, err)
		return exitTrouble
	}
	if err := r.startCoordinator(ctx); err != nil {
		fmt.Fprintln(r.out, err)
		return exitTrouble
	}
	if err := r.startAgents(ctx); err != nil {
		fmt.Fprintln(r.out, err)
		return exitTrouble
	}
	fmt.Fprintf(r.out, "soak: etcd, coordinator and %d agents up in %v\n", cfg.Agents, time.Since(setup).Round(100*time.Millisecond))

	deps := map[string]*depServer{}
	var depList []*depServer
	for _, name := range []string{DepHealthy, DepDead, DepOps} {
		d, err := startDepServer(name)
		if err != nil {
			fmt.Fprintln(r.out, err)
			return exitTrouble
		}
		defer d.close()
		deps[name] = d
		depList = append(depList, d)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	// The clock of the run starts with the traffic.
	r.m.mu.Lock()
	r.m.start = time.Now()
	r.m.mu.Unlock()
	t0 := r.m.start
	for i, a := range r.agents {
		goRun(func() { observe(runCtx, r.m, a, r.sockets[i]) })
	}
	cl, err := startCallers(runCtx, r.m, r.sockets, depList, cfg.Rate, cfg.CallDeadline)
	if err != nil {
		fmt.Fprintln(r.out, err)
		return exitTrouble
	}
	goRun(func() { r.sampleLoop(runCtx) })
	goRun(func() { r.pollEtcd(runCtx) })
	goRun(func() {
		ctxtime.Every(runCtx, time.Second, func() { r.m.tick(time.Now()) })
	})
	goRun(func() { r.progress(runCtx) })
	goRun(func() {
		d := deps[DepDead]
		if !ctxtime.Sleep(runCtx, time.Until(t0.Add(cfg.Warmup/2))) {
			return
		}
		d.set(modeFailing)
		r.m.deadAt(time.Now())
		r.logf("dependency %q fails from now on (503)", DepDead)
		if !ctxtime.Sleep(runCtx, time.Until(t0.Add(cfg.Duration/2))) {
			return
		}
		d.set(modeDead)
		r.logf("dependency %q is dead from now on (connections refused)", DepDead)
	})
	byKind := map[Kind][]Fault{}
	for _, f := range r.sched.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	for _, k := range Kinds {
		goRun(func() {
			for _, f := range byKind[k] {
				if !ctxtime.Sleep(runCtx, time.Until(t0.Add(f.At))) {
					return
				}
				r.inject(runCtx, t0, f)
			}
		})
	}
	goRun(func() { r.writer(runCtx, t0) })

	interrupted := !ctxtime.Sleep(ctx, time.Until(t0.Add(cfg.Duration)))
	end := time.Now()
	r.m.tick(end)
	cancel()
	cl.stop()
	wg.Wait()
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.stopAll()
	if interrupted {
		fmt.Fprintln(r.out, "soak: interrupted; the summary covers the run so far")
	}
	r.m.mu.Lock()
	csv := r.m.trends.CSV(r.m.start)
	r.m.mu.Unlock()
	os.WriteFile(filepath.Join(cfg.RunDir, "resources.csv"), []byte(csv), 0o600)
	sum := r.summary(end, deps)
	fmt.Fprint(r.out, sum)
	os.WriteFile(filepath.Join(cfg.RunDir, "summary.txt"), []byte(sum), 0o600)
	r.m.mu.Lock()
	nv, nt := len(r.m.violations), len(r.m.errors)
	r.m.mu.Unlock()
	switch {
	case nv > 0:
		return exitViolations
	case nt > 0:
		return exitTrouble
	}
	return 0
}

// exited is every process's exit callback.
func (r *soakRun) exited(p *fleet.Process, incarnation int, expected bool, err error) {
	r.mu.Lock()
	expected = expected || r.stopping
	r.mu.Unlock()
	if strings.HasPrefix(p.Name(), "agent-") && !expected {
		r.m.agentDown(p.Name())
	}
	detail := fmt.Sprintf("incarnation %d exited by itself: %v (log: %s)", incarnation, err, p.LogPath())
	r.m.exited(time.Now(), p.Name(), expected, detail)
}

func (r *soakRun) newProcess(name string, n Node, argv []string) (*fleet.Process, error) {
	return fleet.NewProcess(fleet.ProcessConfig{Name: name, NetNS: r.lab.NS(n), Argv: argv,
		Log: filepath.Join(r.cfg.RunDir, name+".log"), Exited: r.exited})
}

// startEtcd starts the members and waits until the cluster serves.
func (r *soakRun) startEtcd(ctx context.Context) error {
	var names, peers []string
	for i := range etcdMembers {
		n := Node{RoleEtcd, i}
		names = append(names, n.String())
		peers = append(peers, fmt.Sprintf("http://%s:%d", r.lab.Addr(n), etcdPeerPort))
		r.endpoints = append(r.endpoints, fmt.Sprintf("http://%s:%d", r.lab.Addr(n), etcdClientPort))
	}
	ic := initialCluster(names, peers)
	for i := range etcdMembers {
		n := Node{RoleEtcd, i}
		p, err := r.newProcess(n.String(), n, []string{r.cfg.Self, "etcd-member",
			"-name", names[i], "-dir", filepath.Join(r.cfg.RunDir, names[i]),
			"-client-url", r.endpoints[i], "-peer-url", peers[i],
			"-initial-cluster", ic, "-token", r.cfg.Prefix})
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		r.etcd = append(r.etcd, p)
	}
	cli, err := store.Dial(ctx, store.ClientOptions{Endpoints: r.endpoints})
	if err != nil {
		return err
	}
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		cli.Close()
		return err
	}
	r.st, r.closeStore = st, func() { cli.Close() }
	wctx, cancel := context.WithTimeout(ctx, etcdStartTimeout)
	defer cancel()
	for {
		if _, err := readDesired(wctx, st, time.Now()); err == nil {
			return nil
		} else if wctx.Err() != nil {
			return fmt.Errorf("soak: etcd did not serve within %v: %v (logs: %s)", etcdStartTimeout, err, r.etcd[0].LogPath())
		}
		if !ctxtime.Sleep(wctx, 200*time.Millisecond) {
			return fmt.Errorf("soak: etcd did not serve within %v (logs: %s)", etcdStartTimeout, r.etcd[0].LogPath())
		}
	}
}

func (r *soakRun) coordAddr(port int) string {
	return fmt.Sprintf("%s:%d", r.lab.Addr(Node{Role: RoleCoordinator}), port)
}

// startCoordinator starts the coordinator and waits for its /healthz.
func (r *soakRun) startCoordinator(ctx context.Context) error {
	n := Node{Role: RoleCoordinator}
	var err error
	r.coordinator, err = r.newProcess("coordinator", n, []string{filepath.Join(r.cfg.Bin, "fusebox-coordinator"),
		"--name", "coordinator", "--etcd", strings.Join(r.endpoints, ","),
		"--grpc-addr", r.coordAddr(coordGRPCPort), "--http-addr", r.coordAddr(coordHTTPPort),
		"--gossip-addr", r.coordAddr(gossipPort), "--keyring-file", r.cfg.Keyring,
		"--tokens-file", r.cfg.Tokens, "--log-format", "json"})
	if err != nil {
		return err
	}
	if err := r.coordinator.Start(); err != nil {
		return err
	}
	return r.waitHTTP(ctx, "coordinator", "http://"+r.coordAddr(coordHTTPPort)+"/healthz", r.coordinator)
}

func (r *soakRun) agentAddr(i, port int) string {
	return fmt.Sprintf("%s:%d", r.lab.Addr(Node{RoleAgent, i}), port)
}

// startAgents starts every agent and waits until each is ready.
func (r *soakRun) startAgents(ctx context.Context) error {
	var joins []string
	for i := range r.cfg.Agents {
		joins = append(joins, r.agentAddr(i, gossipPort))
	}
	sockDir := filepath.Join(r.cfg.RunDir, "s")
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	for i := range r.cfg.Agents {
		n := Node{RoleAgent, i}
		sock := filepath.Join(sockDir, fmt.Sprintf("a%d.sock", i))
		cfg := agent.DefaultConfig()
		cfg.Name, cfg.Zone = n.String(), fmt.Sprintf("z%d", i%2+1)
		cfg.DataDir = filepath.Join(r.cfg.RunDir, n.String())
		cfg.GossipAddr, cfg.KeyringFile = r.agentAddr(i, gossipPort), r.cfg.Keyring
		cfg.Join, cfg.Etcd = joins, r.endpoints
		cfg.Socket, cfg.GRPCAddr, cfg.HTTPAddr = sock, "", r.agentAddr(i, agentHTTPPort)
		cfg.LogFormat, cfg.LogLevel = "json", "info"
		p, err := r.newProcess(n.String(), n, append([]string{filepath.Join(r.cfg.Bin, "fusebox-agent")}, fleet.Args(cfg)...))
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		r.agents = append(r.agents, p)
		r.sockets = append(r.sockets, sock)
	}
	for i, p := range r.agents {
		if err := r.waitHTTP(ctx, p.Name(), "http://"+r.agentAddr(i, agentHTTPPort)+"/readyz", p); err != nil {
			return err
		}
		_, inc, started := p.Running()
		r.m.agentUp(p.Name(), inc, started)
	}
	return nil
}

// waitHTTP waits until url answers 200, p exits or 2 minutes pass.
func (r *soakRun) waitHTTP(ctx context.Context, what, url string, p *fleet.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	last := ""
	for {
		if pid, _, _ := p.Running(); pid == 0 {
			return fmt.Errorf("soak: %s exited at start (log: %s)", what, p.LogPath())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := r.hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if !ctxtime.Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("soak: %s not ready within 2 minutes: %s (log: %s)", what, last, p.LogPath())
		}
	}
}

// stopAll stops every process (SIGTERM, then SIGKILL after a grace) and
// closes the etcd client. It is idempotent.
func (r *soakRun) stopAll() {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	var wg sync.WaitGroup
	stop := func(ps ...*fleet.Process) {
		for _, p := range ps {
			if p == nil {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop(syscall.SIGTERM, processStopWait) }()
		}
		wg.Wait()
	}
	stop(r.agents...)
	stop(r.coordinator)
	stop(r.etcd...)
	if r.closeStore != nil {
		r.closeStore()
		r.closeStore = nil
	}
}
