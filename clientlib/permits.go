package clientlib

import (
	"context"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// admitRetry takes one retry from the budget: the agent's, else the local one.
func (st *depState) admitRetry(ctx context.Context, sp *stripe) (grant, error) {
	dec := st.dec.Load()
	if dec.first.Verdict == sharedstate.Reject {
		sp.rejected.Add(1)
		return grant{}, dec.rejErr
	}
	c := st.c
	if c.viaAgent(st) {
		d, err := c.askAgent(ctx, st, "acquire_retry", func(ctx context.Context) (*fuseboxv1.Decision, error) {
			return c.agent.AcquireRetry(ctx, c.acquireRequest(st))
		})
		if err == nil {
			if d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT {
				st.rare.rejectedAgent.Add(1)
				return grant{}, st.rejection(rejectReason(d.GetReason()))
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
		d, err := c.askAgent(ctx, st, "acquire_probe", func(ctx context.Context) (*fuseboxv1.Decision, error) {
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
				return grant{}, st.rejection(rejectReason(d.GetReason()))
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
		d, err := c.askAgent(ctx, st, "check", func(ctx context.Context) (*fuseboxv1.Decision, error) {
			return c.agent.Check(ctx, &fuseboxv1.CheckRequest{Dependency: st.name,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Service: c.service, Instance: c.cfg.Instance})
		})
		if err == nil {
			switch d.GetVerdict() {
			case fuseboxv1.Verdict_VERDICT_REJECT:
				return sharedstate.Decision{Verdict: sharedstate.Reject, Reason: rejectReason(d.GetReason())}, true
			case fuseboxv1.Verdict_VERDICT_ALLOW_PROBE:
				return sharedstate.Decision{Verdict: sharedstate.AllowProbe}, true
			}
			return sharedstate.Decision{Verdict: sharedstate.Allow}, true
		}
	}
	c.ensureLocalPolicy(st)
	return c.engine.Decide(st.name, sharedstate.FirstAttempt), false
}

// finishProbe reports a probe's result to whoever granted it: whether it
// succeeded and whether it took at least slowCallDuration (half-open judges
// a slow probe by the policy's slow-call rule).
func (st *depState) finishProbe(g grant, success, slow bool) {
	if !g.probe {
		return
	}
	if g.byAgent {
		st.c.sess.addProbeResult(st.name, g.generation, success, slow)
		return
	}
	st.c.engine.ProbeOutcome(st.name, sharedstate.OutcomeOf(!success, slow))
}
