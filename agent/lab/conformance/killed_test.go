package conformance

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// TestAgentKilled: the agent of every caller is killed (SIGKILL). The Go
// and Python clients keep working on their local fallback: calls go on,
// the force-open the agent pushed holds, and their local breaker, under
// the last policy the agent pushed, stops calling a dependency that dies.
// The proxy goes with its agent: its callers get a refused connection at
// once, never a hang.
func TestAgentKilled(t *testing.T) {
	w := startWorld(t, 0, agentBinary)
	// Written before the agent starts: it reads them at start.
	w.setPolicy(t, sharedstate.DefaultPolicyName, suiteDefault(t), suiteDefaultApplied)
	forced := newUpstream(t, always(http.StatusOK))
	w.ctl(t, "", "force-open", forced.dep, "--ttl", "10m", "--reason", "conformance suite")
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
	callers := []caller{newGoCallerAt(t, nil, addr, "conformance-go"), newProxyCallerAt(t, nil, p.ProxyAddr())}
	if !pythonUsable() {
		t.Run(kindPython, needPython)
	} else {
		callers = append(callers, newPyCaller(t, nil, addr, "conformance-python"))
	}

	ups := map[string]*upstream{}
	for _, c := range callers {
		up := newUpstream(t, always(http.StatusOK))
		ups[c.kind()] = up
		if c.kind() != kindProxy {
			fromAgent(t, c, up.dep)
			waitView(t, c, forced.dep, "sees the force-open", func(v view) bool { return v.FromAgent && v.Override == "forced-open" })
		}
		if tl := c.calls(t, batch{url: up.url("/live"), n: 3}); tl.OK != 3 {
			t.Fatalf("%s with its agent: %v, want 3 answered", c.kind(), tl)
		}
		if tl := c.calls(t, batch{url: forced.url("/forced"), n: 3}); tl.Rejected["forced-open"] != 3 {
			t.Fatalf("%s with its agent: %v, want 3 refused as forced-open", c.kind(), tl)
		}
	}

	p.Stop(syscall.SIGKILL, settle)
	for _, c := range callers {
		t.Run(c.kind(), func(t *testing.T) {
			up := ups[c.kind()]
			if c.kind() == kindProxy {
				tl := c.calls(t, batch{url: up.url("/live"), n: 1})
				if tl.Errors != 1 || !strings.Contains(strings.Join(tl.Errs, " "), "connection refused") {
					t.Errorf("through the killed agent's proxy: %v, want the connection refused", tl)
				}
				return
			}
			waitView(t, c, up.dep, "decides locally", func(v view) bool { return !v.FromAgent })
			if tl := c.calls(t, batch{url: up.url("/live"), n: 5}); tl.OK != 5 {
				t.Errorf("without the agent: %v, want 5 answered", tl)
			}
			if n := up.count(c.kind()); n != 3+5 {
				t.Errorf("the dependency saw %d requests, want 8", n)
			}
			waitView(t, c, forced.dep, "keeps the force-open", func(v view) bool { return !v.FromAgent && v.Override == "forced-open" })
			if tl := c.calls(t, batch{url: forced.url("/forced"), n: 5}); tl.Rejected["forced-open"] != 5 {
				t.Errorf("without the agent, on the forced-open dependency: %v, want 5 refused as forced-open", tl)
			}
			if n := forced.count(c.kind()); n != 0 {
				t.Errorf("%d requests reached the forced-open dependency", n)
			}

			// The dependency dies: the local breaker opens under the
			// pushed policy (10 requests at 50%), and nothing more is sent.
			up.set(always(http.StatusInternalServerError))
			before := up.count(c.kind())
			made := callUntilRefused(t, c, up.url("/live"), http.StatusInternalServerError, 30*suiteMinimumRequests, "open")
			// The window holds at least the 5 successes since the kill: at
			// 50%, as many failures.
			if made < 5 {
				t.Errorf("the local breaker opened after %d failures", made)
			}
			sent := up.count(c.kind())
			if sent-before != made {
				t.Errorf("%d calls answered, the dependency saw %d", made, sent-before)
			}
			if tl := c.calls(t, batch{url: up.url("/live"), n: 10}); tl.Rejected["open"] != 10 {
				t.Errorf("10 calls on the open local breaker: %v, want all refused as open", tl)
			}
			if n := up.count(c.kind()); n != sent {
				t.Errorf("%d requests reached the dependency after the local breaker opened", n-sent)
			}
			t.Logf("%s: the local breaker opened after %d failures", c.kind(), made)
		})
	}
}
