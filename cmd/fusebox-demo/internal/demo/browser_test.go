package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// outputDir is where the test leaves its screenshots: $FUSEBOX_TEST_ARTIFACTS
// when set (kept after the test), else the test's temporary directory.
func outputDir(t *testing.T) string {
	if dir := os.Getenv("FUSEBOX_TEST_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu     sync.Mutex
	errors []string // exceptions the page threw
}

// newBrowser starts headless Chromium with a fresh profile; it is stopped
// at cleanup.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	chromiumPath := dashboardtest.Chromium(t) // skips with FUSEBOX_SKIP_BROWSER=1, fails when there is none
	allocCtx, stopAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1400, 860),
	)
	ctx, stopTab := chromedp.NewContext(allocCtx)
	b := &browser{t: t, ctx: ctx, dir: outputDir(t)}
	stop := func() {
		stopTab()
		stopAlloc()
	}
	// The first action launches the browser; it must not carry a deadline
	// (the browser would live only as long as it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		stop()
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	msgs := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return b
}

// do runs actions on the tab, failing the test (with a screenshot) after
// browserTimeout.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.screenshot("failure")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript condition to hold on the page.
func (b *browser) until(what, js string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool]("Boolean("+js+")",
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(browserTimeout)))
	if err != nil {
		b.screenshot("failure")
		b.t.Fatalf("waiting for %s: %v\npage: %s", what, err, b.text("document.body.innerText.slice(0, 2000)"))
	}
}

// text evaluates a JavaScript expression to a string ("" on error).
func (b *browser) text(js string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string]("String("+js+")"))
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}

// screenshot saves the viewport as NAME.png in the output directory.
func (b *browser) screenshot(name string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot %s", path)
	return path
}

func (b *browser) exceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

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

// typeText replaces an input's value the way a user does: key by key, so
// the page sees its input events.
func typeText(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Clear(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), text))
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
	b := newBrowser(t)
	cfg := testConfig(t, 4*time.Second)
	d := startDemo(t, cfg)

	b.do("open the dashboard", chromedp.Navigate(d.DashboardURL()), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := b.text(recordBadges); got != "true" {
		t.Fatalf("installing the badge recorder: %s", got)
	}
	b.do("type the admin token", typeText("#token", d.AdminToken()))
	b.until("the event stream to be live", `document.querySelector('#conn')?.dataset.state === 'live'`)
	b.until("both dependencies on the page", badge(demo.ShippingAPI)+` && `+badge(demo.CatalogAPI))

	// The first failing phase starts 4s after the traffic: the breaker
	// opens within a second of it, and the page follows the events.
	b.until(demo.ShippingAPI+" to show open", `(window.badgeHistory[`+quoteJS(demo.ShippingAPI)+`] || []).includes('open')`)
	b.screenshot("dashboard-shipping-open")
	t.Logf("%s badge states seen: %s", demo.ShippingAPI, b.text(`JSON.stringify(window.badgeHistory[`+quoteJS(demo.ShippingAPI)+`])`))

	b.do("force catalog-api open",
		typeText("#force-dep", demo.CatalogAPI),
		typeText("#force-ttl", "10m"),
		typeText("#force-reason", "browser test"),
		chromedp.Click(chromedp.CSS("#force-open-btn")),
	)
	b.until("the action's result", `['ok', 'error'].includes(document.querySelector('#action-status')?.dataset.result)`)
	if res := b.text(`document.querySelector('#action-status').dataset.result`); res != "ok" {
		b.screenshot("failure")
		t.Fatalf("force-open through the dashboard: %s: %s", res, b.text(`document.querySelector('#action-status').textContent`))
	}
	b.until(demo.CatalogAPI+" to show forced-open", badge(demo.CatalogAPI)+` === 'forced-open'`)
	shot := b.screenshot("dashboard-forced-open")
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
	if ex := b.exceptions(); len(ex) > 0 {
		t.Errorf("the page threw:\n%s", strings.Join(ex, "\n"))
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
