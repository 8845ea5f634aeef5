package clientlib

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	gbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Version is sent to the agent in Hello.client_version.
const Version = "clientlib/0.1"

// Client is one service's link to Fusebox: it holds the session with the
// local agent, the local fallback breaker and the handles of the
// dependencies it calls. Make one per process with New and Close it at
// shutdown. All methods are safe for concurrent use.
type Client struct {
	cfg      Config
	epoch    time.Time // mono() origin
	service  string
	random   func() uint64
	nstripes int
	engine   *sharedstate.Engine
	agent    fuseboxv1.AgentClient // nil with NoAgent or in process
	conn     *grpc.ClientConn
	fleet    fleet // the agent's session, or its engine in process
	metrics  *metrics
	// fallback: the fleet may go away, so the local breaker is fed every
	// dependency's counts (not only those the fleet refused).
	fallback bool

	depMu     sync.Mutex // guards creation, forgetting, ndeps and forgotten
	deps      atomic.Pointer[map[string]*depState]
	ndeps     int
	forgotten []*depState // forgotten since the last flush, which reports their last counts
	capHit    atomic.Bool // MaxDependencies was reached once (said once in the log)

	tokens   sync.Pool
	tokenSeq atomic.Uint32

	events        chan any
	eventsDropped atomic.Uint64

	ctx       context.Context
	cancel    context.CancelFunc
	flushStop context.CancelFunc // the flusher's last flush, then it returns
	flushDone chan struct{}
	wg        sync.WaitGroup // flusher, session, dispatcher
	closeOnce sync.Once
	done      chan struct{}
}

// New returns a Client configured by cfg, its empty fields taking their
// defaults (New(Config{}) is the zero-config client). It does not wait for
// the agent: calls work at once, on the local breaker until the agent's
// snapshots arrive. It fails only on an invalid Config or a Registerer
// refusing the metrics; then it has started nothing.
func New(cfg Config) (*Client, error) { return build(cfg, nil) }

// build is New, or NewInProcess when eng is not nil.
func build(cfg Config, eng Engine) (c *Client, err error) {
	if eng != nil {
		cfg.NoAgent = true // no session: the engine is the fleet
	}
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c = &Client{
		cfg: cfg, service: cfg.Service, random: cfg.Random,
		nstripes: stripeCount(), flushDone: make(chan struct{}),
		done: make(chan struct{}),
	}
	c.epoch = time.Now()
	empty := map[string]*depState{}
	c.deps.Store(&empty)
	c.tokens.New = c.newToken
	if cfg.OnStateChange != nil || cfg.OnAgentChange != nil {
		c.events = make(chan any, 1024)
	}
	c.engine, err = sharedstate.NewEngine(sharedstate.EngineConfig{
		Node:            cfg.Instance,
		Clock:           sharedstate.SystemClock{},
		MaxDependencies: cfg.MaxDependencies,
		OnChange:        c.onEngineChange,
	})
	if err != nil {
		return nil, fmt.Errorf("clientlib: local breaker: %w", err)
	}
	c.metrics = newMetrics(c)
	if cfg.Registerer != nil {
		if err := c.metrics.register(cfg.Registerer); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				c.metrics.unregister(cfg.Registerer)
			}
		}()
	}
	if eng != nil {
		c.fleet = newEngineFleet(c, eng)
	} else {
		c.fleet, c.fallback = newSession(c), true
	}
	if eng == nil && !cfg.NoAgent {
		target, _ := agentTarget(cfg.AgentAddress) // validated above
		opts := append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			// Reconnect the transport at the session's pace, not gRPC's
			// default (up to 2 minutes between attempts).
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: gbackoff.Config{BaseDelay: cfg.ReconnectMin, Multiplier: 1.6, Jitter: 0.2,
					MaxDelay: cfg.ReconnectMax},
				MinConnectTimeout: time.Second,
			}),
		}, cfg.DialOptions...)
		c.conn, err = grpc.NewClient(target, opts...)
		if err != nil {
			return nil, fmt.Errorf("clientlib: agent connection to %s: %w", cfg.AgentAddress, err)
		}
		c.agent = fuseboxv1.NewAgentClient(c.conn)
	}
	for _, name := range cfg.Dependencies {
		c.depState(name)
	}

	c.ctx, c.cancel = context.WithCancel(context.Background())
	if c.events != nil {
		c.wg.Go(c.dispatch)
	}
	// The flusher feeds the local breaker and queues deltas for the agent
	// every FlushInterval, and ticks the local breaker.
	flushCtx, flushStop := context.WithCancel(context.Background())
	c.flushStop = flushStop
	c.wg.Go(func() {
		defer close(c.flushDone)
		ctxtime.Every(flushCtx, cfg.FlushInterval, c.flush)
		c.flush()
	})
	c.fleet.start(c.ctx)
	return c, nil
}

// mono returns the time since the client's epoch: one monotonic clock read
// (time.Now reads two clocks), for measuring attempts.
func (c *Client) mono() time.Duration { return time.Since(c.epoch) }

func stripeCount() int {
	n := 4
	for n < 2*runtime.GOMAXPROCS(0) && n < 64 {
		n *= 2
	}
	return n
}

// logger is Config.Logger, else the default logger of the moment.
func (c *Client) logger() *slog.Logger {
	if c.cfg.Logger != nil {
		return c.cfg.Logger
	}
	return slog.Default()
}

// Close stops the client, in this order: the flusher stops after a last
// flush; the session sends what is queued and half-closes, waiting at most
// AgentWait for the agent to end it; the connection closes; queued
// callbacks run; the metrics are unregistered. It waits for every goroutine the
// client started and is idempotent. Handles keep working after Close,
// deciding from the last state seen, but report nothing.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.flushStop()
		<-c.flushDone
		c.fleet.finish(c.cfg.AgentWait)
		c.cancel()
		if c.conn != nil {
			c.conn.Close()
		}
		c.wg.Wait() // the dispatcher exits once the others are gone
		if c.cfg.Registerer != nil {
			c.metrics.unregister(c.cfg.Registerer)
		}
		close(c.done)
	})
	return nil
}

// Done is closed when Close has finished.
func (c *Client) Done() <-chan struct{} { return c.done }

// Service returns the service name the client reports and sends as
// Fusebox-Retry-Owner.
func (c *Client) Service() string { return c.service }

// AgentConnected reports whether a session with the agent is up (snapshots
// from it decide) or not (the local fallback decides).
func (c *Client) AgentConnected() bool { return c.fleet.up() }

// Dependency returns the handle on dependency name. Names are 1–128
// characters of [A-Za-z0-9._:/-]. An invalid name gives a handle whose every
// call fails at once with an error matching ErrInvalidDependency, without
// calling the attempt function; Dependency.Err tells it up front. A new
// name past Config.MaxDependencies is never refused: its handle's calls go
// through untracked (Dependency.Untracked), counted in
// fusebox_client_untracked_calls_total, and said once in the log.
func (c *Client) Dependency(name string) *Dependency {
	return &Dependency{st: c.depState(name)}
}

// Forget stops tracking dependency name: its breaker state, counters and
// metric series are dropped (counts not yet reported are reported at the
// next flush, and an engine in process is told; see NewInProcess), and it
// no longer counts against Config.MaxDependencies. A later Dependency(name)
// starts afresh. Handles made before keep working, deciding from the last
// state they saw, but what they count is no longer reported: get a new
// handle. Forgetting an unknown name does nothing. A service with a fixed
// set of dependencies never needs it; a client that calls names others
// choose (the agent's egress proxy) forgets the idle ones so that its table
// does not grow forever.
func (c *Client) Forget(name string) {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	st := c.lookup(name)
	if st == nil {
		return
	}
	next := maps.Clone(*c.deps.Load())
	delete(next, name)
	c.deps.Store(&next)
	c.ndeps--
	c.forgotten = append(c.forgotten, st)
	// The local breaker no longer follows the agent for st (before a
	// later Dependency(name) may follow it again).
	st.mu.Lock()
	st.following = false
	st.mu.Unlock()
	c.syncLocal(st)
}

func (c *Client) lookup(name string) *depState { return (*c.deps.Load())[name] }

func (c *Client) depState(name string) *depState {
	if st := c.lookup(name); st != nil {
		return st
	}
	if err := sharedstate.ValidateDependencyName(name); err != nil {
		return newDepState(c, name, err, 0)
	}
	c.depMu.Lock()
	if st := c.lookup(name); st != nil {
		c.depMu.Unlock()
		return st
	}
	if c.ndeps >= c.cfg.MaxDependencies {
		c.depMu.Unlock()
		if !c.capHit.Swap(true) {
			c.logger().Warn("clientlib: MaxDependencies reached; calls to new dependencies go through untracked "+
				"(one attempt, no breaker, not reported) until names are forgotten",
				"service", c.service, "limit", c.cfg.MaxDependencies, "dependency", name)
		}
		return newUntracked(c, name)
	}
	st := newDepState(c, name, nil, c.nstripes)
	st.publish()
	next := maps.Clone(*c.deps.Load())
	next[name] = st
	c.deps.Store(&next)
	c.ndeps++
	c.depMu.Unlock()
	c.fleet.follow(st)
	return st
}

// each calls f for every tracked dependency.
func (c *Client) each(f func(*depState)) {
	for _, st := range *c.deps.Load() {
		f(st)
	}
}

// AgentEvent tells OnAgentChange that the session with the agent came up
// or went down.
type AgentEvent struct {
	Connected bool
	// Node is the agent's node name (from its Welcome) when connected.
	Node string
	// Err is why the session ended (nil when connected).
	Err error
}

func (c *Client) emit(ev any) {
	if c.events == nil {
		return
	}
	select {
	case c.events <- ev:
	default:
		c.eventsDropped.Add(1)
	}
}

// dispatch runs the callbacks, in order, on one goroutine.
func (c *Client) dispatch() {
	run := func(ev any) {
		switch ev := ev.(type) {
		case StateChange:
			if c.cfg.OnStateChange != nil {
				c.cfg.OnStateChange(ev)
			}
		case AgentEvent:
			if c.cfg.OnAgentChange != nil {
				c.cfg.OnAgentChange(ev)
			}
		}
	}
	for {
		select {
		case ev := <-c.events:
			run(ev)
		case <-c.ctx.Done():
			// Close cancels after the last flush; what is queued still runs
			// (this goroutine is the only receiver).
			for len(c.events) > 0 {
				run(<-c.events)
			}
			return
		}
	}
}

// flush computes each dependency's deltas since the previous flush. The
// local breaker gets what it has not counted itself; the fleet (while it
// is up) gets what it has not counted itself: AcquireRetry and
// AcquireProbe count the retries, probes and refusals they decide. The
// dependencies forgotten since the previous flush are flushed a last time,
// and the fleet forgets them.
func (c *Client) flush() {
	connected := c.fleet.up()
	now := time.Now().UnixNano()
	c.depMu.Lock()
	forgotten := c.forgotten
	c.forgotten = nil
	c.depMu.Unlock()
	for _, st := range forgotten {
		c.flushDep(st, connected, now, true)
		c.fleet.forget(st)
	}
	c.each(func(st *depState) { c.flushDep(st, connected, now, false) })
	c.engine.Tick() // single node: the records it proposes need no gossip
	c.fleet.flushed()
}

// flushDep is flush's work for st; last: st was forgotten, and its
// in-flight count goes back to 0.
func (c *Client) flushDep(st *depState, connected bool, now int64, last bool) {
	if u := st.keptUntil.Load(); u != 0 && now >= u { // a kept throttle probability expired
		st.keptUntil.Store(0)
		st.publish()
	}
	t := st.sum()
	la, ll := st.sentAgent, st.sentLocal
	st.sentAgent, st.sentLocal = t, t
	local := sharedstate.Counts{
		FirstAttempts: (t.first - ll.first) + (t.probesAgent - ll.probesAgent),
		Retries:       t.retriesAgent - ll.retriesAgent,
		Successes:     t.success - ll.success,
		Failures:      t.failure - ll.failure,
		SlowCalls:     t.slow - ll.slow,
		Rejected:      (t.rejected - ll.rejected) + (t.rejectedAgent - ll.rejectedAgent),
	}
	if !local.IsZero() && !last && (c.fallback || st.refused.Load()) {
		c.ensureLocalPolicy(st)
		_ = c.engine.AddCounts(st.name, local) // refused only past MaxDependencies, which New shares
	}
	if !connected {
		return
	}
	agent := sharedstate.Counts{
		FirstAttempts: t.first - la.first,
		Successes:     t.success - la.success,
		Failures:      t.failure - la.failure,
		SlowCalls:     t.slow - la.slow,
		Rejected:      t.rejected - la.rejected,
	}
	if !agent.IsZero() {
		c.fleet.report(st, agent)
	}
	// In-flight calls, while there is a limit (and once more after it, to
	// bring the fleet's count back to 0).
	n := st.slots.inFlight()
	if last {
		n = 0
	}
	if st.dec.Load().limit > 0 || n != st.sentInFlight {
		if n != st.sentInFlight || !st.inFlightSent {
			c.fleet.setInFlight(st, uint64(st.sentInFlight), uint64(n))
			st.sentInFlight, st.inFlightSent = n, true
		}
	}
}

// onEngineChange is the local engine's OnChange: republish the decision of
// a dependency the local breaker decides.
func (c *Client) onEngineChange(dep string) {
	if st := c.lookup(dep); st != nil {
		st.publish()
	}
}

// localSnapshot is the local breaker's view of st. Caller holds st.mu.
func (c *Client) localSnapshot(st *depState) *sharedstate.Snapshot {
	if s := c.engine.Snapshot(st.name); s != nil {
		return s
	}
	// Not tracked (new, or forgotten while idle): closed, last policy seen.
	if st.fallbackSnap == nil {
		st.fallbackSnap = convert.PolicySnapshot(st.name, st.policyLocked())
	}
	return st.fallbackSnap
}

// ensureLocalPolicy gives the local engine st's last seen policy before it
// (re)starts tracking st.
func (c *Client) ensureLocalPolicy(st *depState) {
	if c.engine.Snapshot(st.name) != nil {
		return
	}
	st.mu.Lock()
	p := st.localPol
	st.mu.Unlock()
	if p != nil {
		_ = c.engine.SetPolicy(st.name, *p) // validated when stored
	}
}
