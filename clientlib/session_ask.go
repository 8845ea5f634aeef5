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
	d, ok := s.ask(ctx, st, "acquire_retry", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return s.c.agent.AcquireRetry(ctx, s.acquireRequest(st))
	})
	return decisionOf(d, sharedstate.Allow), ok
}

// acquireProbe implements fleet.
func (s *session) acquireProbe(ctx context.Context, st *depState, gen uint64) (sharedstate.Decision, uint64, bool) {
	d, ok := s.ask(ctx, st, "acquire_probe", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return s.c.agent.AcquireProbe(ctx, s.acquireRequest(st))
	})
	dec := decisionOf(d, sharedstate.Reject)
	if dec.Verdict != sharedstate.AllowProbe {
		gen = 0
	} else if ps := d.GetSnapshot(); ps != nil {
		gen = ps.GetGeneration()
	}
	return dec, gen, ok
}

// check implements fleet.
func (s *session) check(ctx context.Context, st *depState) (sharedstate.Decision, bool) {
	c := s.c
	d, ok := s.ask(ctx, st, "check", func(ctx context.Context) (*fuseboxv1.Decision, error) {
		return c.agent.Check(ctx, &fuseboxv1.CheckRequest{Dependency: st.name,
			Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Service: c.service, Instance: c.cfg.Instance})
	})
	return decisionOf(d, sharedstate.Allow), ok
}

// decisionOf reads an agent's answer, unknown standing for a verdict it
// does not name; a refusal without a reason is the breaker's (open).
func decisionOf(d *fuseboxv1.Decision, unknown sharedstate.Verdict) sharedstate.Decision {
	v, known := convert.VerdictFromProto(d.GetVerdict())
	if !known {
		v = unknown
	}
	if v != sharedstate.Reject {
		return sharedstate.Decision{Verdict: v}
	}
	reason := convert.ReasonFromProto(d.GetReason())
	if reason == sharedstate.ReasonNone {
		reason = sharedstate.ReasonOpen
	}
	return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: reason}
}

// ask runs one unary call about st under Config.AgentWait; the snapshot of
// its answer is installed when it is newer than st's. ok is false when the
// agent did not answer.
func (s *session) ask(ctx context.Context, st *depState, call string, f func(context.Context) (*fuseboxv1.Decision, error)) (d *fuseboxv1.Decision, ok bool) {
	c := s.c
	epoch := s.epoch.Load()
	actx, cancel := context.WithTimeout(ctx, c.cfg.AgentWait)
	defer cancel()
	d, err := f(actx)
	if err != nil {
		if ctx.Err() == nil {
			c.metrics.fallback(call)
		}
		return nil, false
	}
	s.applyAnswer(st, epoch, d)
	return d, true
}

// applyAnswer installs the snapshot of an agent's answer given in session
// epoch (see applyAgentSnapshot), if that session is still up.
func (s *session) applyAnswer(st *depState, epoch uint64, d *fuseboxv1.Decision) {
	if ps := d.GetSnapshot(); ps != nil && ps.GetDependency() == st.name && s.up() && s.epoch.Load() == epoch {
		s.c.applyAgentSnapshot(st, ps, false)
	}
}

func (s *session) acquireRequest(st *depState) *fuseboxv1.AcquireRequest {
	return &fuseboxv1.AcquireRequest{Dependency: st.name, Service: s.c.service, Instance: s.c.cfg.Instance}
}
