package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// recoveredOpen is how long the breaker of TestAgentKilledAfterRecovery's
// dependencies stays open (every open in a row alike).
const recoveredOpen = 2 * time.Second

// TestAgentKilledAfterRecovery: an incident ends, then the agent goes
// away; the callers that fall back (Go and Python) refuse nothing. Each
// caller's dependency dies: the caller's failures trip the fleet's
// breaker, and its local fallback breaker, fed the same failures, trips
// along. The dependency recovers: the caller's probes through the agent
// close the fleet's breaker. Then the agent is killed, and each caller
// makes 20 calls, 4 at a time, to the healthy dependency: all answered,
// none refused.
//
// The issue saw the refusal minutes after the incident. What it takes is
// that the local breaker's own trip be past its open duration when the
// agent goes: a local breaker deciding from its own trip is then
// half-open, admits one probe at a time and refuses the calls beside it
// (half-open-no-permit); after minutes it is in that same state. The
// local breaker tripped before the fleet's breaker closed, so waiting one
// open duration (recoveredOpen) after the close reproduces it, and no
// longer wait would show more.
func TestAgentKilledAfterRecovery(t *testing.T) {
	w := startWorld(t, 0, agentBinary)
	// Written before the agent starts: it reads them at start.
	w.setPolicy(t, sharedstate.DefaultPolicyName, suiteDefault(t), suiteDefaultApplied)
	kinds := []string{kindGo}
	if pythonUsable() {
		kinds = append(kinds, kindPython)
	} else {
		t.Run(kindPython, needPython)
	}
	ups := map[string]*upstream{}
	for _, k := range kinds {
		up := newUpstream(t, always(http.StatusInternalServerError))
		ups[k] = up
		open := recoveredOpen.String()
		w.setPolicy(t, up.dep, fmt.Sprintf(`{"breaker": {"openDuration": %q, "maxOpenDuration": %q, "fleetMaxOpenDuration": %q}}`,
			open, open, open), func(sharedstate.Policy) bool { return true })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	i, err := w.f.Add(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := w.f.Process(i)
	if err := p.WaitLog(ctx, fleet.MsgSynced); err != nil {
		t.Fatal(err)
	}
	addr := "unix://" + p.Config().Socket
	var callers []caller
	for _, k := range kinds {
		if k == kindGo {
			callers = append(callers, newGoCallerAt(t, nil, addr, "conformance-go"))
		} else {
			callers = append(callers, newPyCaller(t, nil, addr, "conformance-python"))
		}
	}

	var recovered time.Time
	for _, c := range callers {
		up := ups[c.kind()]
		waitView(t, c, up.dep, "decides from the agent's snapshot under the dependency's policy", func(v view) bool {
			return v.FromAgent && !v.Rejecting
		})
		// The incident: the fleet's breaker opens on the caller's failures.
		callUntilRefused(t, c, up.url("/recovered"), http.StatusInternalServerError, 30*suiteMinimumRequests, "open")
		// The dependency recovers; the caller's calls, paced, are probes
		// once the breaker is half-open, and close it.
		up.set(always(http.StatusOK))
		deadline := time.Now().Add(settle)
		for {
			if v := c.view(t, up.dep); v.FromAgent && v.State == sharedstate.Closed.String() && !v.Rejecting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the fleet's breaker did not close within %v of the recovery: %+v", c.kind(), settle, c.view(t, up.dep))
			}
			c.calls(t, batch{url: up.url("/recovered"), n: 2, pace: 100 * time.Millisecond})
		}
		recovered = time.Now()
	}
	// The time the minutes stand for (see above): the scenario's
	// condition is time passing, not a state to wait for.
	time.Sleep(time.Until(recovered.Add(recoveredOpen)))

	p.Stop(syscall.SIGKILL, settle)
	for _, c := range callers {
		t.Run(c.kind(), func(t *testing.T) {
			up := ups[c.kind()]
			waitView(t, c, up.dep, "decides locally", func(v view) bool { return !v.FromAgent })
			// Each call takes 100 ms: the ones beside a probe in flight
			// would be refused by a half-open breaker.
			up.set(slowly(http.StatusOK, 100*time.Millisecond))
			before := up.count(c.kind())
			if tl := c.calls(t, batch{url: up.url("/recovered"), n: 20, concurrency: 4}); tl.OK != 20 {
				t.Errorf("20 calls to the recovered dependency without the agent: %v, want all answered", tl)
			}
			if n := up.count(c.kind()) - before; n != 20 {
				t.Errorf("the dependency saw %d requests, want 20", n)
			}
			if v := c.view(t, up.dep); v.Rejecting || v.State != sharedstate.Closed.String() {
				t.Errorf("the local fallback after the recovery: %+v, want closed, as the fleet's breaker was", v)
			}
		})
	}
	w.waitMemberDead(t, p.Name())
}

// waitMemberDead waits until the coordinator's gossip observer holds node
// dead (or no longer lists it): from then on it sends the killed agent no
// probe, so none is still waiting when the coordinator closes (goleak).
func (w *world) waitMemberDead(t *testing.T, node string) {
	t.Helper()
	sstest.EventuallyNoError(t, settle, "the coordinator to hold "+node+" dead", func() error {
		var out struct {
			Members []struct{ Node, Status string }
		}
		if err := json.Unmarshal([]byte(w.ctl(t, "", "members", "-o", "json")), &out); err != nil {
			return err
		}
		for _, m := range out.Members {
			if m.Node == node && m.Status != "dead" && m.Status != "left" {
				return fmt.Errorf("it holds %s %s", node, m.Status)
			}
		}
		return nil
	})
}
