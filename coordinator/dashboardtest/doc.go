// Package dashboardtest finds the Chromium that browser tests drive, the
// same way for every such test (the coordinator's dashboard test and the
// demo's):
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
//		allocCtx, cancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium), …)
//		…
//	}
//
// It is for tests only: nothing in a binary imports it.
package dashboardtest
