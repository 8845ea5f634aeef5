package clientlib

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
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
	// epoch counts the sessions welcomed so far: an agent's answer is
	// applied only to the session it was asked in.
	epoch atomic.Uint64

	wake chan struct{} // cap 1: deltas are queued

	// Close: finishing is closed to make the sender send what is queued
	// and half-close the stream; loopDone is closed when loop returns.
	closing   atomic.Bool
	finishing chan struct{}
	loopDone  chan struct{}

	mu           sync.Mutex
	pending      map[*depState]sharedstate.Counts
	inFlight     map[*depState]uint64 // gauges to send with the next deltas
	probes       []*fuseboxv1.ProbeResult
	subs         []string
	sendingSince time.Time          // zero unless a Send is in progress
	stop         context.CancelFunc // ends the current session

	reported int8 // owned by loop: 0 nothing yet, 1 connected, -1 disconnected
}

func newSession(c *Client) *session {
	return &session{c: c, wake: make(chan struct{}, 1), pending: map[*depState]sharedstate.Counts{}, inFlight: map[*depState]uint64{},
		finishing: make(chan struct{}), loopDone: make(chan struct{})}
}

var _ fleet = (*session)(nil)

// start implements fleet: the session loop, unless the client has no agent.
func (s *session) start(ctx context.Context) {
	if s.c.agent == nil {
		return
	}
	s.c.wg.Go(func() { s.loop(ctx) })
}

// up implements fleet: a session is up.
func (s *session) up() bool { return s.connected.Load() }

// follow implements fleet: it asks the agent for st's snapshots (in the
// next deltas message).
func (s *session) follow(st *depState) {
	if s.c.agent == nil {
		return
	}
	s.mu.Lock()
	s.subs = append(s.subs, st.name)
	s.mu.Unlock()
	s.kick()
}

// forget implements fleet. The agent keeps st's name among the session's
// until the session ends (the protocol has no unsubscribe); its snapshots
// find no dependency and are dropped.
func (s *session) forget(*depState) {}

// report implements fleet: the deltas go in the next message.
func (s *session) report(st *depState, d sharedstate.Counts) {
	s.mu.Lock()
	s.pending[st] = s.pending[st].Plus(d)
	s.mu.Unlock()
}

// setInFlight implements fleet: st's current in-flight count goes in the
// next message.
func (s *session) setInFlight(st *depState, _, n uint64) {
	s.mu.Lock()
	s.inFlight[st] = n
	s.mu.Unlock()
}

// probeResult implements fleet: the result goes in the next message.
func (s *session) probeResult(st *depState, gen uint64, success, slow bool) {
	s.mu.Lock()
	if len(s.probes) < maxPendingProbeResults {
		s.probes = append(s.probes, &fuseboxv1.ProbeResult{Dependency: st.name, Generation: gen, Success: success, Slow: slow})
	}
	s.mu.Unlock()
	s.kick()
}

// flushed implements fleet: the sender sends what the flush queued.
func (s *session) flushed() { s.kick() }

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
	if len(s.pending) == 0 && len(s.probes) == 0 && len(s.subs) == 0 && len(s.inFlight) == 0 {
		return nil
	}
	m := &fuseboxv1.CountDeltas{ProbeResults: s.probes, Subscribe: s.subs}
	for st, c := range s.pending {
		dc := &fuseboxv1.DependencyCounts{Dependency: st.name, Counts: convert.CountsToProto(c)}
		if n, ok := s.inFlight[st]; ok {
			dc.InFlight = &n
			delete(s.inFlight, st)
		}
		m.Deltas = append(m.Deltas, dc)
	}
	for st, n := range s.inFlight {
		m.Deltas = append(m.Deltas, &fuseboxv1.DependencyCounts{Dependency: st.name, Counts: convert.CountsToProto(sharedstate.Counts{}), InFlight: &n})
	}
	s.pending = make(map[*depState]sharedstate.Counts, len(s.pending))
	clear(s.inFlight)
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
	if !s.up() {
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
	defer close(s.loopDone)
	cfg := &s.c.cfg
	retry := backoff.New(backoff.Policy{Base: cfg.ReconnectMin, Max: cfg.ReconnectMax, Jitter: backoff.Equal}, s.c.random)
	for {
		welcomed, err := s.runOnce(ctx)
		if ctx.Err() != nil || s.closing.Load() {
			return
		}
		if welcomed {
			retry.Reset()
		}
		s.c.metrics.sessionFailures.Add(1)
		if s.reported != -1 { // say once that the agent is not there
			s.reported = -1
			s.c.emit(AgentEvent{Connected: false, Err: err})
			s.c.logger().Warn("clientlib: agent unreachable; deciding locally until it is back "+
				"(local breaker and budget, last pushed policies, overrides and shaping)",
				"agent", cfg.AgentAddress, "service", s.c.service, "err", err)
		}
		// Closing ends the wait: Close cancels ctx right after finish.
		if !ctxtime.Sleep(ctx, retry.Next()) || s.closing.Load() {
			return
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
	names := slices.Collect(maps.Keys(*c.deps.Load()))
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

	s.epoch.Add(1)
	s.mu.Lock()
	s.stop = cancel
	s.pending = map[*depState]sharedstate.Counts{}
	s.probes = nil
	s.sendingSince = time.Time{}
	s.mu.Unlock()
	s.connected.Store(true)
	c.metrics.sessions.Add(1)
	if s.reported == -1 {
		c.logger().Info("clientlib: agent reachable again; deciding from its snapshots",
			"agent", c.cfg.AgentAddress, "service", c.service, "node", w.GetNode())
	} else {
		c.logger().Debug("clientlib: connected to the agent", "agent", c.cfg.AgentAddress, "service", c.service, "node", w.GetNode())
	}
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
				if st := c.lookup(ps.GetDependency()); st != nil {
					c.applyAgentSnapshot(st, ps, true)
				}
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
	send := func(m *fuseboxv1.CountDeltas) error {
		err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: m}})
		s.sentRound()
		if err != nil {
			cancel()
		}
		return err
	}
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil
		case <-s.finishing:
			for m := s.take(); m != nil; m = s.take() {
				if err := send(m); err != nil {
					return err
				}
			}
			return stream.CloseSend()
		}
		if m := s.take(); m == nil {
			s.sentRound()
		} else if err := send(m); err != nil {
			return err
		}
	}
}

// disconnect switches every dependency to the local fallback (loop reports
// the event), which goes on from the breakers it followed.
func (s *session) disconnect() {
	c := s.c
	s.mu.Lock()
	s.stop = nil
	s.mu.Unlock()
	s.connected.Store(false)
	c.each(func(st *depState) {
		c.leaveOff(st)
		st.mu.Lock()
		st.dropAgentSnapLocked()
		st.mu.Unlock()
		st.refused.Store(false)
	})
}

// applyWelcome makes the fleet default (the policy of the Welcome's
// default snapshot) the local breaker's default policy.
func (c *Client) applyWelcome(w *fuseboxv1.Welcome) {
	if p, err := sharedstate.ParsePolicy(w.GetDefaultSnapshot().GetPolicyJson()); err == nil {
		_ = c.engine.SetDefaultPolicy(p)
	} // else the previous default stays
}

// applyAgentSnapshot installs a snapshot from the agent: the hot path
// decides from it as it is. A pushed snapshot carries the dependency's
// effective policy (policy_json), which the snapshot decides under and
// which is the local fallback breaker's policy whenever the agent is away;
// an answer's snapshot is under the policy last pushed.
//
// pushed says where ps comes from. The Session stream is ordered, so a
// pushed snapshot is the agent's latest and is installed, except one older
// (lower version) than a snapshot an answer installed meanwhile: that one
// is late. (A pushed version may also go down when the agent restarts or
// forgets an idle dependency; the stream then still decides.) An answer's
// snapshot (AcquireRetry, AcquireProbe, Check) is installed only when it is
// newer than the one held.
func (c *Client) applyAgentSnapshot(st *depState, ps *fuseboxv1.DecisionSnapshot, pushed bool) {
	st.mu.Lock()
	held := st.agentSnap
	if pushed {
		if held != nil && st.agentSnapAnswer && ps.GetVersion() < held.Version {
			st.mu.Unlock()
			return
		}
	} else if held == nil || ps.GetVersion() <= held.Version {
		st.mu.Unlock()
		return
	}
	snap := convert.SnapshotFromProto(ps)
	polChanged := false
	if raw := ps.GetPolicyJson(); raw != nil && !bytes.Equal(raw, st.localPolJSON) {
		if p, err := sharedstate.ParsePolicy(raw); err == nil { // else the last one stays
			p.Dependency = st.name
			st.localPol, st.localPolJSON, st.fallbackSnap, polChanged = &p, raw, nil, true
		}
	}
	snap.Policy = st.localPol
	if snap.Policy == nil { // none pushed yet: the local breaker's
		p := c.engine.Policy(st.name)
		snap.Policy = &p
	}
	// An operator's override goes to the local breaker too, with its
	// expiry, so that it holds while the agent is away.
	ov := overrideOf(snap)
	ovChanged := !sameOverride(st.localOverride, ov)
	st.localOverride = ov
	// So do the breakers: the local breaker follows them.
	followChanged := !st.following || st.followSnap == nil || !sameBreakers(st.followSnap, snap)
	if followChanged {
		st.followSnap = snap
	}
	st.following = true
	st.agentSnapAnswer = !pushed
	st.installLocked(snap)
	st.mu.Unlock()
	if polChanged || ovChanged || followChanged {
		c.syncLocal(st)
	}
}

// sameBreakers reports whether a and b give the breakers the same state.
func sameBreakers(a, b *sharedstate.Snapshot) bool {
	return a.State == b.State && a.LocalState == b.LocalState && a.Generation == b.Generation &&
		a.OpenCount == b.OpenCount && a.Since.Equal(b.Since)
}

// overrideOf is the override a snapshot reports (nil for none).
func overrideOf(s *sharedstate.Snapshot) *sharedstate.Override {
	if s.Override == OverrideNone {
		return nil
	}
	return &sharedstate.Override{State: s.Override, Reason: s.OverrideReason, Expires: s.OverrideExpires}
}

func sameOverride(a, b *sharedstate.Override) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.State == b.State && a.Reason == b.Reason && a.Expires.Equal(b.Expires)
}

// syncLocal gives the local breaker st's latest policy, followed breakers
// and override. Any goroutine may call it after changing them; syncMu makes
// the last one to run apply the latest of all, in that order (following or
// an override would make the engine track the dependency under the default
// policy). Once the agent no longer decides st, the local breaker is given
// the agent's last breakers if it was not yet, and stops following: it
// goes on from there by its own rules.
func (c *Client) syncLocal(st *depState) {
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	st.mu.Lock()
	pol, ov, fs, following := st.localPol, st.localOverride, st.followSnap, st.following
	st.mu.Unlock()
	if pol != nil && pol != st.syncedPol {
		st.syncedPol = pol
		_ = c.engine.SetPolicy(st.name, *pol) // validated when stored
	}
	if fs != nil && fs != st.syncedFollow {
		st.syncedFollow = fs
		// Refused only past MaxDependencies, which New shares, or for a
		// generation no agent reaches: the local breaker then keeps its own.
		st.syncedFollowing = c.engine.Follow(fs) == nil || st.syncedFollowing
	}
	if !following && st.syncedFollowing {
		c.engine.Unfollow(st.name)
		st.syncedFollowing = false
	}
	if !st.syncedOvOnce || !sameOverride(ov, st.syncedOv) {
		st.syncedOv, st.syncedOvOnce = ov, true
		// A reason too long for the engine (the agent enforces the same
		// bound) leaves the previous override.
		_ = c.engine.SetOverride(st.name, ov)
	}
}

func (c *Client) applyDependencyError(e *fuseboxv1.DependencyError) {
	if st := c.lookup(e.GetDependency()); st != nil {
		c.refusedByFleet(st, e.GetMessage())
	} else {
		c.metrics.agentRefusals.Add(1)
	}
}
