package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/coordinator/dashboardtest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestDashboardWhatIfInABrowser drives the dashboard in headless Chromium
// against a coordinator and three real agents. The overview names why
// each breaker is open: failures, slow calls, forced; a page loaded afresh
// seeds its sparklines from the coordinator's history. On the page of a
// dependency that lived through an incident (open, two failed probes,
// close), the history plot has a band per state the fleet's breaker was
// in; a viewer reads the policy but is given no editor, and the server
// refuses the viewer's write. An admin edits the policy: an invalid one
// shows its violations by JSON path, a valid one its changes, the
// simulation's summary and its states in a lane under the plot (none for a
// policy that cannot open); a save over a revision someone else replaced
// meanwhile is a conflict, shown, and writes nothing; after a reload the
// save is written and audited as the admin's.
func TestDashboardWhatIfInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator, three agents and Chromium")
	}
	chromium := dashboardtest.Chromium(t)
	f := startCoordinator(t, setup{tokens: true})
	c := f.Coordinator()
	ctx := ctxFor(t, 2*time.Minute)
	const dep = "ledger-api"
	for name, pol := range map[string]string{
		dep:         incidentPolicy,
		"search":    `{"breaker":{"slowCallRateThreshold":0.5,"window":"2m","openDuration":"1m","maxOpenDuration":"2m"}}`,
		"inventory": `{"breaker":{"window":"2m","openDuration":"1m","maxOpenDuration":"2m"}}`,
	} {
		if _, err := c.Store().PutPolicy(ctx, name, []byte(pol), store.WriteOptions{Actor: "gitops"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Store().SetOverride(ctx, "payments", store.OverrideSpec{State: sharedstate.ForcedOpen, TTL: time.Hour, Reason: "drill"},
		store.WriteOptions{Actor: "oncall"}); err != nil {
		t.Fatal(err)
	}
	agents := startAgents(t, f, 3)
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)
	sstest.Eventually(t, 20*time.Second, "the policies on every agent, and the observer seeing the three agents", func() bool {
		for _, a := range agents {
			if a.Engine().Policy(dep).Breaker.OpenDuration.Std() != time.Second || a.Engine().Policy("search").Breaker.OpenDuration.Std() != time.Minute {
				return false
			}
		}
		return observed(ctx, viewer) == 3
	})

	// ledger-api: healthy 3 s, dead 5 s, healthy again; search: slow on
	// two agents; inventory: failing on two.
	_, stop := incident(t, agents, dep)
	slow := fuseboxv1.Outcome_OUTCOME_SLOW_SUCCESS
	sstest.Eventually(t, 10*time.Second, "agent-2 to see search traffic from two other nodes", func() bool {
		for _, a := range agents[:2] {
			report(t, a, outcome("search", first, slow, 15), outcome("inventory", first, failure, 15))
		}
		f, ok := agents[2].Engine().Fleet("search")
		return ok && f.FleetNodes >= 2
	})

	p := dashboardtest.NewBrowser(t, chromium, dashboardtest.BrowserOptions{Width: 1440, Height: 1000, Timeout: 40 * time.Second})
	base := "http://" + c.HTTPAddr()
	p.Run("open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	p.Run("type a viewer token", dashboardtest.TypeInto("#token", viewerToken))
	why := func(d string) string {
		return fmt.Sprintf(`(document.querySelector('tr[data-dep=%q] td.why-cell') || {dataset: {}}).dataset.why`, d)
	}
	p.Wait("the overview to say why each breaker is open", why("search")+` === 'slow calls' && `+why("inventory")+` === 'failures' && `+
		why("payments")+` === 'override'`)
	if got := p.Eval(`document.querySelector('tr[data-dep="search"] td.why-cell').textContent`); !strings.HasPrefix(got, "slow calls ") {
		t.Errorf("search's why = %q, want the slow calls it tripped on", got)
	}

	// The incident ends (the fleet closes again) before the page is read.
	sstest.EventuallyNoError(t, 40*time.Second, "ledger-api's breaker to close again, in the coordinator's history", func() error {
		var last string
		for _, iv := range states(t, c, dep) {
			last = iv.State
		}
		if last != "closed" {
			return fmt.Errorf("the fleet's states end in %q", last)
		}
		bands := 0
		for _, iv := range states(t, c, dep) {
			if iv.State != "closed" {
				bands++
			}
		}
		if bands < 3 {
			return fmt.Errorf("%d non-closed states", bands)
		}
		return nil
	})
	stop()
	want := 0
	for _, iv := range states(t, c, dep) {
		if iv.State != "closed" {
			want++
		}
	}

	p.Run("open ledger-api's page", chromedp.Navigate(base+"/#/dep/"+dep))
	bands := `document.querySelectorAll('#dep-history g.reality rect.band').length`
	p.Wait("the history plot with its state bands", bands+` > 0 && document.querySelector('#dep-history polyline.line')`)
	p.Run("reload the history", script(`document.querySelector('#hist-since').dispatchEvent(new Event('change'))`))
	p.Wait(fmt.Sprintf("%d state bands (open, half-open, …) in the plot", want), fmt.Sprintf(`%s === %d`, bands, want))
	if got := p.Eval(`[...document.querySelectorAll('#dep-history g.reality rect.band')].map(b => b.dataset.state).join(' ')`); !strings.Contains(got, "open") {
		t.Errorf("the bands' states: %q", got)
	}
	// A viewer reads the policy and has nothing to edit it with.
	p.Wait("the stored policy, read-only", `document.querySelector('#policy-current').textContent.includes('openDuration')`)
	if got := p.Eval(`String(!!document.querySelector('#policy-json, #policy-save-btn, #policy-editor'))`); got != "false" {
		t.Fatalf("a viewer has an edit control")
	}
	if got := p.Eval(`fetch('/api/v1/policies/` + dep + `', {method: 'PUT', headers: {'Content-Type': 'application/json',
		'Authorization': 'Bearer ` + viewerToken + `'}, body: JSON.stringify({policy: {dependency: '` + dep + `'}})}).then(r => String(r.status))`); got != "403" {
		t.Errorf("a viewer's PUT of the policy: status %s, want 403", got)
	}

	// An admin edits.
	p.Run("type an admin token", dashboardtest.TypeInto("#token", adminToken))
	p.Wait("the policy editor", `document.querySelector('#policy-json') && document.querySelector('#policy-json').value.includes('openDuration')`)
	setPolicy := func(what, doc string) {
		p.Run(what, script(fmt.Sprintf(`(() => { const t = document.querySelector('#policy-json'); t.value = %q;
			t.dispatchEvent(new Event('input')); document.querySelector('#policy-simulate-btn').click(); })()`, doc)))
	}
	setPolicy("an invalid policy", `{"dependency":"ledger-api","breaker":{"failureRateThreshold":1.5}}`)
	p.Wait("the violation, by JSON path", `document.querySelector('#policy-violations li[data-field="breaker.failureRateThreshold"]')`)

	setPolicy("a policy that cannot open", `{"dependency":"ledger-api","breaker":{"openDuration":"1s","maxOpenDuration":"4s","minimumRequests":100000}}`)
	p.Wait("its changes and its simulation", `document.querySelector('#policy-diff li[data-field="breaker.minimumRequests"]') &&
		document.querySelector('#policy-sim tr[data-side="proposed"]') && document.querySelector('#policy-status').dataset.result === 'ok' &&
		document.querySelectorAll('#policy-violations li').length === 0`)
	if got := p.Eval(`String(document.querySelectorAll('#dep-history g.overlay rect.band').length)`); got != "0" {
		t.Errorf("a policy that cannot open has %s bands in the plot's lane", got)
	}
	setPolicy("the current policy again", incidentPolicy)
	p.Wait("its replay's states in the plot's lane", `document.querySelectorAll('#dep-history g.overlay rect.band').length >= 3`)
	whatIfShot := p.FullScreenshot("dashboard-whatif")

	// Someone else writes meanwhile: the save is a conflict.
	if _, err := c.Store().PutPolicy(ctx, dep, []byte(`{"breaker":{"openDuration":"2s","maxOpenDuration":"4s"}}`), store.WriteOptions{Actor: "gitops"}); err != nil {
		t.Fatal(err)
	}
	proposal := `{"dependency":"ledger-api","breaker":{"openDuration":"1s","maxOpenDuration":"8s"}}`
	setPolicy("the proposal", proposal)
	p.Run("save", chromedp.Click(chromedp.CSS("#policy-save-btn")))
	p.Wait("the conflict", `document.querySelector('#policy-status').dataset.result === 'conflict' &&
		document.querySelector('#policy-status').textContent.startsWith('conflict:')`)
	if e, err := c.Store().GetPolicy(ctx, dep); err != nil || strings.Contains(string(e.Value), "8s") {
		t.Fatalf("after the conflict the stored policy is %s (%v)", e.Value, err)
	}
	p.Run("reload", chromedp.Click(chromedp.CSS("#policy-reload-btn")))
	p.Wait("the other writer's policy in the editor", `document.querySelector('#policy-json').value.includes('"2s"')`)
	setPolicy("the proposal again", proposal)
	p.Run("save", chromedp.Click(chromedp.CSS("#policy-save-btn")))
	p.Wait("the write", `document.querySelector('#policy-status').dataset.result === 'ok' &&
		document.querySelector('#policy-status').textContent.includes('written at revision')`)
	e, err := c.Store().GetPolicy(ctx, dep)
	if err != nil || !strings.Contains(string(e.Value), "8s") {
		t.Fatalf("the stored policy is %s (%v), want the admin's", e.Value, err)
	}
	audit, err := c.Store().ListAudit(ctx, store.AuditQuery{Dependency: dep, Limit: 1})
	if err != nil || len(audit) != 1 || audit[0].Action != store.ActionPolicyPut || !strings.Contains(audit[0].Actor, "ops-admin") {
		t.Errorf("the last audit entry of %s = %+v, %v; want a policy.put by ops-admin", dep, audit, err)
	}
	// A page loaded afresh seeds each row's sparkline from the history: the
	// incident's opens are marked on ledger-api's though this page saw none.
	p.Run("load the overview afresh", chromedp.Navigate(base+"/?fresh#/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	p.Wait("ledger-api's sparkline, seeded from the history, with its opens", `document.querySelector('tr[data-dep="ledger-api"] .marks line.mark.open')`)
	for _, prob := range p.Problems() {
		t.Errorf("the page reported: %s", prob)
	}
	t.Logf("screenshot: %s", whatIfShot)
}

// script runs a statement in the page.
func script(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool]("("+js+", true)")(ctx, t)
		return err
	})
}

// states are the fleet's breaker states in dep's history, from GET
// /api/v1/series (as an admin).
func states(t *testing.T, c *coordinator.Coordinator, dep string) []seriesInterval {
	t.Helper()
	code, body := httpDo(t, http.MethodGet, "http://"+c.HTTPAddr()+"/api/v1/series?dependency="+dep+"&since=15m", adminToken, "", nil)
	if code != http.StatusOK {
		return nil
	}
	var s struct {
		States []seriesInterval `json:"states"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	return s.States
}

// seriesInterval is one band of the fleet's breaker states in GET
// /api/v1/series.
type seriesInterval struct {
	State  string    `json:"state"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason,omitempty"`
}
