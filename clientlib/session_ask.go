package clientlib

import (
	"context"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// The session's synchronous questions to the agent: retries, probes and
// strict checks (fleet's acquireRetry, acquireProbe and check), each a
// unary call bounded by Config.AgentWait.

// acquireRetry implements fleet.
func (s *session) acquireRetry(ctx context.Context, st *depState) (sharedstate.Decision, bool) {
	c := s.c
	d, err := s.ask(ctx, st, "acquire_retry", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return c.agent.AcquireRetry(ctx, s.acquireRequest(st))
	})
	if err != nil {
		return sharedstate.Decision{}, false
	}
	if d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT {
		return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: rejectReason(d.GetReason())}, true
	}
	return sharedstate.Decision{Verdict: sharedstate.Allow}, true
}

// acquireProbe implements fleet.
func (s *session) acquireProbe(ctx context.Context, st *depState, gen uint64) (sharedstate.Decision, uint64, bool) {
	c := s.c
	d, err := s.ask(ctx, st, "acquire_probe", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return c.agent.AcquireProbe(ctx, s.acquireRequest(st))
	})
	if err != nil {
		return sharedstate.Decision{}, 0, false
	}
	switch d.GetVerdict() {
	case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
		if ps := d.GetSnapshot(); ps != nil {
			gen = ps.GetGeneration()
		}
		return sharedstate.Decision{Verdict: sharedstate.AllowProbe}, gen, true
	case fuseboxv1.Verdict_VERDICT_ALLOW:
		return sharedstate.Decision{Verdict: sharedstate.Allow}, 0, true
	}
	return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: rejectReason(d.GetReason())}, 0, true
}

// check implements fleet.
func (s *session) check(ctx context.Context, st *depState) (sharedstate.Decision, bool) {
	c := s.c
	d, err := s.ask(ctx, st, "check", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return c.agent.Check(ctx, &fuseboxv1.CheckRequest{Dependency: st.name,
			Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Service: c.service, Instance: c.cfg.Instance})
	})
	if err != nil {
		return sharedstate.Decision{}, false
	}
	switch d.GetVerdict() {
	case fuseboxv1.Verdict_VERDICT_REJECT:
		return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: rejectReason(d.GetReason())}, true
	case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
		return sharedstate.Decision{Verdict: sharedstate.AllowProbe}, true
	}
	return sharedstate.Decision{Verdict: sharedstate.Allow}, true
}

// ask runs one unary call about st under Config.AgentWait; the snapshot of
// its answer is installed when it is newer than st's.
func (s *session) ask(ctx context.Context, st *depState, call string, f func(context.Context) (*fuseboxv1.Decision, error)) (*fuseboxv1.Decision, error) {
	c := s.c
	epoch := s.epoch.Load()
	actx, cancel := context.WithTimeout(ctx, c.cfg.AgentWait)
	defer cancel()
	d, err := f(actx)
	if err != nil {
		if ctx.Err() == nil {
			c.metrics.fallback(call)
		}
		return d, err
	}
	s.applyAnswer(st, epoch, d)
	return d, nil
}

// applyAnswer installs the snapshot of an agent's answer given in session
// epoch (see applyAgentSnapshot), if that session is still up.
func (s *session) applyAnswer(st *depState, epoch uint64, d *fuseboxv1.Decision) {
	ps := d.GetSnapshot()
	if ps == nil || ps.GetDependency() != st.name {
		return
	}
	if !s.up() || s.epoch.Load() != epoch {
		return
	}
	s.c.applyAgentSnapshot(st, ps, false)
}

// rejectReason is the reason of an agent's refusal (open when it names none).
func rejectReason(r fuseboxv1.RejectReason) sharedstate.Reason {
	if reason := convert.ReasonFromProto(r); reason != sharedstate.ReasonNone {
		return reason
	}
	return sharedstate.ReasonOpen
}

func (s *session) acquireRequest(st *depState) *fuseboxv1.AcquireRequest {
	return &fuseboxv1.AcquireRequest{Dependency: st.name, Service: s.c.service, Instance: s.c.cfg.Instance}
}
