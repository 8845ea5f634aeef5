package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
	"github.com/fusebox-dev/fusebox/coordinator/dashboardtest"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// browserTimeout bounds each wait on the page.
const browserTimeout = 45 * time.Second

// recordBadges makes the page remember every state each dependency's
// badge shows (window.badgeHistory: name → states, in order), so that a
// state shorter than a poll is not missed.
const recordBadges = `(() => {
  window.badgeHistory = {};
  const scan = () => {
    for (const row of document.querySelectorAll('tr[data-dep]')) {
      const badge = row.querySelector('.badge');
      if (!badge || !badge.dataset.state) continue;
      const h = (window.badgeHistory[row.dataset.dep] ||= []);
      if (h[h.length - 1] !== badge.dataset.state) h.push(badge.dataset.state);
    }
  };
  new MutationObserver(scan).observe(document.body,
    {subtree: true, childList: true, attributes: true, attributeFilter: ['data-state']});
  scan();
  return true;
})()`

// badge is the JavaScript expression of a dependency's badge state.
func badge(dep string) string {
	return fmt.Sprintf(`document.querySelector('tr[data-dep=%q] .badge')?.dataset.state`, dep)
}

// ctlStatus is the part of `fuseboxctl status -o json` the test reads.
type ctlStatus struct {
	Dependencies []struct {
		Dependency string `json:"dependency"`
		State      string `json:"state"`
		Override   string `json:"override"`
	} `json:"dependencies"`
	Overrides []struct {
		Dependency string `json:"dependency"`
		State      string `json:"state"`
		Reason     string `json:"reason"`
		Actor      string `json:"actor"`
	} `json:"overrides"`
}

// fuseboxctlStatus runs `fuseboxctl status -o json` against the demo's
// coordinator with its admin token.
func fuseboxctlStatus(t *testing.T, d *demo.Demo) ctlStatus {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("fuseboxctl was not built: %v", buildErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fuseboxctl, "--coordinator", d.GRPCAddr(), "-o", "json", "status")
	cmd.Env = append(os.Environ(), "FUSEBOX_TOKEN="+d.AdminToken())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fuseboxctl status: %v\nstderr: %s", err, stderr.String())
	}
	var st ctlStatus
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
		t.Fatalf("fuseboxctl status -o json: %v\n%s", err, stdout.String())
	}
	return st
}

// TestDashboardInBrowser drives the demo's dashboard in headless Chromium:
// with the admin token typed in, shipping-api's badge turns open when the
// demo makes it fail; forcing catalog-api open through the override form
// shows the forced-open badge, every agent applies it, and `fuseboxctl
// status` agrees.
func TestDashboardInBrowser(t *testing.T) {
	b := dashboardtest.NewBrowser(t, dashboardtest.Chromium(t), // skips with FUSEBOX_SKIP_BROWSER=1, fails when there is none
		dashboardtest.BrowserOptions{Width: 1400, Height: 860, Timeout: browserTimeout})
	cfg := testConfig(t, 4*time.Second)
	d := startDemo(t, cfg)

	b.Run("open the dashboard", chromedp.Navigate(d.DashboardURL()), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := b.Eval("String(" + recordBadges + ")"); got != "true" {
		t.Fatalf("installing the badge recorder: %s", got)
	}
	b.Run("type the admin token", dashboardtest.TypeInto("#token", d.AdminToken()))
	b.Wait("the event stream to be live", `document.querySelector('#conn')?.dataset.state === 'live'`)
	b.Wait("both dependencies on the page", badge(demo.ShippingAPI)+` && `+badge(demo.CatalogAPI))

	// The first failing phase starts 4s after the traffic: the breaker
	// opens within a second of it, and the page follows the events.
	b.Wait(demo.ShippingAPI+" to show open", `(window.badgeHistory[`+quoteJS(demo.ShippingAPI)+`] || []).includes('open')`)
	b.Screenshot("dashboard-shipping-open")
	t.Logf("%s badge states seen: %s", demo.ShippingAPI, b.Eval(`JSON.stringify(window.badgeHistory[`+quoteJS(demo.ShippingAPI)+`])`))

	b.Run("force catalog-api open",
		dashboardtest.TypeInto("#force-dep", demo.CatalogAPI),
		dashboardtest.TypeInto("#force-ttl", "10m"),
		dashboardtest.TypeInto("#force-reason", "browser test"),
		chromedp.Click(chromedp.CSS("#force-open-btn")),
	)
	b.Wait("the action's result", `['ok', 'error'].includes(document.querySelector('#action-status')?.dataset.result)`)
	if res := b.Eval(`document.querySelector('#action-status').dataset.result`); res != "ok" {
		b.Screenshot("failure")
		t.Fatalf("force-open through the dashboard: %s: %s", res, b.Eval(`document.querySelector('#action-status').textContent`))
	}
	b.Wait(demo.CatalogAPI+" to show forced-open", badge(demo.CatalogAPI)+` === 'forced-open'`)
	shot := b.Screenshot("dashboard-forced-open")
	if shot == "" {
		t.Error("no screenshot of the forced-open dashboard")
	}

	sstest.Eventually(t, 15*time.Second, "every agent to reject catalog-api (forced open)", func() bool {
		for _, a := range d.Agents() {
			if s := a.Engine().Snapshot(demo.CatalogAPI); s == nil || s.Override != sharedstate.ForcedOpen {
				return false
			}
		}
		return true
	})

	st := fuseboxctlStatus(t, d)
	var problems []string
	found := false
	for _, o := range st.Overrides {
		if o.Dependency == demo.CatalogAPI {
			found = true
			if o.State != "forced-open" || o.Reason != "browser test" || !strings.Contains(o.Actor, demo.AdminIdentity) {
				problems = append(problems, fmt.Sprintf("override %+v, want forced-open, reason \"browser test\", actor naming %s", o, demo.AdminIdentity))
			}
		}
	}
	if !found {
		problems = append(problems, "no override of "+demo.CatalogAPI)
	}
	found = false
	for _, dep := range st.Dependencies {
		if dep.Dependency == demo.CatalogAPI {
			found = true
			if dep.Override != "forced-open" {
				problems = append(problems, fmt.Sprintf("dependency %+v, want override forced-open", dep))
			}
		}
	}
	if !found {
		problems = append(problems, "no dependency "+demo.CatalogAPI)
	}
	for _, p := range problems {
		t.Errorf("fuseboxctl status disagrees with the dashboard: %s", p)
	}
	if probs := b.Problems(); len(probs) > 0 {
		t.Errorf("the page reported:\n%s", strings.Join(probs, "\n"))
	}
}

// quoteJS quotes s as a JavaScript string literal.
func quoteJS(s string) string {
	q, err := json.Marshal(s)
	if err != nil {
		panic(errors.New("quoteJS: " + err.Error()))
	}
	return string(q)
}
