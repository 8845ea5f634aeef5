package clientlib

import (
	"context"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// admitRetry takes one retry from the budget: the fleet's, else the local one.
func (st *depState) admitRetry(ctx context.Context, sp *stripe) (grant, error) {
	dec := st.dec.Load()
	if dec.first.Verdict == sharedstate.Reject {
		sp.rejected.Add(1)
		return grant{}, dec.rejErr
	}
	c := st.c
	if c.viaFleet(st) {
		if d, ok := c.fleet.acquireRetry(ctx, st); ok {
			if !d.Allowed() {
				st.rare.rejectedAgent.Add(1)
				return grant{}, st.rejection(d.Reason)
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
func (st *depState) acquireProbe(ctx context.Context, askFleet bool, dec *decision) (grant, error) {
	c := st.c
	if askFleet && c.viaFleet(st) {
		if d, gen, ok := c.fleet.acquireProbe(ctx, st, dec.snap.Generation); ok {
			switch d.Verdict {
			case sharedstate.AllowProbe:
				st.rare.probesAgent.Add(1)
				return grant{probe: true, byAgent: true, generation: gen}, nil
			case sharedstate.Allow:
				st.rare.probesAgent.Add(1) // the fleet counted a first attempt
				return grant{}, nil
			default:
				st.rare.rejectedAgent.Add(1)
				return grant{}, st.rejection(d.Reason)
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
// whether the fleet answered.
func (st *depState) check(ctx context.Context) (sharedstate.Decision, bool) {
	c := st.c
	if c.viaFleet(st) {
		if d, ok := c.fleet.check(ctx, st); ok {
			return d, true
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
		st.c.fleet.probeResult(st, g.generation, success, slow)
		return
	}
	st.c.engine.ProbeOutcome(st.name, sharedstate.OutcomeOf(!success, slow))
}
