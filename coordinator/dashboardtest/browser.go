package dashboardtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// ArtifactsEnv names the directory browser tests leave their screenshots
// in (kept after the test); unset, they go to the test's temporary
// directory.
const ArtifactsEnv = "FUSEBOX_TEST_ARTIFACTS"

// ArtifactsDir is where a browser test leaves its screenshots:
// $FUSEBOX_TEST_ARTIFACTS when set (created when missing), else t.TempDir().
func ArtifactsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(ArtifactsEnv); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// BrowserOptions shape a Browser.
type BrowserOptions struct {
	// Width and Height are the window's size in pixels (the screenshots').
	Width, Height int
	// Timeout bounds each Run and Wait.
	Timeout time.Duration
}

// Browser is one tab of a headless Chromium with a fresh profile, started
// by NewBrowser and stopped at the test's cleanup. Every action has a
// deadline; a failed Run or Wait leaves a screenshot (failure.png) and
// fails the test. It collects what the page reports as a problem: uncaught
// exceptions and Content Security Policy refusals (Problems), and the
// requests the page sends (Requests). Use it from the test's goroutine.
type Browser struct {
	t       testing.TB
	ctx     context.Context // the tab; actions run with deadlines derived from it
	dir     string
	timeout time.Duration

	mu       sync.Mutex
	problems []string
	requests []Request
}

// Request is a request the page sent, as the browser's network layer saw
// it before sending.
type Request struct {
	Method, URL string
	// Authorization is the Authorization header the page set ("" when none).
	Authorization string
}

// NewBrowser starts chromium (see Chromium) headless, with a fresh
// profile, and opens a blank tab; it fails t when the browser does not
// start.
func NewBrowser(t testing.TB, chromium string, opts BrowserOptions) *Browser {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		chromedp.WindowSize(opts.Width, opts.Height),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &Browser{t: t, ctx: ctx, dir: ArtifactsDir(t), timeout: opts.Timeout}
	// The first call starts the browser, with no deadline (a deadline on it
	// would be the browser's lifetime); Console subscribes from then on.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting %s: %v", chromium, err)
	}
	msgs := chromedp.Console(ctx)
	reqs := chromedp.Events(ctx, network.RequestWillBeSent)
	reqsDone := make(chan struct{})
	go func() {
		defer close(reqsDone)
		for ev, err := range reqs {
			if err != nil {
				return
			}
			if ev.Request == nil {
				continue
			}
			r := Request{Method: ev.Request.Method, URL: ev.Request.URL + ev.Request.URLFragment}
			for k, v := range ev.Request.Headers {
				if strings.EqualFold(k, "Authorization") {
					r.Authorization = fmt.Sprint(v)
				}
			}
			b.mu.Lock()
			b.requests = append(b.requests, r)
			b.mu.Unlock()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Refused to") {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
		<-reqsDone
	})
	return b
}

// Run runs actions on the tab within the Timeout; on error it fails the
// test naming what.
func (b *Browser) Run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.Screenshot("failure")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Wait polls a JavaScript expression until it is truthy, for at most the
// Timeout; then it fails the test naming what, with the page's text.
func (b *Browser) Wait(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")",
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(b.timeout))); err != nil {
		b.Screenshot("failure")
		dctx, dcancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer dcancel()
		text, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		b.t.Fatalf("waiting for %s (%s): %v\nthe page shows:\n%s", what, expr, err, text)
	}
}

// Eval evaluates a JavaScript expression whose value (or the value its
// promise resolves to) is a string; an error fails the test.
func (b *Browser) Eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Screenshot saves a PNG of the viewport as name.png in ArtifactsDir and
// returns its path ("" when it failed, which it logs).
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	return b.capture(name, chromedp.CaptureScreenshot())
}

// FullScreenshot is Screenshot of the whole page, not just the viewport.
func (b *Browser) FullScreenshot(name string) string {
	b.t.Helper()
	return b.capture(name, chromedp.FullScreenshot(100))
}

func (b *Browser) capture(name string, capture chromedp.Action[[]byte]) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// Problems returns the exceptions and Content Security Policy refusals the
// page reported so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Requests returns the requests the page sent so far, oldest first.
func (b *Browser) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Request(nil), b.requests...)
}

// TypeInto replaces an input's value by typing, as a user does (the page
// sees the key and input events).
func TypeInto(sel, text string) chromedp.Action[chromedp.Void] {
	// chromedp.Clear resets the value attribute, not what the user typed,
	// and SetValue refuses "": empty the value property with a script.
	empty := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(document.querySelector(%q).value = "", true)`, sel))(ctx, t)
		return err
	})
	return chromedp.Steps(empty, chromedp.SendKeys(chromedp.CSS(sel), text))
}
