// Package dashboardtest is what browser tests share (the coordinator's
// dashboard test and the demo's): Browser, a headless Chromium tab with
// deadlines, failure screenshots and the page's reported problems, and
// Chromium, which finds the binary the same way for every such test:
//
//  1. FUSEBOX_SKIP_BROWSER=1 skips the test, saying so;
//  2. else FUSEBOX_CHROMIUM, when set, names the binary (it must exist and
//     be executable: a wrong path fails, it does not fall back);
//  3. else the first of chromium, chromium-browser on PATH (Debian's
//     chromium package installs /usr/bin/chromium; `make test` installs it
//     when missing);
//  4. else the test fails with the ways to fix that.
//
// Use it first thing in a browser test:
//
//	func TestDashboardInABrowser(t *testing.T) {
//		chromium := dashboardtest.Chromium(t)
//		… // start what the page shows
//		b := dashboardtest.NewBrowser(t, chromium, dashboardtest.BrowserOptions{Width: 1440, Height: 900, Timeout: 30 * time.Second})
//		b.Run("open the dashboard", chromedp.Navigate(url))
//		b.Wait("the rows", `document.querySelectorAll('tr[data-dep]').length > 0`)
//		for _, p := range b.Problems() { t.Errorf("the page reported: %s", p) }
//	}
//
// It is for tests only: nothing in a binary imports it.
package dashboardtest
