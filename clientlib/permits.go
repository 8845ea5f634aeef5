package clientlib

import (
	"context"
	"sync/atomic"

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
			return grant{}, st.count(d, &st.rare.retriesAgent, &st.rare.rejectedAgent)
		}
	}
	c.ensureLocalPolicy(st)
	return grant{}, st.count(c.engine.AcquireRetry(st.name), &st.rare.retriesLocal, &st.rare.rejectedLocal)
}

// acquireProbe asks for a half-open probe permit.
func (st *depState) acquireProbe(ctx context.Context, askFleet bool, dec *decision) (grant, error) {
	c := st.c
	if askFleet && c.viaFleet(st) {
		if d, gen, ok := c.fleet.acquireProbe(ctx, st, dec.snap.Generation); ok {
			probe := d.Verdict == sharedstate.AllowProbe // else, allowed, the fleet counted a first attempt
			return grant{probe: probe, byAgent: probe, generation: gen}, st.count(d, &st.rare.probesAgent, &st.rare.rejectedAgent)
		}
	}
	c.ensureLocalPolicy(st)
	d := c.engine.AcquireProbe(st.name)
	return grant{probe: d.Verdict == sharedstate.AllowProbe}, st.count(d, &st.rare.probesLocal, &st.rare.rejectedLocal)
}

// count counts a retry or probe decision (in admitted, else in refused)
// and returns its refusal, nil when it admits the attempt.
func (st *depState) count(d sharedstate.Decision, admitted, refused *atomic.Uint64) error {
	if !d.Allowed() {
		refused.Add(1)
		return st.rejection(d.Reason)
	}
	admitted.Add(1)
	return nil
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
