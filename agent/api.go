package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// errShuttingDown maps to codes.Unavailable with ShutdownMessage.
var errShuttingDown = errors.New(ShutdownMessage)

// maxReportErrors bounds the DependencyErrors of one ReportResponse; the
// rest are summed up in one last entry with an empty dependency.
const maxReportErrors = 100

// rpcError maps an error to the gRPC status clients see. It is the only
// place that does, and it matches with errors.Is, never on messages.
func rpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errShuttingDown):
		return status.Error(codes.Unavailable, ShutdownMessage)
	case errors.Is(err, sharedstate.ErrInvalidDependencyName), errors.Is(err, sharedstate.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, sharedstate.ErrTooManyDependencies):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// apiServer implements the protocol's Agent service.
type apiServer struct {
	fuseboxv1.UnimplementedAgentServer
	a *Agent
}

func (s *apiServer) decision(method, dep string, d sharedstate.Decision) *fuseboxv1.Decision {
	s.a.m.decision(method, d)
	var m *fuseboxv1.DecisionSnapshot
	if snap := s.a.eng.Snapshot(dep); snap != nil {
		m = clientSnapshot(snap, s.a.processShare(dep, snap.ConcurrencyLimit), nil)
	}
	return &fuseboxv1.Decision{Verdict: convert.Verdict(d.Verdict), Reason: convert.Reason(d.Reason), Snapshot: m}
}

// clientSnapshot is the one place the agent builds what a client decides a
// dependency by (a push, an answer, the Welcome's default): the engine's
// snapshot with limit, the process's part of the node's concurrency share,
// and policy, the JSON document of the snapshot's policy (pushes and the
// Welcome; nil for answers, which are under the policy last pushed).
func clientSnapshot(snap *sharedstate.Snapshot, limit uint32, policy []byte) *fuseboxv1.DecisionSnapshot {
	m := convert.SnapshotToProto(snap)
	m.ConcurrencyLimit = limit
	m.PolicyJson = policy
	return m
}

// AcquireRetry takes one retry from the fleet budget (counted as a retry
// when allowed, as rejected when not).
func (s *apiServer) AcquireRetry(ctx context.Context, req *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
	if s.a.closing.Load() {
		return nil, rpcError(errShuttingDown)
	}
	if err := sharedstate.ValidateDependencyName(req.GetDependency()); err != nil {
		return nil, rpcError(err)
	}
	return s.decision("acquire_retry", req.GetDependency(), s.a.eng.AcquireRetry(req.GetDependency())), nil
}

// AcquireProbe asks for this node's half-open probe slot.
func (s *apiServer) AcquireProbe(ctx context.Context, req *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
	if s.a.closing.Load() {
		return nil, rpcError(errShuttingDown)
	}
	if err := sharedstate.ValidateDependencyName(req.GetDependency()); err != nil {
		return nil, rpcError(err)
	}
	return s.decision("acquire_probe", req.GetDependency(), s.a.eng.AcquireProbe(req.GetDependency())), nil
}

// Check decides an attempt: a first attempt (or unspecified) is decided
// without counting anything, as Engine.Decide; a retry is AcquireRetry and
// a probe AcquireProbe, which take budget or the probe slot. Report the
// outcome afterwards.
func (s *apiServer) Check(ctx context.Context, req *fuseboxv1.CheckRequest) (*fuseboxv1.Decision, error) {
	if s.a.closing.Load() {
		return nil, rpcError(errShuttingDown)
	}
	dep := req.GetDependency()
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return nil, rpcError(err)
	}
	var d sharedstate.Decision
	switch convert.AttemptKind(req.GetKind()) {
	case sharedstate.Retry:
		d = s.a.eng.AcquireRetry(dep)
	case sharedstate.Probe:
		d = s.a.eng.AcquireProbe(dep)
	default:
		d = s.a.eng.Decide(dep, sharedstate.FirstAttempt)
	}
	return s.decision("check", dep, d), nil
}

// Report records outcomes. Per Engine.Record's counting rule, a first
// attempt counts the attempt and its outcome, a retry or probe only its
// outcome (AcquireRetry/AcquireProbe counted the attempt). Refused
// dependencies (invalid names, past maxDependencies) come back in errors,
// at most maxReportErrors of them plus a summary.
func (s *apiServer) Report(ctx context.Context, req *fuseboxv1.ReportRequest) (*fuseboxv1.ReportResponse, error) {
	a := s.a
	if a.closing.Load() {
		return nil, rpcError(errShuttingDown)
	}
	resp := &fuseboxv1.ReportResponse{}
	trusted := trustedCaller(ctx) // its names confirm (confirm.go)
	var refused map[string]bool
	extra := 0
	refuse := func(dep string, err error) {
		a.m.refused(err)
		if refused == nil {
			refused = map[string]bool{}
		}
		if refused[dep] {
			return
		}
		refused[dep] = true
		if len(resp.Errors) < maxReportErrors {
			resp.Errors = append(resp.Errors, &fuseboxv1.DependencyError{Dependency: clipName(dep), Message: err.Error()})
		} else {
			extra++
		}
	}
	var outcomes uint64
	for _, o := range req.GetOutcomes() {
		dep := o.GetDependency()
		if refused[dep] {
			continue
		}
		oc, ok := convert.Outcome(o.GetOutcome())
		if !ok {
			refuse(dep, fmt.Errorf("%w: outcome %v", sharedstate.ErrInvalidArgument, o.GetOutcome()))
			continue
		}
		n := uint64(max(o.GetCount(), 1))
		if err := a.takeReport(dep, n); err != nil {
			refuse(dep, err)
			continue
		}
		if err := a.eng.AddCounts(dep, countsFor(convert.AttemptKind(o.GetKind()), oc, n)); err != nil {
			refuse(dep, err)
			continue
		}
		if trusted {
			a.confirm(dep)
		}
		outcomes += n
	}
	for _, p := range req.GetProbeResults() {
		a.probeResult(p)
	}
	if extra > 0 {
		resp.Errors = append(resp.Errors, &fuseboxv1.DependencyError{
			Message: fmt.Sprintf("%d more dependencies refused (only the first %d are listed)", extra, maxReportErrors)})
	}
	resp.Accepted = uint32(min(outcomes, uint64(^uint32(0))))
	a.m.outcomes.WithLabelValues("report").Add(float64(outcomes))
	return resp, nil
}

// countsFor turns n identical outcomes into window counts by
// Engine.Record's counting rule.
func countsFor(kind sharedstate.AttemptKind, o sharedstate.Outcome, n uint64) sharedstate.Counts {
	var c sharedstate.Counts
	if o == sharedstate.Rejected {
		c.Rejected = n
		return c
	}
	if kind == sharedstate.FirstAttempt {
		c.FirstAttempts = n
	}
	switch o {
	case sharedstate.Success:
		c.Successes = n
	case sharedstate.Failure:
		c.Failures = n
	case sharedstate.Slow:
		c.Successes, c.SlowCalls = n, n
	case sharedstate.SlowFailure:
		c.Failures, c.SlowCalls = n, n
	}
	return c
}

// probeResult feeds a probe's result to the engine, slow or not (half-open
// judges a slow probe by the slow-call rule); a resulting transition goes
// straight out.
func (a *Agent) probeResult(p *fuseboxv1.ProbeResult) {
	if rec, ok := a.eng.ProbeOutcome(p.GetDependency(), sharedstate.OutcomeOf(!p.GetSuccess(), p.GetSlow())); ok {
		a.proposeNow(rec)
	}
}

// Session serves one client process: Hello, then Welcome and the snapshots
// of the dependencies it named; then count deltas in, snapshot updates out
// whenever a followed dependency's snapshot changes (dependencies a client
// reports or subscribes to are followed). Deltas are added verbatim
// (Engine.AddCounts): their retries must not include those AcquireRetry
// admitted, which the agent counted already. It ends with
// codes.Unavailable and ShutdownMessage when the agent shuts down.
func (s *apiServer) Session(stream fuseboxv1.Agent_SessionServer) error {
	a := s.a
	if a.closing.Load() {
		return rpcError(errShuttingDown)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "fusebox: a session starts with a hello")
	}
	sess := newSession(a, hello)
	sess.trusted = trustedCaller(stream.Context())
	if !a.hub.add(sess, a.cfg.MaxSessions) {
		a.m.sessionsRefused.Inc()
		return status.Errorf(codes.ResourceExhausted, "fusebox: agent %s has --max-sessions=%d sessions open; session refused", a.cfg.Name, a.cfg.MaxSessions)
	}
	defer sess.close() // after remove: the remaining sessions are told
	defer a.hub.remove(sess)
	a.m.sessionsOpened.Inc()
	a.lg.Debug("session opened", "service", clipName(hello.GetService()), "instance", clipName(hello.GetInstance()))

	def := a.eng.Policy(sharedstate.DefaultPolicyName)
	defJSON, _ := json.Marshal(def) // a valid policy always marshals
	welcome := &fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Welcome{Welcome: &fuseboxv1.Welcome{
		Node: a.cfg.Name, Zone: a.cfg.Zone, AgentVersion: Version,
		DefaultSnapshot: clientSnapshot(convert.PolicySnapshot(sharedstate.DefaultPolicyName, def), 0, defJSON),
	}}}
	if err := stream.Send(welcome); err != nil {
		return err
	}
	sess.subscribe(hello.GetDependencies())

	recvErr := make(chan error, 1)
	go func() { recvErr <- sess.recvLoop(stream) }()

	ctx := stream.Context()
	for {
		if err := sess.flush(stream); err != nil {
			return err
		}
		select {
		case <-a.shutdown:
			return rpcError(errShuttingDown)
		case <-ctx.Done():
			return rpcError(ctx.Err())
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-sess.kick:
		}
	}
}

// session is one Session stream's state. The receive goroutine ingests
// deltas and subscribes; the handler goroutine sends (flush).
type session struct {
	a       *Agent
	kick    chan struct{}
	trusted bool // over the unix socket or in process: the names it uses confirm (confirm.go)

	mu      sync.Mutex
	subs    map[string]struct{}
	pending map[string]struct{}
	errs    []*fuseboxv1.DependencyError
	refused map[string]bool // names already reported as refused (clipped, bounded)
	bytes   int64           // dependency state held, against --max-session-bytes (guarded by mu)

	sent map[string]sentSnapshot // owned by the sender

	inFlight map[string]uint64 // the client's last in-flight reports (guarded by mu)
}

// sentSnapshot is what a session last pushed for a dependency (a policy
// change changes the snapshot).
type sentSnapshot struct {
	snap  *sharedstate.Snapshot
	limit uint32 // the process's concurrency share
}

// maxRefusedRemembered bounds a session's memory of refused names.
const maxRefusedRemembered = 1024

func newSession(a *Agent, h *fuseboxv1.Hello) *session {
	return &session{
		a: a, kick: make(chan struct{}, 1),
		subs: map[string]struct{}{}, pending: map[string]struct{}{}, refused: map[string]bool{},
		sent: map[string]sentSnapshot{},
	}
}

func (s *session) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// changed is called by the hub when dep's snapshot or policy changed.
func (s *session) changed(dep string) {
	s.mu.Lock()
	_, ok := s.subs[dep]
	if ok {
		s.pending[dep] = struct{}{}
	}
	s.mu.Unlock()
	if ok {
		s.signal()
	}
}

// subscribe follows deps: they are tracked by the engine (so they have a
// snapshot) and their snapshots are pushed now and on every change.
func (s *session) subscribe(deps []string) {
	for _, dep := range deps {
		s.mu.Lock()
		_, known := s.subs[dep]
		s.mu.Unlock()
		if known {
			continue
		}
		if s.a.eng.Snapshot(dep) == nil {
			if err := s.a.eng.AddCounts(dep, sharedstate.Counts{}); err != nil {
				s.refuse(dep, err)
				continue
			}
		}
		if _, err := s.follow(dep); err != nil {
			s.refuse(dep, err)
		}
	}
	s.signal()
}

// follow adds dep to the subscriptions (bounded by maxDependencies and
// the session byte bounds) and marks it pending. It returns whether this
// call added it, or why dep cannot be followed.
func (s *session) follow(dep string) (added bool, err error) {
	s.mu.Lock()
	if _, ok := s.subs[dep]; ok {
		s.mu.Unlock()
		return false, nil
	}
	if len(s.subs) >= s.a.cfg.MaxDependencies {
		s.mu.Unlock()
		return false, fmt.Errorf("%w: %s not followed: this session follows --max-dependencies=%d", sharedstate.ErrTooManyDependencies,
			clipName(dep), s.a.cfg.MaxDependencies)
	}
	if err := s.reserve(dep); err != nil {
		s.mu.Unlock()
		return false, err
	}
	s.subs[dep] = struct{}{}
	s.pending[dep] = struct{}{}
	s.mu.Unlock()
	if s.trusted {
		s.a.confirm(dep)
	}
	s.a.hub.follow(dep)
	s.a.hub.changed(dep) // every follower's process share changed
	return true, nil
}

// refuse reports a refusal to the client once per name (remembered clipped:
// a name someone else chose is kept by its first 64 bytes at most).
func (s *session) refuse(dep string, err error) {
	s.a.m.refused(err)
	dep = clipName(dep)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused[dep] {
		return
	}
	if len(s.refused) < maxRefusedRemembered {
		s.refused[dep] = true
	}
	if len(s.errs) < maxReportErrors {
		s.errs = append(s.errs, &fuseboxv1.DependencyError{Dependency: dep, Message: err.Error()})
	}
}

// recvLoop ingests what the client sends until the stream ends.
func (s *session) recvLoop(stream fuseboxv1.Agent_SessionServer) error {
	a := s.a
	counted := a.m.outcomes.WithLabelValues("session")
	// followed holds the dependencies this loop saw followed and their
	// rate buckets, so that a delta of one costs no lock (subscriptions
	// are never removed; this is a subset of subs, bounded like it).
	followed := map[string]*rateBucket{}
	rate := float64(a.cfg.MaxReportRate)
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		d := req.GetDeltas()
		if d == nil {
			continue // a second hello changes nothing
		}
		var outcomes uint64
		newDeps := false
		now := a.clock.Now()
		for _, dc := range d.GetDeltas() {
			dep := dc.GetDependency()
			c := convert.CountsFromProto(dc.GetCounts())
			b, ok := followed[dep]
			if !ok {
				// A dependency new to this loop: a valid name, and room in
				// the session's state, before anything is counted.
				if err := sharedstate.ValidateDependencyName(dep); err != nil {
					s.refuse(dep, err)
					newDeps = true
					continue
				}
				added, err := s.follow(dep)
				if err != nil {
					s.refuse(dep, err)
					newDeps = true
					continue
				}
				b = &rateBucket{}
				followed[dep] = b
				newDeps = newDeps || added
			}
			if err := c.CheckDelta(); err != nil {
				s.refuse(dep, err)
				newDeps = true
				continue
			}
			n := c.Requests() + c.Rejected
			if !b.take(now, n, rate) {
				s.refuse(dep, a.rateErr(dep, n))
				newDeps = true
				continue
			}
			if err := a.eng.AddCounts(dep, c); err != nil {
				s.refuse(dep, err)
				newDeps = true
				continue
			}
			if s.trusted {
				a.confirm(dep) // again: the engine may have forgotten it since
			}
			outcomes += n
			if dc.InFlight != nil {
				s.reportInFlight(dep, dc.GetInFlight())
			}
		}
		for _, p := range d.GetProbeResults() {
			a.probeResult(p)
		}
		if len(d.GetSubscribe()) > 0 {
			s.subscribe(d.GetSubscribe())
		} else if newDeps {
			s.signal()
		}
		counted.Add(float64(outcomes))
	}
}

// flush sends pending errors and the changed snapshots of pending
// dependencies, each with its policy's JSON document (Engine.PolicyJSON,
// made once per policy for every session).
func (s *session) flush(stream fuseboxv1.Agent_SessionServer) error {
	s.mu.Lock()
	if len(s.pending) == 0 && len(s.errs) == 0 {
		s.mu.Unlock()
		return nil
	}
	pending := s.pending
	s.pending = map[string]struct{}{}
	errs := s.errs
	s.errs = nil
	s.mu.Unlock()

	for _, e := range errs {
		if err := stream.Send(&fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Error{Error: e}}); err != nil {
			return err
		}
	}
	var upd []*fuseboxv1.DecisionSnapshot
	for dep := range pending {
		snap := s.a.eng.Snapshot(dep)
		if snap == nil {
			continue
		}
		limit := s.a.processShare(dep, snap.ConcurrencyLimit)
		if last, ok := s.sent[dep]; ok && last.snap == snap && last.limit == limit {
			continue
		}
		pol, doc := s.a.eng.PolicyJSON(dep)
		if pol != snap.Policy { // changed since: the next push brings the new one
			doc, _ = json.Marshal(snap.Policy)
		}
		s.sent[dep] = sentSnapshot{snap: snap, limit: limit}
		upd = append(upd, clientSnapshot(snap, limit, doc))
	}
	if len(upd) == 0 {
		return nil
	}
	s.a.m.snapshotsPushed.Add(float64(len(upd)))
	return stream.Send(&fuseboxv1.SessionResponse{Msg: &fuseboxv1.SessionResponse_Update{
		Update: &fuseboxv1.SnapshotUpdate{Snapshots: upd}}})
}
