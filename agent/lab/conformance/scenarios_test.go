package conformance

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// suiteDefault is the fleet default policy of the suite's worlds (a
// complete document, as _default must be): the built-in defaults with the
// classic trip rule (no confidence bound, no fast path), so that counts
// decide exactly; 10 requests at 50% failures trip, from one failing node
// up; an open breaker stays open for a minute unless a scenario says
// otherwise; attempts get 2 s (a loaded machine answers loopback HTTP in
// far less).
func suiteDefault(t *testing.T) string {
	t.Helper()
	p := sharedstate.DefaultPolicy()
	b := &p.Breaker
	b.Confidence, b.FastPath = 0, false
	b.MinimumRequests, b.FailureRateThreshold, b.MinFailingNodes = suiteMinimumRequests, 0.5, 1
	b.Window, b.OpenDuration, b.FleetMaxOpenDuration = sharedstate.Duration(10*time.Second),
		sharedstate.Duration(time.Minute), sharedstate.Duration(time.Minute)
	p.Retry.PerAttemptTimeout = sharedstate.Duration(2 * time.Second)
	doc, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

const suiteMinimumRequests = 10

// suiteDefaultApplied says whether p is the effective policy suiteDefault
// makes.
func suiteDefaultApplied(p sharedstate.Policy) bool {
	b := p.Breaker
	return b.MinimumRequests == suiteMinimumRequests && b.MinFailingNodes == 1 && !b.FastPath && b.Confidence == 0 &&
		b.OpenDuration.Std() == time.Minute && p.Retry.PerAttemptTimeout.Std() == 2*time.Second
}

// TestCallers runs the client contract's scenarios against the three kinds
// of callers, each on its own agent of one fleet: the Go clientlib on
// agent-0, the egress proxy of agent-1, the Python client on agent-2.
// Scenarios about one caller run once per caller (subtests named after
// it); those about the fleet run the three together.
func TestCallers(t *testing.T) {
	w := newWorld(t, 3)
	w.setPolicy(t, sharedstate.DefaultPolicyName, suiteDefault(t), suiteDefaultApplied)
	callers := []caller{newGoCaller(t, w.agents[0], "conformance-go"), newProxyCaller(t, w.agents[1])}
	if !pythonUsable() {
		t.Run(kindPython, needPython) // skipped, saying why (or failed under FUSEBOX_REQUIRE_PYTHON=1)
	} else {
		a := w.agents[2]
		callers = append(callers, newPyCaller(t, a, "unix://"+a.SocketPath(), "conformance-python"))
	}
	perCaller := func(t *testing.T, f func(t *testing.T, c caller)) {
		for _, c := range callers {
			t.Run(c.kind(), func(t *testing.T) { f(t, c) })
		}
	}

	t.Run("a dependency that dies is no longer called once the fleet opens", func(t *testing.T) {
		perCaller(t, func(t *testing.T, c caller) { testDies(t, w, c) })
	})
	t.Run("POST without an Idempotency-Key is never retried", func(t *testing.T) {
		perCaller(t, func(t *testing.T, c caller) { testPOST(t, c) })
	})
	t.Run("the retry budget is the fleet's", func(t *testing.T) { testBudget(t, w, callers) })
	t.Run("half-open probes are fleet-wide", func(t *testing.T) { testProbes(t, w, callers) })
	t.Run("a force-open is obeyed by every caller", func(t *testing.T) { testForceOpen(t, w, callers) })
	t.Run("a mixed fleet trips as one", func(t *testing.T) { testMixed(t, w, callers) })
}

// waitView waits until cond holds of what c decides dep by.
func waitView(t *testing.T, c caller, dep, what string, cond func(view) bool) {
	t.Helper()
	var last view
	sstest.EventuallyNoError(t, settle, c.kind()+" caller: "+what+" ("+dep+")", func() error {
		if last = c.view(t, dep); cond(last) {
			return nil
		}
		return fmt.Errorf("it sees %+v", last)
	})
}

// fromAgent waits until c decides dep from its agent's snapshot, closed.
func fromAgent(t *testing.T, c caller, dep string) {
	t.Helper()
	waitView(t, c, dep, "decides from the agent's snapshot", func(v view) bool { return v.FromAgent && !v.Rejecting })
}

// callUntilRefused makes one call after another to url through c until
// Fusebox refuses one (at most limit calls) and returns how many calls
// were made before it. Every call before must have been answered with
// status.
func callUntilRefused(t *testing.T, c caller, url string, status, limit int, wantReason string) int {
	t.Helper()
	for i := range limit {
		tl := c.calls(t, batch{url: url, n: 1})
		switch {
		case tl.rejected() == 1:
			if tl.Rejected[wantReason] != 1 {
				t.Fatalf("call %d: refused %v, want %s", i+1, tl.Rejected, wantReason)
			}
			return i
		case status >= 500 && tl.Failed == 1, status < 500 && tl.OK == 1:
		default:
			t.Fatalf("call %d: %v, want an answer %d", i+1, tl, status)
		}
	}
	t.Fatalf("%d calls answered %d and none refused", limit, status)
	return 0
}

// testDies: the dependency answers 500 to everything; the caller's own
// failures open the breaker, which reaches every agent; from the first
// refusal on, nothing more reaches the dependency.
func testDies(t *testing.T, w *world, c caller) {
	up := newUpstream(t, always(http.StatusInternalServerError))
	fromAgent(t, c, up.dep)
	made := callUntilRefused(t, c, up.url("/dies"), http.StatusInternalServerError, 30*suiteMinimumRequests, "open")
	sent := up.count(c.kind())
	if sent != made {
		t.Fatalf("%d calls answered, the dependency saw %d requests", made, sent)
	}
	if sent < suiteMinimumRequests {
		t.Fatalf("refused after %d failures: the breaker opened before minimumRequests (%d)", sent, suiteMinimumRequests)
	}
	w.waitAgents(t, "holds "+up.dep+" open", func(a *agent.Agent) bool {
		s := snapshot(a, up.dep)
		return s != nil && s.State == sharedstate.Open
	})
	waitView(t, c, up.dep, "refuses", func(v view) bool { return v.Rejecting })
	tl := c.calls(t, batch{url: up.url("/dies"), n: 20, concurrency: 2})
	if tl.Rejected["open"] != 20 {
		t.Errorf("20 calls on the open breaker: %v, want all refused as open", tl)
	}
	if n := up.count(""); n != sent {
		t.Errorf("the dependency saw %d requests after the first refusal (%d before it, %d after)", n-sent, sent, n)
	}
	t.Logf("%s: open after %d failures", c.kind(), sent)
}

// testPOST: the dependency answers 503 (retryable) to everything. POSTs
// without a key get one attempt each; POSTs with one are retried up to
// maxAttempts (3), every attempt carrying the caller's key unchanged.
func testPOST(t *testing.T, c caller) {
	up := newUpstream(t, always(http.StatusServiceUnavailable))
	fromAgent(t, c, up.dep)
	// 2 + 2×3 attempts stay below minimumRequests: the breaker stays closed.
	plain := c.calls(t, batch{method: http.MethodPost, url: up.url("/charges"), n: 2, call: "plain"})
	keyed := c.calls(t, batch{method: http.MethodPost, url: up.url("/charges"), n: 2, call: "keyed", key: "key-" + c.kind()})
	if plain.Failed != 2 || keyed.Failed != 2 {
		t.Fatalf("POSTs without a key: %v; with one: %v; want every call answered 503", plain, keyed)
	}
	attempts := map[string][]seen{}
	for _, s := range up.requests(c.kind()) {
		attempts[s.call] = append(attempts[s.call], s)
	}
	for i := range 2 {
		call := fmt.Sprintf("plain-%d", i)
		if got := attempts[call]; len(got) != 1 || got[0].method != http.MethodPost || got[0].key != "" {
			t.Errorf("POST %s without a key: the dependency saw %+v, want one attempt", call, got)
		}
		call, key := fmt.Sprintf("keyed-%d", i), fmt.Sprintf("key-%s-%d", c.kind(), i)
		got := attempts[call]
		if len(got) != 3 {
			t.Errorf("POST %s with a key: the dependency saw %d attempts, want 3 (maxAttempts): %+v", call, len(got), got)
		}
		for _, s := range got {
			if s.key != key || s.method != http.MethodPost {
				t.Errorf("POST %s: an attempt came as %s with Idempotency-Key %q, want POST with %q", call, s.method, s.key, key)
			}
		}
	}
	if n := len(up.requests("")); n != 8 {
		t.Errorf("the dependency saw %d requests, want 8", n)
	}
}

// testBudget: the dependency fails every call's first attempt and answers
// its retries. The budget is max(minRetriesPerSecond × window, ratio ×
// first attempts) = max(0.1/s × 60 s, 0.1 × 15) = 6 retries for the whole
// fleet, where each caller's own would allow 6 alone. The callers take
// turns, one call each, and every call waits until every agent has
// counted the calls before it (no tight timing: the turns make it
// exact). The retries that reach the dependency, whoever made them, stay
// within the budget; each caller got some of it; once it is spent nobody
// retries.
func testBudget(t *testing.T, w *world, callers []caller) {
	up := newUpstream(t, failFirst)
	w.setPolicy(t, up.dep, `{"breaker": {"minimumRequests": 100000, "window": "60s"},
		"retry": {"budget": {"ratio": 0.1, "minRetriesPerSecond": 0.1}}}`, func(p sharedstate.Policy) bool {
		return p.Breaker.Window.Std() == time.Minute && p.Retry.Budget.MinRetriesPerSecond == 0.1
	})
	for _, c := range callers {
		fromAgent(t, c, up.dep)
	}
	const rounds = 5
	for r := range rounds {
		for _, c := range callers {
			tl := c.calls(t, batch{url: up.url("/budget"), n: 1, call: fmt.Sprintf("round%d", r)})
			if tl.OK+tl.Failed != 1 {
				t.Fatalf("round %d, %s: %v, want an answer", r, c.kind(), tl)
			}
			w.waitCounted(t, up)
		}
	}
	f, _ := w.agents[0].Engine().Fleet(up.dep)
	budget := int(math.Floor(f.RetryBudget))
	retries := map[string]int{}
	total := 0
	for _, s := range up.requests("") {
		if s.nth > 1 {
			retries[s.caller]++
			total++
		}
	}
	t.Logf("retries by caller: %v; the fleet's budget: %.2f; the fleet's counts: %+v", retries, f.RetryBudget, f.Fleet)
	if budget != 6 {
		t.Errorf("the fleet's budget is %.2f, want 6 (0.1/s × 60s)", f.RetryBudget)
	}
	if total > budget {
		t.Errorf("%d retries reached the dependency, over the fleet's budget of %d", total, budget)
	}
	if granted := w.grantedRetries(up.dep); uint64(total) != granted {
		t.Errorf("%d retries reached the dependency, the agents granted %d: every retry takes one from the fleet budget", total, granted)
	}
	for _, c := range callers {
		if retries[c.kind()] == 0 {
			t.Errorf("%s made no retry: the budget is shared by the callers, not taken by the first", c.kind())
		}
		// The last round came after the budget was spent: one attempt each.
		if s := up.requestsOf(c.kind(), fmt.Sprintf("round%d-0", rounds-1)); len(s) != 1 {
			t.Errorf("%s's call of the last round reached the dependency %d times, want once (the budget is spent)", c.kind(), len(s))
		}
	}
}

// waitCounted waits until every agent's view of the fleet holds every
// first attempt the upstream received and every retry an agent granted
// (each agent counts those it granted, and gossips them).
func (w *world) waitCounted(t *testing.T, up *upstream) {
	t.Helper()
	var first uint64
	for _, s := range up.requests("") {
		if s.nth == 1 {
			first++
		}
	}
	w.waitAgents(t, fmt.Sprintf("counts the %d first attempts and the granted retries of %s", first, up.dep), func(a *agent.Agent) bool {
		f, ok := a.Engine().Fleet(up.dep)
		return ok && f.Fleet.FirstAttempts == first && f.Fleet.Retries == w.grantedRetries(up.dep)
	})
}

// grantedRetries is the sum of the retries each agent granted for dep.
func (w *world) grantedRetries(dep string) uint64 {
	var n uint64
	for _, a := range w.agents {
		n += ownCounts(a, dep).Retries
	}
	return n
}

// testProbes: the three callers' failures open the breaker; then the
// dependency stays dead and slow (500 after 300 ms), the breaker turns
// half-open every second and each failed probe opens it again. All three
// callers keep calling, concurrently. halfOpenProbes is 1: the dependency
// never has two requests in progress, and receives at most one probe per
// probe round (each failed probe is one more generation of the record),
// whichever callers send them.
func testProbes(t *testing.T, w *world, callers []caller) {
	up := newUpstream(t, always(http.StatusInternalServerError))
	w.setPolicy(t, up.dep, `{"breaker": {"minimumRequests": 6, "openDuration": "1s", "maxOpenDuration": "1s",
		"fleetMaxOpenDuration": "1s", "halfOpenProbes": 1, "probeSuccessThreshold": 1, "probeTimeout": "5s"}}`,
		func(p sharedstate.Policy) bool {
			return p.Breaker.HalfOpenProbes == 1 && p.Breaker.OpenDuration.Std() == time.Second
		})
	for _, c := range callers {
		fromAgent(t, c, up.dep)
	}
	for _, c := range callers {
		c.calls(t, batch{url: up.url("/probe"), n: 3})
	}
	w.waitAgents(t, "holds "+up.dep+" open", func(a *agent.Agent) bool {
		s := snapshot(a, up.dep)
		return s != nil && s.State != sharedstate.Closed
	})
	for _, c := range callers { // the agents' pushes have reached the clients
		waitView(t, c, up.dep, "refuses", func(v view) bool { return v.Rejecting })
	}
	gen0 := w.maxGeneration(up.dep)
	up.set(slowly(http.StatusInternalServerError, 300*time.Millisecond))
	up.resetPeak()
	before := up.count("")

	const wantProbes = 3
	deadline := time.Now().Add(4 * settle)
	for up.count("")-before < wantProbes {
		if time.Now().After(deadline) {
			t.Fatalf("the dependency saw %d probes in %v, want %d", up.count("")-before, 4*settle, wantProbes)
		}
		// Every caller calls at once: two workers each, a call every 25 ms.
		b := batch{url: up.url("/probe"), n: 16, concurrency: 2, pace: 25 * time.Millisecond}
		var wg sync.WaitGroup
		for _, c := range callers {
			if c.kind() == kindPython {
				continue // in this goroutine: it may fail t
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.calls(t, b)
			}()
		}
		for _, c := range callers {
			if c.kind() == kindPython {
				c.calls(t, b)
			}
		}
		wg.Wait()
	}
	gen1 := w.maxGeneration(up.dep)
	probes := up.count("") - before
	byCaller := map[string]int{}
	for _, s := range up.requests("")[before:] {
		byCaller[s.caller]++
	}
	t.Logf("%d probes (%v) over %d generations of the record", probes, byCaller, gen1-gen0)
	if p := up.peakInFlight(); p > 1 {
		t.Errorf("the dependency had %d requests in progress at once while the breaker was not closed, want at most halfOpenProbes (1)", p)
	}
	// One probe per round: each round's probe fails and opens the breaker
	// again (one generation); the last may still be on its way.
	if uint64(probes) > gen1-gen0+1 {
		t.Errorf("%d probes over %d reopenings: more than one probe per half-open round", probes, gen1-gen0)
	}
}

// maxGeneration is the highest generation of dep's record any agent holds.
func (w *world) maxGeneration(dep string) uint64 {
	var g uint64
	for _, a := range w.agents {
		if s := snapshot(a, dep); s != nil {
			g = max(g, s.Generation)
		}
	}
	return g
}

// testForceOpen: calls flow; `fuseboxctl force-open` refuses every
// caller's calls (none reaches the dependency); `fuseboxctl clear` lets
// them through again.
func testForceOpen(t *testing.T, w *world, callers []caller) {
	up := newUpstream(t, always(http.StatusOK))
	for _, c := range callers {
		fromAgent(t, c, up.dep)
		if tl := c.calls(t, batch{url: up.url("/forced"), n: 3}); tl.OK != 3 {
			t.Fatalf("%s before the force-open: %v, want 3 answered", c.kind(), tl)
		}
	}
	w.ctl(t, "", "force-open", up.dep, "--ttl", "10m", "--reason", "conformance suite")
	w.waitAgents(t, "holds the force-open of "+up.dep, func(a *agent.Agent) bool {
		s := snapshot(a, up.dep)
		return s != nil && s.Override == sharedstate.ForcedOpen
	})
	for _, c := range callers {
		t.Run(c.kind(), func(t *testing.T) {
			waitView(t, c, up.dep, "sees the force-open", func(v view) bool { return v.Override == "forced-open" && v.Rejecting })
			before := up.count("")
			tl := c.calls(t, batch{url: up.url("/forced"), n: 10, concurrency: 2})
			if tl.Rejected["forced-open"] != 10 {
				t.Errorf("10 calls while forced open: %v, want all refused as forced-open", tl)
			}
			if n := up.count(""); n != before {
				t.Errorf("%d requests reached the dependency while it was forced open", n-before)
			}
		})
	}
	w.ctl(t, "", "clear", up.dep)
	for _, c := range callers {
		t.Run(c.kind()+" after clear", func(t *testing.T) {
			waitView(t, c, up.dep, "sees the override cleared", func(v view) bool { return v.Override == "none" && !v.Rejecting })
			if tl := c.calls(t, batch{url: up.url("/forced"), n: 3}); tl.OK != 3 {
				t.Errorf("after clear: %v, want 3 answered", tl)
			}
		})
	}
}

// testMixed: the dependency answers 500; the policy wants 9 requests from
// 3 failing nodes. Each caller, on its own agent, sends 3 failing calls
// in turns: none alone can trip the breaker (3 requests, 1 node), the
// three together do, and then every caller is refused.
func testMixed(t *testing.T, w *world, callers []caller) {
	if len(callers) < 3 {
		t.Skipf("needs the three callers; have %d", len(callers))
	}
	up := newUpstream(t, always(http.StatusInternalServerError))
	w.setPolicy(t, up.dep, `{"breaker": {"minimumRequests": 9, "minFailingNodes": 3}}`, func(p sharedstate.Policy) bool {
		return p.Breaker.MinimumRequests == 9 && p.Breaker.MinFailingNodes == 3
	})
	for _, c := range callers {
		fromAgent(t, c, up.dep)
	}
	for r := range 3 {
		for _, c := range callers {
			if tl := c.calls(t, batch{url: up.url("/mixed"), n: 1}); tl.Failed != 1 {
				t.Fatalf("round %d, %s: %v, want an answered failure (nobody alone can trip the breaker)", r, c.kind(), tl)
			}
		}
	}
	w.waitAgents(t, "holds "+up.dep+" open, tripped by 9 failures from 3 nodes", func(a *agent.Agent) bool {
		s := snapshot(a, up.dep)
		return s != nil && s.State == sharedstate.Open
	})
	// Every failure counted, whichever caller saw it, by every agent.
	w.waitAgents(t, "counts the 9 failures from 3 failing nodes", func(a *agent.Agent) bool {
		f, ok := a.Engine().Fleet(up.dep)
		return ok && f.Fleet.Failures == 9 && f.FailingNodes == 3
	})
	for _, c := range callers {
		t.Run(c.kind(), func(t *testing.T) {
			waitView(t, c, up.dep, "refuses", func(v view) bool { return v.Rejecting })
			tl := c.calls(t, batch{url: up.url("/mixed"), n: 10})
			if tl.Rejected["open"] != 10 {
				t.Errorf("10 calls on the open breaker: %v, want all refused as open", tl)
			}
		})
	}
	if n := up.count(""); n != 9 {
		t.Errorf("the dependency saw %d requests, want the 9 before the breaker opened", n)
	}
}
