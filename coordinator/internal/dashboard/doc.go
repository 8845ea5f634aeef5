// Package dashboard is the coordinator's fleet dashboard: one page of
// plain HTML, CSS and JavaScript under static/, embedded with go:embed and
// served at "/" (the page) and "/ui/" (its files). It needs nothing but
// the coordinator: no CDN, no web font, no build step, so it works on a
// machine without internet access.
//
// The script is a set of JavaScript modules the browser loads as they are
// (index.html loads app.js with type="module"; each file imports what it
// uses from the others, by relative path), one concern each:
//
//   - app.js: the entry: routing, each frame's render, the token, the
//     wiring of the controls;
//   - model.js: what the page knows of the fleet, the polls that fill it
//     and the render scheduler; api.js: the JSON API and the error banner;
//   - overview.js: the fleet table, its sparklines and the summary;
//   - events.js: the live event stream; override.js: the override form;
//   - dep.js: the dependency page; audit.js: its audit trail; whatif.js:
//     its history plot and the policy editor;
//   - explain.js: what holds a breaker, in words; util.js: formatting and
//     DOM helpers.
//
// The page reads the coordinator's JSON API with the token its user types
// (kept in sessionStorage, sent as "Authorization: Bearer"):
//
//   - GET /api/v1/fleet?compact=1, every 2 s (10 s in a hidden tab) and
//     soon after every event: counts, rates, nodes, zones, probers;
//   - GET /api/v1/events, read with fetch (not EventSource, which cannot
//     send the Authorization header: no token ever goes in a URL), parsed
//     as server-sent events and resumed with Last-Event-ID: breaker
//     transitions and overrides change the badges at once;
//   - GET /api/v1/series?dependency=NAME&since=5m (the coordinator's
//     history), to seed a row's sparkline when the row first comes into view
//     (at most 3 requests in flight; a dependency the history keeps none for
//     seeds nothing); after that the page appends a point per poll and per
//     event, client-side, and forgets points older than 5 minutes;
//   - GET /api/v1/policies (windows for requests/s, thresholds),
//     /api/v1/whoami, and on the dependency page /api/v1/audit (each
//     entry with its field changes, computed by the coordinator),
//     /api/v1/series?dependency=NAME&since=15m (the history, the page's
//     one chart: rates and the breaker's states, drawn as SVG by the page
//     itself and read again every 2 s while the page is shown and the tab
//     visible) and /api/v1/policies/NAME (the stored policy and its
//     revision);
//   - POST and DELETE /api/v1/overrides/NAME for the override form;
//   - for an admin, POST /api/v1/simulate (a proposed policy replayed over
//     the history, and the fields it changes, 0.8 s after the last
//     keystroke in the editor or on Simulate) and PUT /api/v1/policies/NAME (Save: a compare-and-swap on
//     the revision the editor was loaded from; a write by someone else
//     meanwhile is a conflict, never overwritten).
//
// Rendering stays cheap at 1,000 dependencies and more: data updates a
// model and marks rows dirty; one requestAnimationFrame callback writes the
// DOM, changing only the cells whose text changed and replacing the rows
// (one DOM operation) only when their order or the filter changed. The
// table's rows are laid out as CSS grid rows with content-visibility: auto,
// so rows off screen cost no style or layout (measured here: re-showing
// 1,000 filtered rows went from ~300 ms of layout to ~20 ms). Every
// attached row's state (badge, local-open, shadow note) is written on every
// update; its numbers, lists and sparkline only while it is near the
// viewport (IntersectionObserver), and when it comes into view. The poll
// interval stretches to keep the page's own work under a tenth of the main
// thread. Nothing that changes asynchronously moves what is about to be
// clicked: the error banner floats (and lets clicks through), the status
// line keeps its height, the identity keeps its width.
//
// # DOM contract
//
// Browser tests (this package's, and the demo's) rely on these, so they
// do not change without changing those tests:
//
//   - Each dependency of the fleet table is a row tr[data-dep="NAME"].
//     Rows the filter hides are detached from the document, not only
//     hidden: document.querySelectorAll("tr[data-dep]") is what is shown.
//   - The row's badge is the element with class "badge" inside it; its
//     data-state attribute and its text are the same word, one of closed,
//     open, half-open, forced-open, forced-closed, shadow. An override wins
//     (forced-open, forced-closed), then shadow mode, then the breaker's
//     own state.
//   - A node-local open (some node open for its own clients only) adds an
//     element with class "local-open" inside the row, removed when no node
//     is open on its own.
//   - #token is the token input. The override form is #force-dep (the
//     dependency's name), #force-ttl (a Go duration such as "10m"; empty
//     means until cleared), #force-reason, and the buttons #force-open-btn,
//     #force-closed-btn and #clear-btn. #action-status shows the result of
//     the last action: its text starts with "ok:" or "error:" (then the
//     coordinator's message), and its data-result attribute is "pending",
//     "ok" or "error".
//   - #filter is the filter box: a case-insensitive substring of the name.
//   - The numeric cells of a row (td.fr, td.sr, td.rps, td.budget,
//     td.nodes, td.zones, td.probers) are current while the row is near
//     the viewport; rows far below are refreshed as they scroll in.
//   - #conn says "live" (text and data-state) while the event stream is
//     connected; otherwise connecting, reconnecting, unauthorized or
//     offline.
//   - While a breaker is not closed, its row's state cell has an element
//     with class "why" after the badge, whose text and data-why say what
//     holds it: "failures", "slow calls" (the trip's or failed probe's
//     reason) or "forced" (an override); the dependency page's header
//     likewise.
//   - The dependency page is "/#/dep/NAME" (NAME URL-encoded). Its per-node
//     rows are tr[data-node="NODE"] in #dep-nodes, its zones
//     tr[data-zone="ZONE"] in #dep-zones, its audit trail rows
//     tr[data-revision] in #dep-audit; a policy write's row lists the
//     fields it changed as li[data-field="JSON.PATH"], text
//     "JSON.PATH: FROM → TO" (JSON values, "—" for none).
//   - The history plot is svg#dep-history: one rect.band[data-state] in
//     g.reality per stretch the fleet's breaker was not closed, the
//     failure rate as polyline.line, a proposed policy's replay as
//     rect.band[data-state] in g.overlay (none until a simulation). The
//     range is #hist-since (5m, 15m, 1h, 3h). #dep-changes lists the
//     breaker's state changes in it, newest first: li[data-state] (the
//     new state), text "HH:MM:SS  FROM → TO".
//   - #policy-current holds the stored policy for everyone. Only for an
//     admin token the page renders #policy-editor: #policy-json (the
//     document), #policy-simulate-btn, #policy-save-btn,
//     #policy-reload-btn, #policy-status (data-result pending, ok, error
//     or conflict; text starting "ok:", "error:" or "conflict:"),
//     #policy-violations li[data-field="JSON.PATH"], #policy-diff
//     li[data-field] (the changed fields) and #policy-sim
//     tr[data-side="fleet|current|proposed"] (the summary). For any other
//     token none of these exist.
//
// # Security
//
// The page is served with a Content-Security-Policy that allows its own
// origin only (no inline script), X-Frame-Options DENY and Referrer-Policy
// no-referrer. Data is written with textContent, never parsed as HTML.
//
// Usage (the coordinator mounts it in its HTTP mux):
//
//	ui := dashboard.New()
//	mux.Handle("GET /{$}", ui)
//	mux.Handle("GET "+dashboard.AssetPrefix, ui)
package dashboard
