package clientlib

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/clientlib/internal/backoff"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

const (
	// welcomeTimeout bounds the wait for the agent's Welcome.
	welcomeTimeout = 5 * time.Second
	// maxPendingProbeResults bounds probe results queued for the agent.
	maxPendingProbeResults = 1024
	// stuckSends is how many flush intervals a Send may block before the
	// session is declared stuck and restarted (and the local fallback decides).
	stuckSends = 20
)

// session is the Session stream with the agent: Hello, then count deltas
// out and snapshots in. One goroutine (loop) owns the stream's receiving
// side and reconnects; a second one per session sends.
type session struct {
	c         *Client
	connected atomic.Bool

	wake chan struct{} // cap 1: deltas are queued

	// Close: finishing is closed to make the sender send what is queued
	// and half-close the stream; loopDone is closed when loop returns.
	closing   atomic.Bool
	finishing chan struct{}
	loopDone  chan struct{}

	mu           sync.Mutex
	pending      map[*depState]*fuseboxv1.Counts
	probes       []*fuseboxv1.ProbeResult
	subs         []string
	sendingSince time.Time          // zero unless a Send is in progress
	stop         context.CancelFunc // ends the current session
	node         string

	reported int8 // owned by loop: 0 nothing yet, 1 connected, -1 disconnected
}

func newSession(c *Client) *session {
	return &session{c: c, wake: make(chan struct{}, 1), pending: map[*depState]*fuseboxv1.Counts{},
		finishing: make(chan struct{}), loopDone: make(chan struct{})}
}

func (s *session) isConnected() bool { return s.connected.Load() }

// subscribe asks the agent for st's snapshots (in the next deltas message).
func (s *session) subscribe(st *depState) {
	if s.c.agent == nil {
		return
	}
	s.mu.Lock()
	s.subs = append(s.subs, st.name)
	s.mu.Unlock()
	s.kick()
}

func (s *session) addDeltas(st *depState, d *fuseboxv1.Counts) {
	s.mu.Lock()
	if p := s.pending[st]; p != nil {
		p.FirstAttempts += d.FirstAttempts
		p.Retries += d.Retries
		p.Successes += d.Successes
		p.Failures += d.Failures
		p.SlowCalls += d.SlowCalls
		p.Rejected += d.Rejected
	} else {
		s.pending[st] = d
	}
	s.mu.Unlock()
}

func (s *session) addProbeResult(dep string, gen uint64, success bool) {
	s.mu.Lock()
	if len(s.probes) < maxPendingProbeResults {
		s.probes = append(s.probes, &fuseboxv1.ProbeResult{Dependency: dep, Generation: gen, Success: success})
	}
	s.mu.Unlock()
	s.kick()
}

// kick wakes the sender, and restarts a session whose Send is stuck.
func (s *session) kick() {
	if s.c.agent == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Lock()
	stuck := !s.sendingSince.IsZero() && time.Since(s.sendingSince) > stuckSends*s.c.cfg.FlushInterval
	stop := s.stop
	s.mu.Unlock()
	if stuck && stop != nil {
		stop()
	}
}

// take returns the next deltas message, or nil when there is nothing to send.
func (s *session) take() *fuseboxv1.CountDeltas {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 && len(s.probes) == 0 && len(s.subs) == 0 {
		return nil
	}
	m := &fuseboxv1.CountDeltas{ProbeResults: s.probes, Subscribe: s.subs}
	for st, c := range s.pending {
		m.Deltas = append(m.Deltas, &fuseboxv1.DependencyCounts{Dependency: st.name, Counts: c})
	}
	s.pending = make(map[*depState]*fuseboxv1.Counts, len(s.pending))
	s.probes, s.subs = nil, nil
	s.sendingSince = time.Now()
	return m
}

func (s *session) sentRound() {
	s.mu.Lock()
	s.sendingSince = time.Time{}
	s.mu.Unlock()
}

// finish is Close's part: send what is queued, half-close the stream and
// wait (at most wait) for the agent to end it, so nothing queued is lost.
func (s *session) finish(wait time.Duration) {
	if s.c.agent == nil {
		return
	}
	s.closing.Store(true)
	close(s.finishing)
	if !s.isConnected() {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.loopDone:
	case <-t.C:
	}
}

// loop keeps a session with the agent up until ctx ends, reconnecting with
// jittered exponential backoff.
func (s *session) loop(ctx context.Context) {
	defer s.c.wg.Done()
	defer close(s.loopDone)
	cfg := &s.c.cfg
	delay := cfg.ReconnectMin
	for {
		welcomed, err := s.runOnce(ctx)
		if ctx.Err() != nil || s.closing.Load() {
			return
		}
		if welcomed {
			delay = cfg.ReconnectMin
		}
		s.c.metrics.sessionFailures.Add(1)
		if s.reported != -1 { // say once that the agent is not there
			s.reported = -1
			s.c.emit(AgentEvent{Connected: false, Err: err})
		}
		wait := backoff.Policy{Base: delay, Max: delay, Jitter: backoff.Equal}.Wait(0, 0, backoff.Uniform(s.c.random()))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.finishing:
			t.Stop()
			return
		}
		if delay *= 2; delay > cfg.ReconnectMax {
			delay = cfg.ReconnectMax
		}
	}
}

func (s *session) runOnce(ctx context.Context) (welcomed bool, err error) {
	c := s.c
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.agent.Session(sctx)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	var names []string
	c.each(func(st *depState) { names = append(names, st.name) })
	s.subs = nil // Hello carries them all
	s.mu.Unlock()
	hello := &fuseboxv1.Hello{Service: c.service, Instance: c.cfg.Instance, ClientVersion: Version, Dependencies: names}
	if err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: hello}}); err != nil {
		return false, err
	}
	wt := time.AfterFunc(welcomeTimeout, cancel)
	resp, err := stream.Recv()
	wt.Stop()
	if err != nil {
		return false, err
	}
	w := resp.GetWelcome()
	if w == nil {
		return false, errors.New("fusebox: agent sent no welcome")
	}
	c.applyWelcome(w)

	s.mu.Lock()
	s.stop = cancel
	s.node = w.GetNode()
	s.pending = map[*depState]*fuseboxv1.Counts{}
	s.probes = nil
	s.sendingSince = time.Time{}
	s.mu.Unlock()
	s.connected.Store(true)
	c.metrics.sessions.Add(1)
	s.reported = 1
	c.emit(AgentEvent{Connected: true, Node: w.GetNode()})

	sendErr := make(chan error, 1)
	go func() { sendErr <- s.sendLoop(sctx, stream, cancel) }()
	for {
		resp, err = stream.Recv()
		if err != nil {
			break
		}
		switch m := resp.GetMsg().(type) {
		case *fuseboxv1.SessionResponse_Update:
			for _, ps := range m.Update.GetSnapshots() {
				c.applyAgentSnapshot(ps)
			}
		case *fuseboxv1.SessionResponse_Error:
			c.applyDependencyError(m.Error)
		}
	}
	cancel()
	if serr := <-sendErr; serr != nil && ctx.Err() == nil {
		err = errors.Join(err, serr)
	}
	s.disconnect()
	return true, err
}

func (s *session) sendLoop(ctx context.Context, stream grpc.BidiStreamingClient[fuseboxv1.SessionRequest, fuseboxv1.SessionResponse], cancel context.CancelFunc) error {
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil
		case <-s.finishing:
			for m := s.take(); m != nil; m = s.take() {
				err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: m}})
				s.sentRound()
				if err != nil {
					cancel()
					return err
				}
			}
			return stream.CloseSend()
		}
		m := s.take()
		if m == nil {
			s.sentRound()
			continue
		}
		err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: m}})
		s.sentRound()
		if err != nil {
			cancel()
			return err
		}
	}
}

// disconnect switches every dependency to the local fallback (loop reports
// the event).
func (s *session) disconnect() {
	c := s.c
	s.mu.Lock()
	s.stop = nil
	s.node = ""
	s.mu.Unlock()
	s.connected.Store(false)
	c.each(func(st *depState) {
		st.mu.Lock()
		st.agentSnap = nil
		st.publishLocked()
		st.mu.Unlock()
		st.refused.Store(false)
	})
}

// applyWelcome makes the fleet default retry settings the local default.
func (c *Client) applyWelcome(w *fuseboxv1.Welcome) {
	if w.GetDefaultRetry() == nil {
		return
	}
	p := c.engine.Policy(sharedstate.DefaultPolicyName)
	p.Dependency = sharedstate.DefaultPolicyName
	applyRetry(&p, w.GetDefaultRetry())
	_ = c.engine.SetDefaultPolicy(p) // an invalid default is ignored: the previous one stays
}

// applyAgentSnapshot installs a pushed snapshot and remembers its policy
// for the local fallback.
func (c *Client) applyAgentSnapshot(ps *fuseboxv1.DecisionSnapshot) {
	st := c.lookup(ps.GetDependency())
	if st == nil {
		return
	}
	st.mu.Lock()
	var base sharedstate.Policy
	if st.localPol != nil {
		base = *st.localPol
	} else {
		base = c.engine.Policy(st.name)
	}
	pol := base
	pol.Dependency = st.name
	applyRetry(&pol, ps.GetRetry())
	if d := ps.GetSlowCallDuration(); d != nil {
		pol.Breaker.SlowCallDuration = sharedstate.Duration(d.AsDuration())
	}
	pol.Breaker.Mode = modeFromProto(ps.GetMode(), pol.Breaker.Mode)
	polChanged := (st.localPol == nil || *st.localPol != pol) && pol.Validate() == nil
	if polChanged {
		st.localPol = &pol
		st.fallbackSnap = nil
	}
	st.agentSnap = snapshotFromProto(ps, pol)
	st.refusedMsg = ""
	st.refused.Store(false)
	st.publishLocked()
	st.mu.Unlock()
	if polChanged {
		_ = c.engine.SetPolicy(st.name, pol)
	}
}

func (c *Client) applyDependencyError(e *fuseboxv1.DependencyError) {
	c.metrics.agentRefusals.Add(1)
	st := c.lookup(e.GetDependency())
	if st == nil {
		return
	}
	st.mu.Lock()
	st.refusedMsg = e.GetMessage()
	st.agentSnap = nil
	st.publishLocked()
	st.mu.Unlock()
	st.refused.Store(true)
}

func applyRetry(p *sharedstate.Policy, r *fuseboxv1.RetrySettings) {
	if r == nil {
		return
	}
	if r.GetMaxAttempts() > 0 {
		p.Retry.MaxAttempts = int(r.GetMaxAttempts())
	}
	if d := r.GetPerAttemptTimeout(); d != nil {
		p.Retry.PerAttemptTimeout = sharedstate.Duration(d.AsDuration())
	}
	if d := r.GetBackoffBase(); d != nil {
		p.Retry.Backoff.Base = sharedstate.Duration(d.AsDuration())
	}
	if d := r.GetBackoffMax(); d != nil {
		p.Retry.Backoff.Max = sharedstate.Duration(d.AsDuration())
	}
	switch r.GetJitter() {
	case fuseboxv1.Jitter_JITTER_FULL:
		p.Retry.Backoff.Jitter = sharedstate.JitterFull
	case fuseboxv1.Jitter_JITTER_EQUAL:
		p.Retry.Backoff.Jitter = sharedstate.JitterEqual
	case fuseboxv1.Jitter_JITTER_DECORRELATED:
		p.Retry.Backoff.Jitter = sharedstate.JitterDecorrelated
	case fuseboxv1.Jitter_JITTER_NONE:
		p.Retry.Backoff.Jitter = sharedstate.JitterNone
	}
	p.Retry.Budget.Ratio = r.GetBudgetRatio()
	p.Retry.Budget.MinRetriesPerSecond = r.GetBudgetMinRetriesPerSecond()
}

func modeFromProto(m fuseboxv1.Mode, def sharedstate.Mode) sharedstate.Mode {
	switch m {
	case fuseboxv1.Mode_MODE_ENFORCE:
		return sharedstate.ModeEnforce
	case fuseboxv1.Mode_MODE_SHADOW:
		return sharedstate.ModeShadow
	}
	return def
}

// snapshotFromProto rebuilds the engine's Snapshot from the wire; pol
// supplies what the wire leaves unset.
func snapshotFromProto(ps *fuseboxv1.DecisionSnapshot, pol sharedstate.Policy) *sharedstate.Snapshot {
	s := snapshotFromPolicy(ps.GetDependency(), pol)
	switch ps.GetState() {
	case fuseboxv1.BreakerState_BREAKER_STATE_OPEN:
		s.State = Open
	case fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		s.State = HalfOpen
	}
	s.Generation = ps.GetGeneration()
	if t := ps.GetSince(); t != nil {
		s.Since = t.AsTime()
	}
	s.ProbePermit = ps.GetProbePermit()
	if ps.GetNodeLocalOpen() {
		// The wire has one bit for the node-local breaker: with a probe
		// permit under a closed fleet breaker it can only be half-open.
		s.LocalState = Open
		if s.State == Closed && s.ProbePermit {
			s.LocalState = HalfOpen
		}
	}
	switch ps.GetOverride() {
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN:
		s.Override = ForcedOpen
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED:
		s.Override = ForcedClosed
	}
	s.OverrideReason = ps.GetOverrideReason()
	return s
}

func reasonFromProto(r fuseboxv1.RejectReason) sharedstate.Reason {
	switch r {
	case fuseboxv1.RejectReason_REJECT_REASON_FORCED_OPEN:
		return sharedstate.ReasonForcedOpen
	case fuseboxv1.RejectReason_REJECT_REASON_HALF_OPEN_NO_PERMIT:
		return sharedstate.ReasonHalfOpenNoPermit
	case fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED:
		return sharedstate.ReasonBudgetExhausted
	}
	return sharedstate.ReasonOpen
}

// --- synchronous questions to the agent (retries, probes, strict mode) ---

// viaAgent reports whether st's rare-path questions go to the agent.
func (c *Client) viaAgent(st *depState) bool {
	return c.agent != nil && c.sess.isConnected() && !st.refused.Load()
}

// askAgent runs one unary call under Config.AgentWait.
func (c *Client) askAgent(ctx context.Context, call string, f func(context.Context) (*fuseboxv1.Decision, error)) (*fuseboxv1.Decision, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.AgentWait)
	defer cancel()
	d, err := f(actx)
	if err != nil && ctx.Err() == nil {
		c.metrics.fallback(call)
	}
	return d, err
}

func (c *Client) acquireRequest(st *depState) *fuseboxv1.AcquireRequest {
	return &fuseboxv1.AcquireRequest{Dependency: st.name, Service: c.service, Instance: c.cfg.Instance}
}

// admitRetry takes one retry from the budget: the agent's, else the local one.
func (st *depState) admitRetry(ctx context.Context, sp *stripe) (grant, error) {
	dec := st.dec.Load()
	if dec.first.Verdict == sharedstate.Reject {
		sp.rejected.Add(1)
		return grant{}, dec.rejErr
	}
	c := st.c
	if c.viaAgent(st) {
		d, err := c.askAgent(ctx, "acquire_retry", func(ctx context.Context) (*fuseboxv1.Decision, error) {
			return c.agent.AcquireRetry(ctx, c.acquireRequest(st))
		})
		if err == nil {
			if d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT {
				st.rare.rejectedAgent.Add(1)
				return grant{}, st.rejection(reasonFromProto(d.GetReason()))
			}
			st.rare.retriesAgent.Add(1)
			return grant{}, nil
		}
	}
	c.ensureLocalPolicy(st)
	d := c.engine.AcquireRetry(st.name)
	if !d.Allowed() {
		st.rare.rejectedLocal.Add(1)
		return grant{}, st.rejection(d.Reason)
	}
	st.rare.retriesLocal.Add(1)
	return grant{}, nil
}

// acquireProbe asks for a half-open probe permit.
func (st *depState) acquireProbe(ctx context.Context, askAgent bool, dec *decision) (grant, error) {
	c := st.c
	if askAgent && c.viaAgent(st) {
		d, err := c.askAgent(ctx, "acquire_probe", func(ctx context.Context) (*fuseboxv1.Decision, error) {
			return c.agent.AcquireProbe(ctx, c.acquireRequest(st))
		})
		if err == nil {
			switch d.GetVerdict() {
			case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
				st.rare.probesAgent.Add(1)
				gen := dec.snap.Generation
				if s := d.GetSnapshot(); s != nil {
					gen = s.GetGeneration()
				}
				return grant{probe: true, byAgent: true, generation: gen}, nil
			case fuseboxv1.Verdict_VERDICT_ALLOW:
				st.rare.probesAgent.Add(1) // the agent counted a first attempt
				return grant{}, nil
			default:
				st.rare.rejectedAgent.Add(1)
				return grant{}, st.rejection(reasonFromProto(d.GetReason()))
			}
		}
	}
	c.ensureLocalPolicy(st)
	d := c.engine.AcquireProbe(st.name)
	switch d.Verdict {
	case sharedstate.AllowProbe:
		st.rare.probesLocal.Add(1)
		return grant{probe: true}, nil
	case sharedstate.Allow:
		st.rare.probesLocal.Add(1)
		return grant{}, nil
	}
	st.rare.rejectedLocal.Add(1)
	return grant{}, st.rejection(d.Reason)
}

// check decides a first attempt synchronously (StrictConsult). It reports
// whether the agent answered.
func (st *depState) check(ctx context.Context) (sharedstate.Decision, bool) {
	c := st.c
	if c.viaAgent(st) {
		d, err := c.askAgent(ctx, "check", func(ctx context.Context) (*fuseboxv1.Decision, error) {
			return c.agent.Check(ctx, &fuseboxv1.CheckRequest{Dependency: st.name,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Service: c.service, Instance: c.cfg.Instance})
		})
		if err == nil {
			switch d.GetVerdict() {
			case fuseboxv1.Verdict_VERDICT_REJECT:
				return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: reasonFromProto(d.GetReason())}, true
			case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
				return sharedstate.Decision{Verdict: sharedstate.AllowProbe}, true
			}
			return sharedstate.Decision{Verdict: sharedstate.Allow}, true
		}
	}
	c.ensureLocalPolicy(st)
	return c.engine.Decide(st.name, sharedstate.FirstAttempt), false
}

// finishProbe reports a probe's result to whoever granted it.
func (st *depState) finishProbe(g grant, success bool) {
	if !g.probe {
		return
	}
	if g.byAgent {
		st.c.sess.addProbeResult(st.name, g.generation, success)
		return
	}
	st.c.engine.ProbeResult(st.name, success)
}
