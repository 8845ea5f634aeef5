// Fusebox fleet dashboard: plain JavaScript, no build step, no third-party
// code, nothing fetched from anywhere but the coordinator that served it.
//
// Data flow (see doc.go):
//   - GET /api/v1/fleet?compact=1 every 2 s (10 s while the tab is hidden),
//     and soon after every event: counts, rates, nodes, zones, probers.
//   - GET /api/v1/events, read with fetch (the token in the Authorization
//     header, never in the URL): transitions and overrides change the
//     badges at once, without waiting for the next poll.
//   - GET /api/v1/series?dependency=NAME&since=5m (the coordinator's history)
//     seeds a row's sparkline when the row first scrolls into view (at most
//     3 requests in flight; a dependency without a history seeds nothing);
//     each poll and each event then adds a point, client-side, and points
//     older than 5 minutes fall off.
//   - GET /api/v1/policies: windows (requests/s) and thresholds.
//   - The dependency page (#/dep/NAME) adds /api/v1/audit and /api/v1/overrides.
//
// Rendering: the model is updated as data arrives and marks rows dirty; one
// requestAnimationFrame callback writes the DOM, touching only cells whose
// text changed, moving rows only when the order changed, and redrawing only
// the sparklines of rows near the viewport (IntersectionObserver).
'use strict';
(function () {
  const HISTORY_MS = 5 * 60 * 1000;
  const POLL_MS = 2000;
  const HIDDEN_POLL_MS = 10000;
  const SEED_CONCURRENCY = 3;
  const TOKEN_KEY = 'fusebox.token';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  // Sort order of the state column: trouble first.
  const SEVERITY = { 'open': 0, 'forced-open': 1, 'half-open': 2, 'local-open': 3, 'shadow': 4, 'forced-closed': 5, 'closed': 6 };
  const BAND_STATES = new Set(['open', 'half-open', 'forced-open', 'forced-closed']);

  const $ = (id) => document.getElementById(id);

  // ---- model ----

  const model = {
    deps: new Map(), // name → dep (see newDep)
    members: [],
    at: 0, // server time of the last snapshot (ms)
    skew: 0, // server clock − browser clock (ms), from the snapshots
    loaded: false, // a snapshot arrived
    defaultPolicy: null,
    policies: {},
    who: null,
  };

  function newDep(name) {
    return {
      name: name,
      lowerName: name.toLowerCase(),
      v: null, // the last DependencyView (protojson)
      breaker: 'closed', // closed, open, half-open
      override: '', // '', forced-open, forced-closed
      shadow: false,
      shown: 'closed', // what the badge says
      fr: 0, sr: 0, rps: 0, budget: 0,
      retries: 0, allowed: 0, // the fleet's retries over the window, and its retry budget
      incident: 0, // server time (ms) the incident began: the first open of a run of re-opens; 0: closed or not known
      trip: null, // the trip's evidence (protojson TripEvidence), while open or half-open
      ov: null, // the override in force: {actor, reason, created, expires} (ms; 0: none)
      ramp: null, // the ramp after a close: {p: the share refused, until: ms}
      failing: [], // [{node, failures}] nodes whose window has failures, most first
      zones: [], // [{zone, nodes, requests, failures, fr, sr, rejected}]
      probers: [],
      localOpen: [],
      eventAt: 0, // server time of the last event applied; a snapshot older than it does not undo it
      t: [], y: [], s: [], // the sparkline: time (ms), failure rate, state
      seeded: false, seeding: false,
      row: null, cells: null, r: {}, // the table row, its cells, what they show
      visible: false, stateDirty: true, rowDirty: true, sparkDirty: true,
    };
  }

  const num = (x) => (x === undefined || x === null || x === '') ? 0 : Number(x);
  const serverNow = () => Date.now() + model.skew;

  function breakerName(s) {
    switch (s) {
      case 'BREAKER_STATE_OPEN': return 'open';
      case 'BREAKER_STATE_HALF_OPEN': return 'half-open';
      default: return 'closed';
    }
  }

  function overrideName(s) {
    switch (s) {
      case 'OVERRIDE_STATE_FORCED_OPEN': return 'forced-open';
      case 'OVERRIDE_STATE_FORCED_CLOSED': return 'forced-closed';
      default: return '';
    }
  }

  // An override beats everything; a shadow-mode breaker never rejects, so
  // its badge says shadow (and the row adds what it would do).
  const shownOf = (d) => d.override || (d.shadow ? 'shadow' : d.breaker);

  function severity(d) {
    if (d.shown === 'closed' && d.localOpen.length) return SEVERITY['local-open'];
    return SEVERITY[d.shown];
  }

  // parseDuration reads a Go duration ("10s", "1m30s", "500ms") in ms.
  function parseDuration(s) {
    if (typeof s !== 'string') return NaN;
    const units = { 'ns': 1e-6, 'us': 1e-3, 'µs': 1e-3, 'ms': 1, 's': 1000, 'm': 60000, 'h': 3600000 };
    let total = 0;
    let matched = '';
    const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;
    let m;
    while ((m = re.exec(s)) !== null) {
      total += parseFloat(m[1]) * units[m[2]];
      matched += m[0];
    }
    return matched === s.replace(/^[-+]/, '') && matched !== '' ? total : NaN;
  }

  function policyOf(name) {
    // hasOwn: "__proto__" is a valid dependency name.
    return (Object.prototype.hasOwnProperty.call(model.policies, name) && model.policies[name]) || model.defaultPolicy || null;
  }

  function windowSeconds(name) {
    const p = policyOf(name);
    const w = p && p.breaker ? parseDuration(p.breaker.window) : NaN;
    return w > 0 ? w / 1000 : 10;
  }

  function threshold(name) {
    const p = policyOf(name);
    return p && p.breaker ? num(p.breaker.failureRateThreshold) : 0.5;
  }

  function applyView(d, v, at) {
    const oldKey = sortValue(d);
    d.v = v;
    if (d.eventAt <= at) {
      d.breaker = breakerName(v.state);
      d.override = overrideName(v.override);
    }
    d.shadow = v.mode === 'MODE_SHADOW';
    const f = v.fleet || {};
    d.fr = num(v.failureRate);
    d.sr = num(v.slowRate);
    d.budget = num(v.budgetUsed);
    d.retries = num(f.retries);
    d.allowed = num(v.retryBudget);
    d.incident = v.incidentStart ? Date.parse(v.incidentStart) || 0 : 0;
    d.trip = v.trip || null;
    if (d.eventAt <= at) { // else an event's override is newer than this snapshot: keep what it said
      d.ov = d.override ? {
        actor: v.overrideActor || '', reason: v.overrideReason || '',
        created: v.overrideCreated ? Date.parse(v.overrideCreated) || 0 : 0,
        expires: v.overrideExpires ? Date.parse(v.overrideExpires) || 0 : 0,
      } : null;
    }
    d.ramp = num(v.rampProbability) > 0 && v.rampUntil ? { p: num(v.rampProbability), until: Date.parse(v.rampUntil) || 0 } : null;
    d.rps = (num(f.successes) + num(f.failures)) / windowSeconds(d.name);
    const nodes = v.nodes || [];
    d.failing = nodes
      .filter((n) => num(n.counts && n.counts.failures) > 0)
      .map((n) => ({ node: n.node, failures: num(n.counts.failures) }))
      .sort((a, b) => b.failures - a.failures || (a.node < b.node ? -1 : 1));
    const perZone = new Map();
    for (const n of nodes) {
      const z = n.zone || '';
      perZone.set(z, (perZone.get(z) || 0) + 1);
    }
    d.zones = (v.zones || []).map((z) => {
      const c = z.counts || {};
      const req = num(c.successes) + num(c.failures);
      return {
        zone: z.zone || '', nodes: perZone.get(z.zone || '') || 0, requests: req, failures: num(c.failures),
        fr: req ? num(c.failures) / req : 0, sr: req ? num(c.slowCalls) / req : 0, rejected: num(c.rejected),
      };
    });
    d.probers = v.probers || [];
    d.localOpen = v.nodeLocalOpen || [];
    d.shown = shownOf(d);
    pushPoint(d, at, d.fr, d.shown);
    d.stateDirty = true;
    d.rowDirty = true;
    d.sparkDirty = true;
    if (sortValue(d) !== oldKey) orderDirty = true;
  }

  // ---- sparkline series ----

  function pushPoint(d, t, y, s) {
    const n = d.t.length;
    if (n === 0 || t >= d.t[n - 1]) {
      d.t.push(t); d.y.push(y); d.s.push(s);
    } else {
      let i = n - 1;
      while (i > 0 && d.t[i - 1] > t) i--;
      d.t.splice(i, 0, t); d.y.splice(i, 0, y); d.s.splice(i, 0, s);
    }
    const cut = serverNow() - HISTORY_MS - 10000;
    let k = 0;
    while (k < d.t.length - 1 && d.t[k] < cut) k++;
    if (k > 0) {
      d.t.splice(0, k); d.y.splice(0, k); d.s.splice(0, k);
    }
  }

  // seedSeries puts the server's history (GET /api/v1/series: points and
  // the breaker's states as bands) before the points this page collected
  // itself.
  function seedSeries(d, series) {
    const first = d.t.length ? d.t[0] : Infinity;
    const bands = ((series && series.states) || []).map((b) => ({ state: b.state, from: Date.parse(b.from), to: Date.parse(b.to) }));
    const t = [], y = [], s = [];
    for (const x of (series && series.points) || []) {
      const at = Date.parse(x.at);
      if (!(at < first)) break;
      const b = bands.find((b) => b.from <= at && at < b.to);
      let st = b ? b.state : 'closed';
      if (d.shadow && !st.startsWith('forced')) st = 'shadow';
      t.push(at); y.push(num(x.failureRate)); s.push(st);
    }
    d.t = t.concat(d.t); d.y = y.concat(d.y); d.s = s.concat(d.s);
  }

  // ---- HTTP ----

  class ApiError extends Error {
    constructor(status, message, body) {
      super(message);
      this.status = status;
      this.body = body || null;
    }
  }

  const token = () => $('token').value.trim();

  async function api(path, opts) {
    opts = opts || {};
    const headers = { 'Accept': 'application/json' };
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    const tok = token();
    if (tok) headers['Authorization'] = 'Bearer ' + tok;
    let resp;
    try {
      resp = await fetch(path, { method: opts.method || 'GET', headers: headers, body: opts.body, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      throw new ApiError(0, 'the coordinator is unreachable');
    }
    const text = await resp.text();
    let body = null;
    if (text) {
      try { body = JSON.parse(text); } catch (e) { body = null; }
    }
    if (!resp.ok) {
      const msg = (body && body.error) || (resp.status + ' ' + resp.statusText);
      if (resp.status === 401) authProblem(msg);
      throw new ApiError(resp.status, msg, body);
    }
    return body;
  }

  // Encodes a dependency name as a URL path: names may contain '/'.
  const depPath = (name) => name.split('/').map(encodeURIComponent).join('/');

  // ---- snapshots ----

  let pollTimer = 0, soonTimer = 0, polling = false, pollAgain = false, applyMs = 0, renderMs = 0;

  async function poll() {
    clearTimeout(pollTimer);
    clearTimeout(soonTimer);
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    try {
      const snap = await api('/api/v1/fleet?compact=1');
      const t0 = performance.now();
      applySnapshot(snap);
      applyMs = performance.now() - t0;
      clearBanner('fleet');
    } catch (e) {
      if (e.status !== 401) showBanner('fleet', 'Cannot read the fleet: ' + e.message);
    } finally {
      polling = false;
      if (pollAgain) {
        pollAgain = false;
        refreshSoon(50);
      } else {
        // Keep polling under a tenth of the main thread, however large the fleet.
        pollTimer = setTimeout(poll, Math.max(document.hidden ? HIDDEN_POLL_MS : POLL_MS, 10 * (applyMs + renderMs)));
      }
    }
  }

  // refreshSoon coalesces the refreshes that bursts of events ask for.
  function refreshSoon(ms) {
    clearTimeout(soonTimer);
    soonTimer = setTimeout(poll, ms === undefined ? 250 : ms);
  }

  function applySnapshot(snap) {
    const at = Date.parse(snap.at) || Date.now();
    model.skew = at - Date.now();
    model.at = at;
    model.members = snap.members || [];
    const seen = new Set();
    for (const v of snap.dependencies || []) {
      let d = model.deps.get(v.dependency);
      if (!d) d = addDep(v.dependency);
      seen.add(v.dependency);
      applyView(d, v, at);
    }
    for (const [name, d] of model.deps) {
      if (!seen.has(name) && d.eventAt <= at) removeDep(d);
    }
    model.loaded = true;
    schedule();
  }

  let namesDirty = true;

  function addDep(name) {
    const d = newDep(name);
    model.deps.set(name, d);
    orderDirty = true;
    namesDirty = true;
    return d;
  }

  function removeDep(d) {
    model.deps.delete(d.name);
    if (d.row) {
      rowObserver.unobserve(d.row);
      d.row.remove();
    }
    orderDirty = true;
    namesDirty = true;
  }

  async function loadPolicies() {
    try {
      const p = await api('/api/v1/policies');
      model.defaultPolicy = p.default || null;
      model.policies = p.policies || {};
      schedule();
    } catch (e) { /* the poll reports the problem */ }
  }

  async function loadWhoami() {
    const el = $('whoami');
    try {
      const w = await api('/api/v1/whoami');
      model.who = w;
      el.textContent = w.name + ' · ' + w.role + (w.tokens ? '' : ' (no tokens file: loopback only)');
      el.title = el.textContent + (w.role === 'admin' ? ': may read and override' : ': may read; overrides need an admin token');
      $('coordinator').textContent = w.coordinator + ' · ' + w.version;
      clearBanner('auth');
      if (route.dep) renderPolicyBox();
    } catch (e) {
      model.who = null;
      el.textContent = e.status === 401 ? 'no valid token' : '';
      el.title = '';
      if (route.dep) renderPolicyBox();
    }
  }

  function authProblem(msg) {
    showBanner('auth', 'This coordinator needs a token: type a viewer token to watch the fleet, an admin token to override breakers. (' + msg + ')');
  }

  // ---- live events ----
  //
  // The event stream is read with fetch, not EventSource: EventSource
  // cannot send the Authorization header, and a token never goes in a URL
  // (proxies log URLs; the coordinator refuses a token in the query). The body is
  // parsed as server-sent events; a reconnect sends Last-Event-ID, so the
  // coordinator replays what it still keeps.

  const MAX_EVENT_BYTES = 1 << 20; // an event larger than this ends the stream
  let stream = null, esTimer = 0, esBackoff = 1000, lastEventId = '';

  function setConn(state, title) {
    const c = $('conn');
    c.dataset.state = state;
    c.textContent = state;
    c.title = title || 'The live event stream (/api/v1/events)';
  }

  // retryStream says why the stream is down and tries again, backing off.
  function retryStream(ctrl, state, title) {
    if (stream !== ctrl) return;
    stream = null;
    setConn(state, title);
    clearTimeout(esTimer);
    esTimer = setTimeout(connect, esBackoff);
    esBackoff = Math.min(esBackoff * 2, 30000);
  }

  async function connect() {
    clearTimeout(esTimer);
    if (stream) stream.abort();
    const ctrl = new AbortController();
    stream = ctrl;
    setConn('connecting');
    const headers = { 'Accept': 'text/event-stream' };
    const tok = token();
    if (tok) headers['Authorization'] = 'Bearer ' + tok;
    if (lastEventId) headers['Last-Event-ID'] = lastEventId;
    let resp;
    try {
      resp = await fetch('/api/v1/events', { headers: headers, cache: 'no-store', credentials: 'omit', signal: ctrl.signal });
    } catch (e) {
      retryStream(ctrl, 'offline', 'The coordinator is unreachable; retrying');
      return;
    }
    if (stream !== ctrl) return;
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try { msg = (await resp.json()).error || msg; } catch (e) { /* not JSON */ }
      if (resp.status === 401) authProblem(msg);
      // 429/503: past the coordinator's stream caps (named in msg).
      retryStream(ctrl, resp.status === 401 ? 'unauthorized' : (resp.status === 429 || resp.status === 503) ? 'refused' : 'offline', msg);
      return;
    }
    esBackoff = 1000;
    setConn('live');
    refreshSoon(0); // whatever happened while we were away
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const r = await reader.read();
        if (r.done) break;
        buf += decoder.decode(r.value, { stream: true }).replace(/\r\n?/g, '\n');
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          sseBlock(block);
        }
        if (buf.length > MAX_EVENT_BYTES) break;
      }
    } catch (e) { /* aborted, or the connection broke */ }
    retryStream(ctrl, 'reconnecting', 'The event stream ended; reconnecting');
  }

  // sseBlock handles one server-sent event: "id:", "event:" and "data:"
  // lines; comments (keep-alives) start with ':'.
  function sseBlock(block) {
    let type = 'message', data = '', id = null;
    for (const line of block.split('\n')) {
      if (!line || line[0] === ':') continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'event') type = value;
      else if (field === 'data') data += (data ? '\n' : '') + value;
      else if (field === 'id') id = value;
    }
    if (id !== null) lastEventId = id;
    if (data && (type === 'transition' || type === 'override' || type === 'policy')) onEvent({ data: data });
  }

  function onEvent(msg) {
    let e;
    try { e = JSON.parse(msg.data); } catch (err) { return; }
    const at = Date.parse(e.at) || serverNow();
    if (e.type === 'policy') {
      loadPolicies();
      refreshSoon();
      if (route.dep === e.dependency) {
        loadDepExtras();
        loadStoredPolicy(false);
      }
      return;
    }
    if (!e.dependency || e.dependency === '_default') return;
    let d = model.deps.get(e.dependency);
    if (!d) d = addDep(e.dependency);
    if (e.type === 'transition') {
      if (route.dep === d.name) historySoon();
      if (e.zone) { // scope "zone": the snapshot says which zone's record shows
        refreshSoon(0);
        return;
      }
      if (e.state === 'closed') {
        d.incident = 0;
        d.trip = null;
      }
      d.breaker = e.state;
    } else if (e.type === 'override') {
      d.override = (e.state === 'forced-open' || e.state === 'forced-closed') ? e.state : '';
      d.ov = d.override ? { actor: e.actor || '', reason: e.reason || '', created: at, expires: e.expires ? Date.parse(e.expires) || 0 : 0 } : null;
      if (route.dep === d.name) loadDepExtras();
    } else {
      return;
    }
    markEvent(d, at);
    refreshSoon();
  }

  function markEvent(d, at) {
    const old = sortValue(d);
    d.eventAt = Math.max(d.eventAt, at);
    d.shown = shownOf(d);
    pushPoint(d, at, d.fr, d.shown);
    d.stateDirty = true;
    d.rowDirty = true;
    d.sparkDirty = true;
    if (sortValue(d) !== old) orderDirty = true;
    schedule();
  }

  // ---- overrides ----

  function actionStatus(result, text) {
    const s = $('action-status');
    s.dataset.result = result;
    s.textContent = text;
    s.title = text;
  }

  async function override(kind) {
    const dep = $('force-dep').value.trim();
    const ttl = $('force-ttl').value.trim();
    const reason = $('force-reason').value.trim();
    if (!dep) {
      actionStatus('error', 'error: name the dependency to override');
      $('force-dep').focus();
      return;
    }
    actionStatus('pending', (kind === 'clear' ? 'clearing ' : 'setting ' + kind + ' on ') + dep + '…');
    try {
      if (kind === 'clear') {
        const r = await api('/api/v1/overrides/' + depPath(dep), { method: 'DELETE' });
        actionStatus('ok', r.cleared ? 'ok: cleared the override of ' + dep : 'ok: ' + dep + ' had no override');
        const d = model.deps.get(dep);
        if (d && r.cleared) {
          d.override = '';
          markEvent(d, serverNow());
        }
      } else {
        const o = await api('/api/v1/overrides/' + depPath(dep), {
          method: 'POST', body: JSON.stringify({ state: kind, ttl: ttl, reason: reason }),
        });
        actionStatus('ok', 'ok: ' + dep + ' is ' + o.state + (o.expires ? ' until ' + fmtTime(o.expires) : ' until cleared') + ' (by ' + printable(o.actor) + ')');
        const d = model.deps.get(dep) || addDep(dep);
        d.override = o.state;
        markEvent(d, serverNow());
      }
      refreshSoon(0);
      if (route.dep === dep) loadDepExtras();
    } catch (e) {
      if (e.status === 401 || e.status === 403) {
        // Ask for what is missing: the token box is where it goes.
        actionStatus('error', 'error: ' + e.message + ' (overrides need an admin token: paste one in the Token box)');
        $('token').focus();
      } else {
        actionStatus('error', 'error: ' + e.message);
      }
    }
  }

  // ---- formatting ----

  function pct(x) {
    if (!isFinite(x)) return '—';
    const p = x * 100;
    if (p === 0) return '0%';
    return (p >= 10 ? p.toFixed(0) : p.toFixed(1)) + '%';
  }

  function fmtRate(r) {
    if (!isFinite(r) || r === 0) return '0';
    if (r >= 100) return r.toFixed(0);
    if (r >= 10) return r.toFixed(1);
    return r.toFixed(2);
  }

  function fmtTime(x) {
    const d = new Date(x);
    return isNaN(d) ? '—' : d.toLocaleTimeString([], { hour12: false });
  }

  function fmtDateTime(x) {
    const d = new Date(x);
    return isNaN(d) ? '—' : d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + d.toLocaleTimeString([], { hour12: false });
  }

  // fmtDur writes a span in ms the way Go does, roughly: "800ms", "10s", "2m30s".
  function fmtDur(ms) {
    if (!isFinite(ms) || ms <= 0) return '0s';
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 10000) return Math.round(ms / 100) / 10 + 's';
    const s = Math.round(ms / 1000);
    if (s < 60) return s + 's';
    const m = Math.floor(s / 60);
    return m + 'm' + (s % 60 ? (s % 60) + 's' : '');
  }

  function fmtCount(x) {
    return isFinite(x) ? String(Math.round(x)) : '—';
  }

  // printable shows text others wrote (actors, reasons) as the coordinator
  // prints it (sharedstate.PrintableText): control characters, line
  // separators and direction marks become escapes such as \x1b and \u202e.
  function printable(s) {
    return String(s || '').replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffd]/g, (c) => {
      const n = c.charCodeAt(0);
      if (c === '\n') return '\\n';
      if (c === '\r') return '\\r';
      if (c === '\t') return '\\t';
      return n < 0x100 ? '\\x' + n.toString(16).padStart(2, '0') : '\\u' + n.toString(16).padStart(4, '0');
    });
  }

  function fmtAgo(ms) {
    if (!isFinite(ms)) return '';
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 90) return s + 's';
    if (s < 5400) return Math.round(s / 60) + 'm';
    return (s / 3600).toFixed(1) + 'h';
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function badge(state) {
    const b = el('span', 'badge', state);
    b.dataset.state = state;
    return b;
  }

  function stateTitle(d) {
    const v = d.v || {};
    const parts = ['breaker ' + d.breaker];
    if (v.reason) parts.push('last change: ' + printable(v.reason));
    if (d.override) parts.push(d.override + (d.ov && d.ov.reason ? ': ' + printable(d.ov.reason) : ''));
    if (d.shadow) parts.push('shadow mode: computes and reports, never rejects');
    return parts.join(' · ');
  }

  // whyOf names what holds a breaker open: "forced" (an operator), "slow
  // calls" or "failures" (what tripped it); '' while it is closed.
  function whyOf(d) {
    if (d.override === 'forced-open') return 'forced';
    if (d.breaker === 'closed' || d.override === 'forced-closed') return '';
    if (d.trip) return d.trip.slow ? 'slow calls' : 'failures';
    const r = (d.v && d.v.reason) || '';
    if (/slow/i.test(r)) return 'slow calls';
    return r ? 'failures' : '';
  }

  // tripFacts reads a TripEvidence: what tripped, at what rate against
  // which threshold, over how many requests and nodes.
  function tripFacts(t) {
    const slow = !!t.slow;
    const req = num(t.requests);
    const n = slow ? num(t.slowCalls) : num(t.failures);
    return {
      slow: slow, what: slow ? 'slow calls' : 'failures', n: n, req: req, rate: req ? n / req : 0,
      thr: slow ? num(t.slowCallRateThreshold) : num(t.failureRateThreshold),
      nodes: num(t.failingNodeCount), withRequests: num(t.nodes), names: t.failingNodes || [],
      horizon: (t.fastPath ? 'the last ' : 'the window of ') + fmtDur(num(t.horizonNanos) / 1e6),
    };
  }

  // tripText is the evidence in a cell: "failures 80% ≥ 50% of 40 req · 2 nodes".
  function tripText(t) {
    const f = tripFacts(t);
    return f.what + ' ' + pct(f.rate) + ' ≥ ' + pct(f.thr) + ' of ' + f.req + ' req · ' + f.nodes + (f.nodes === 1 ? ' node' : ' nodes');
  }

  function tripTitle(t) {
    const f = tripFacts(t);
    const conf = num(t.confidence);
    let s = 'Tripped on ' + f.n + ' ' + f.what + ' of ' + f.req + ' requests (' + pct(f.rate) + ') over ' + f.horizon +
      ', from ' + f.nodes + ' failing of ' + f.withRequests + ' nodes with requests' + (f.names.length ? ': ' + f.names.join(', ') +
      (f.nodes > f.names.length ? ' and ' + (f.nodes - f.names.length) + ' more' : '') : '') + '.';
    s += conf > 0 ? ' Lower bound of the rate ' + pct(num(t.lowerBound)) + ' at ' + Math.round(conf * 1000) / 10 + '% confidence ≥ ' + pct(f.thr) + '.'
      : ' Classic rule: the rate itself ≥ ' + pct(f.thr) + '.';
    return s + ' The policy wants at least ' + num(t.minimumRequests) + ' requests from ' + num(t.minFailingNodes) + ' failing nodes.';
  }

  function overrideText(d) {
    const o = d.ov || {};
    let s = (o.actor ? printable(o.actor) : 'an operator') + (o.reason ? ': ' + printable(o.reason) : '');
    s += o.expires ? ' · until ' + fmtTime(o.expires) + ' (' + fmtAgo(o.expires - serverNow()) + ' left)' : ' · until cleared';
    return s;
  }

  function rampText(d) {
    return 'Ramp: admitting ' + pct(1 - d.ramp.p) + ' of first attempts until ' + fmtTime(d.ramp.until);
  }

  // whyCell is the Why · who column: what holds the breaker where it is
  // (the trip's evidence, the override's author, reason and expiry, the
  // ramp after a close), and its tooltip.
  function whyCell(d) {
    const v = d.v || {};
    if (d.override) return [overrideText(d), d.override + ' by ' + overrideText(d) + (d.ov && d.ov.created ? ' (set ' + fmtDateTime(d.ov.created) + ')' : '')];
    if (d.breaker !== 'closed') {
      const pre = d.shadow ? 'would: ' : '';
      if (d.trip) return [pre + tripText(d.trip), tripTitle(d.trip) + (v.reason ? '\nLast change: ' + printable(v.reason) : '')];
      return [pre + (v.reason ? printable(v.reason) : '—'), 'The node that opened it did not say what it tripped on.'];
    }
    if (d.ramp) return [rampText(d), 'After the close, first attempts are admitted at a share rising from breaker.rampStart to all over breaker.rampDuration; the rest are refused as throttled.'];
    return ['—', ''];
  }

  // sinceOf is the incident's start under the badge: "since 12:03:04 (5m)
  // · 4 opens" (the first open of the run of re-opens, kept until the
  // breaker closes), or when an override was set.
  function sinceOf(d) {
    const v = d.v || {};
    const now = model.at || serverNow();
    if (d.override && d.ov && d.ov.created) return ['set ' + fmtTime(d.ov.created) + ' (' + fmtAgo(now - d.ov.created) + ')', 'override set ' + fmtDateTime(d.ov.created)];
    const cur = v.since ? Date.parse(v.since) : 0;
    if (d.breaker === 'closed') {
      return d.ramp && cur ? ['closed ' + fmtTime(cur) + ' (' + fmtAgo(now - cur) + ')', 'closed ' + fmtDateTime(cur) + ', ramping up until ' + fmtDateTime(d.ramp.until)] : ['', ''];
    }
    const start = d.incident || cur;
    if (!start) return ['', ''];
    const opens = num(v.openCount);
    const text = 'since ' + fmtTime(start) + ' (' + fmtAgo(now - start) + ')' + (opens > 1 ? ' · ' + opens + ' opens' : '');
    const title = (d.incident ? 'Incident since ' + fmtDateTime(d.incident) + ': the trip, the first of ' + Math.max(1, opens) + ' opens in a row'
      : 'Open since ' + fmtDateTime(cur) + ' (the node that opened it did not say when the incident began)') +
      (cur && cur !== start ? '; ' + d.breaker + ' since ' + fmtDateTime(cur) : '');
    return [text, title];
  }


  // failingCell is the failing nodes column: while open, the nodes whose
  // failures tripped the breaker (the current window's failing nodes are
  // only the probers by then); else the nodes failing now.
  function failingCell(d) {
    const now = d.failing.map((n) => n.node + ': ' + n.failures + ' failures').join('\n');
    if (d.trip && d.breaker !== 'closed' && !d.override) {
      const names = d.trip.failingNodes || [];
      const count = num(d.trip.failingNodeCount);
      const items = names.concat(count > names.length ? ['+' + (count - names.length)] : []);
      return [items.length ? 'at trip: ' : '', items.length ? items : ['—'],
        'The nodes whose failures tripped the breaker' + (d.incident ? ' at ' + fmtTime(d.incident) : '') + (now ? '\nFailing now:\n' + now : '')];
    }
    const xs = d.failing.map((n) => n.node);
    return ['', xs.length ? xs.slice(0, 5).concat(xs.length > 5 ? ['+' + (xs.length - 5)] : []) : ['—'], now];
  }

  // ---- the fleet table ----

  const tbody = $('dep-rows');
  const rowTemplate = $('row-template').content.firstElementChild;
  let orderDirty = true, rafPending = false, filterText = '';
  const sort = { key: 'state', dir: 1 };

  const rowObserver = new IntersectionObserver((entries) => {
    let again = false;
    for (const en of entries) {
      const d = model.deps.get(en.target.dataset.dep);
      if (!d) continue;
      d.visible = en.isIntersecting;
      if (d.visible) {
        if (d.sparkDirty || d.rowDirty) again = true;
        if (!d.seeded) enqueueSeed(d);
      }
    }
    if (again) schedule();
  }, { rootMargin: '300px 0px' });

  function createRow(d) {
    const tr = rowTemplate.cloneNode(true);
    tr.dataset.dep = d.name;
    const c = tr.cells;
    const a = c[0].firstElementChild;
    a.textContent = d.name;
    a.title = d.name;
    a.href = '#/dep/' + encodeURIComponent(d.name);
    const svg = c[10].firstElementChild;
    d.cells = {
      state: c[1], badge: c[1].firstElementChild, since: c[1].lastElementChild, why: c[2], fr: c[3], sr: c[4], rps: c[5],
      meter: c[6].firstElementChild, pct: c[6].lastElementChild, nodes: c[7], zones: c[8], probers: c[9],
      bands: svg.children[0], line: svg.children[1], marks: svg.children[2], local: null, would: null,
    };
    d.r = {};
    d.row = tr;
    d.stateDirty = true;
    d.rowDirty = true;
    d.sparkDirty = true;
    rowObserver.observe(tr);
  }

  function setText(d, key, node, text, title) {
    if (d.r[key] !== text) {
      d.r[key] = text;
      node.textContent = text;
    }
    if (title !== undefined && d.r[key + '.title'] !== title) {
      d.r[key + '.title'] = title;
      node.title = title;
    }
  }

  // setItems is setText for a list: each item in a span that does not
  // wrap (a name such as "zone-b" is never cut at its hyphen), the rows
  // wrapping between items instead. The cell's text is prefix, then the
  // items joined by sep.
  function setItems(d, key, node, prefix, items, sep, title) {
    const text = prefix + items.join(sep);
    if (d.r[key] !== text) {
      d.r[key] = text;
      const kids = prefix ? [prefix] : [];
      items.forEach((it, i) => {
        if (i) kids.push(sep);
        kids.push(el('span', 'item', it));
      });
      node.replaceChildren(...kids);
    }
    if (title !== undefined && d.r[key + '.title'] !== title) {
      d.r[key + '.title'] = title;
      node.title = title;
    }
  }

  // updateState writes what the DOM contract promises is always current,
  // in every attached row: the badge, the local-open marker, the shadow
  // note. It is cheap, so it runs for all of them.
  function updateState(d) {
    const c = d.cells;
    if (d.r.state !== d.shown) {
      d.r.state = d.shown;
      c.badge.dataset.state = d.shown;
      c.badge.textContent = d.shown;
    }
    const st = stateTitle(d);
    if (d.r.stateTitle !== st) {
      d.r.stateTitle = st;
      c.badge.title = st;
    }
    // What holds it there, and since when: always current, like the badge.
    const [why, whyTitle] = whyCell(d);
    setText(d, 'why', c.why, why, whyTitle);
    const kind = d.override ? 'override' : d.breaker !== 'closed' ? whyOf(d) : d.ramp ? 'ramp' : '';
    if (d.r.whyKind !== kind) {
      d.r.whyKind = kind;
      c.why.dataset.why = kind;
    }
    const [since, sinceTitle] = sinceOf(d);
    setText(d, 'since', c.since, since, sinceTitle);
    // Node-local opens: present only while some node is open on its own.
    if (d.localOpen.length) {
      if (!c.local) {
        c.local = el('span', 'local-open');
        c.since.before(c.local);
        d.r.local = undefined;
      }
      setText(d, 'local', c.local, 'local-open ' + d.localOpen.length, 'open for their own clients only: ' + d.localOpen.join(', '));
    } else if (c.local) {
      c.local.remove();
      c.local = null;
    }
    const would = d.shown === 'shadow' && d.breaker !== 'closed' ? 'would be ' + d.breaker : '';
    if (would) {
      if (!c.would) {
        c.would = el('span', 'would');
        c.since.before(c.would);
        d.r.would = undefined;
      }
      setText(d, 'would', c.would, would);
    } else if (c.would) {
      c.would.remove();
      c.would = null;
    }
  }

  // updateCells writes the numbers and lists; render calls it for rows near
  // the viewport only, and for the others when they come into view.
  function updateCells(d) {
    const c = d.cells;
    setText(d, 'fr', c.fr, pct(d.fr));
    const hot = d.fr > 0 && d.fr >= threshold(d.name);
    if (d.r.hot !== hot) {
      d.r.hot = hot;
      c.fr.classList.toggle('hot', hot);
    }
    setText(d, 'sr', c.sr, pct(d.sr));
    setText(d, 'rps', c.rps, fmtRate(d.rps));
    // Retries against the budget as counts: the share can pass 100% (each
    // agent admits by its own share of what it saw), "106 / 100" says how.
    const used = d.allowed > 0 ? d.retries / d.allowed : d.budget;
    setText(d, 'budget', c.pct, d.allowed > 0 ? fmtCount(d.retries) + ' / ' + fmtCount(d.allowed) : pct(d.budget),
      d.allowed > 0 ? d.retries + ' retries over the window, of a fleet budget of ' + fmtCount(d.allowed) + ' (' + pct(used) + ')' : '');
    const w = Math.min(100, Math.max(0, used * 100)).toFixed(0) + '%';
    if (d.r.meter !== w) {
      d.r.meter = w;
      c.meter.firstElementChild.style.width = w;
      c.meter.classList.toggle('high', used >= 0.8);
    }
    const failing = d.failing.length > 0 || (!!d.trip && d.breaker !== 'closed' && !d.override);
    if (d.r.failing !== failing) {
      d.r.failing = failing;
      c.nodes.classList.toggle('failing', failing);
    }
    const [prefix, nodes, nodesTitle] = failingCell(d);
    setItems(d, 'nodes', c.nodes, prefix, nodes, ', ', nodesTitle);
    const zones = d.zones.filter((z) => z.requests > 0);
    setItems(d, 'zones', c.zones, '', zones.length ? zones.map((z) => (z.zone || '(none)') + ' ' + pct(z.fr)) : ['—'], ' · ',
      d.zones.map((z) => (z.zone || '(none)') + ': ' + z.nodes + ' nodes, ' + z.requests + ' requests, ' + z.failures + ' failures').join('\n'));
    const pr = d.probers;
    setItems(d, 'probers', c.probers, '', pr.length ? pr.slice(0, 5).concat(pr.length > 5 ? ['+' + (pr.length - 5)] : []) : ['—'], ', ', pr.join(', '));
  }

  function sortValue(d) {
    switch (sort.key) {
      case 'state': return severity(d);
      case 'failure': return d.fr;
      case 'slow': return d.sr;
      case 'rps': return d.rps;
      case 'budget': return d.budget;
      default: return 0;
    }
  }

  function compare(a, b) {
    const va = sortValue(a), vb = sortValue(b);
    if (va !== vb) return (va < vb ? -1 : 1) * sort.dir;
    if (a.name === b.name) return 0;
    return (a.name < b.name ? -1 : 1) * (sort.key === 'name' ? sort.dir : 1);
  }

  // reorder puts the matching rows in order and detaches the rows the
  // filter hides. When the order is what the table shows already (the
  // common case: a poll changed numbers, not states) it touches nothing;
  // otherwise it replaces the rows in one DOM operation.
  function reorder() {
    const list = [];
    for (const d of model.deps.values()) {
      if (!filterText || d.lowerName.includes(filterText)) list.push(d);
    }
    list.sort(compare);
    const kids = tbody.children;
    let same = kids.length === list.length;
    for (let i = 0; same && i < list.length; i++) same = kids[i] === list[i].row;
    if (!same) {
      for (const d of list) {
        if (!d.row) createRow(d);
      }
      tbody.replaceChildren(...list.map((d) => d.row));
    }
    const total = model.deps.size;
    $('shown').textContent = filterText ? list.length + ' of ' + total + ' dependencies' : total + (total === 1 ? ' dependency' : ' dependencies');
    $('empty').hidden = !model.loaded || total > 0;
  }

  function drawSeries(d, g, W, H, opts) {
    const now = model.at || serverNow();
    const t0 = now - HISTORY_MS;
    const x = (t) => Math.max(0, Math.min(W, ((t - t0) / HISTORY_MS) * W));
    const y = (v) => H - 1 - Math.max(0, Math.min(1, v)) * (H - 2);
    const pts = [];
    const bands = [];
    const marks = [];
    let bandStart = -1;
    for (let i = 0; i < d.t.length; i++) {
      const xi = x(d.t[i]);
      pts.push(xi.toFixed(1) + ',' + y(d.y[i]).toFixed(1));
      const s = d.s[i];
      if (i > 0 && s !== d.s[i - 1] && d.t[i] >= t0) {
        const m = svgEl('line', { x1: xi.toFixed(1), x2: xi.toFixed(1), y1: 0, y2: H, class: 'mark ' + s });
        const title = svgEl('title', {});
        title.textContent = fmtTime(d.t[i]) + ' ' + d.s[i - 1] + ' → ' + s;
        m.appendChild(title);
        marks.push(m);
      }
      if (bandStart >= 0 && s !== d.s[bandStart]) {
        bands.push(band(x(d.t[bandStart]), xi, H, d.s[bandStart]));
        bandStart = -1;
      }
      if (bandStart < 0 && BAND_STATES.has(s)) bandStart = i;
    }
    if (bandStart >= 0) bands.push(band(x(d.t[bandStart]), W, H, d.s[bandStart]));
    if (opts && opts.threshold > 0) {
      const ty = y(opts.threshold).toFixed(1);
      bands.push(svgEl('line', { x1: 0, x2: W, y1: ty, y2: ty, class: 'threshold' }));
    }
    g.bands.replaceChildren(...bands);
    g.line.setAttribute('points', pts.join(' '));
    g.marks.replaceChildren(...marks);
  }

  function band(x1, x2, H, state) {
    return svgEl('rect', { x: x1.toFixed(1), y: 0, width: Math.max(1, x2 - x1).toFixed(1), height: H, class: 'band ' + state });
  }

  // ---- sparkline seeding ----

  const seedQueue = [];
  let seedsInFlight = 0;

  function enqueueSeed(d) {
    if (d.seeded || d.seeding) return;
    d.seeding = true;
    seedQueue.push(d);
    pumpSeeds();
  }

  function pumpSeeds() {
    while (seedsInFlight < SEED_CONCURRENCY && seedQueue.length) {
      const d = seedQueue.shift();
      if (!d.visible && route.dep !== d.name) { // scrolled away: seeded when it comes back
        d.seeding = false;
        continue;
      }
      seedsInFlight++;
      api('/api/v1/series?dependency=' + encodeURIComponent(d.name) + '&since=5m').then((r) => {
        seedSeries(d, r);
        d.seeded = true;
        d.sparkDirty = true;
        schedule();
      }, (e) => {
        if (e.status === 404) d.seeded = true; // no history kept: the page's own points
        /* else retried when the row is next in view */
      }).finally(() => {
        d.seeding = false;
        seedsInFlight--;
        pumpSeeds();
      });
    }
  }

  // ---- summary ----

  let lastSummary = '';

  function renderSummary() {
    const counts = { 'open': 0, 'half-open': 0, 'forced-open': 0, 'forced-closed': 0, 'shadow': 0, 'local-open': 0 };
    for (const d of model.deps.values()) {
      if (d.shown in counts) counts[d.shown]++;
      if (d.localOpen.length) counts['local-open']++;
    }
    let alive = 0, gone = 0;
    const zones = new Map();
    // Software and gossip frame versions of the alive members (a rolling
    // upgrade shows two), e.g. "0.2.0-dev (wire 2)".
    const versions = new Map();
    for (const m of model.members) {
      if (m.status === 'alive' || m.status === 'suspect') {
        const v = (m.version || '?') + ' (wire ' + (m.wireVersion || '?') + (m.signs ? ', signed' : '') + ')';
        versions.set(v, (versions.get(v) || 0) + 1);
      }
      if (m.role !== 'agent') continue;
      if (m.status === 'alive' || m.status === 'suspect') {
        alive++;
        zones.set(m.zone || '(none)', (zones.get(m.zone || '(none)') || 0) + 1);
      } else {
        gone++;
      }
    }
    const key = JSON.stringify([model.deps.size, counts, alive, gone, [...zones], [...versions]]);
    if (key !== lastSummary) {
      lastSummary = key;
      const chips = [];
      const chip = (cls, n, label) => {
        const c = el('span', 'chip ' + cls);
        c.append(el('b', '', String(n)), ' ' + label);
        chips.push(c);
      };
      chip('total', model.deps.size, 'dependencies');
      for (const s of ['open', 'half-open', 'forced-open', 'forced-closed', 'shadow', 'local-open']) {
        if (counts[s]) chip(s, counts[s], s);
      }
      $('summary').replaceChildren(...chips);
      const zs = [...zones].sort().map(([z, n]) => z + ' ' + n).join(', ');
      const vs = [...versions].sort().map(([v, n]) => v + ' ×' + n).join(', ');
      $('members').textContent = alive + (alive === 1 ? ' agent' : ' agents') + ' alive' + (zs ? ' (' + zs + ')' : '') + (gone ? ', ' + gone + ' gone' : '') +
        (vs ? ' · ' + vs : '');
    }
    if (model.at) $('members').title = 'as of ' + fmtTime(model.at);
  }

  // ---- the dependency page ----

  const depPage = { name: null, override: null, audit: null, auditError: '', chart: null };

  async function loadDepExtras() {
    const name = route.dep;
    if (!name) return;
    const [audit, overrides] = await Promise.allSettled([
      api('/api/v1/audit?limit=50&dependency=' + encodeURIComponent(name)),
      api('/api/v1/overrides'),
    ]);
    if (route.dep !== name) return;
    if (audit.status === 'fulfilled') {
      depPage.audit = audit.value.entries || [];
      depPage.auditError = '';
    } else {
      depPage.auditError = audit.reason.message;
    }
    if (overrides.status === 'fulfilled') {
      depPage.override = (overrides.value.overrides || []).find((o) => o.dependency === name) || null;
    }
    renderAudit();
    schedule();
  }

  function enterDep(name) {
    depPage.name = name;
    depPage.override = null;
    depPage.audit = null;
    depPage.auditError = '';
    $('dep-audit').replaceChildren();
    $('dep-audit-note').textContent = 'loading…';
    const d = model.deps.get(name);
    if (d && !d.seeded) enqueueSeed(d);
    loadDepExtras();
    enterWhatif(name);
  }

  function fact(list, label, value) {
    list.push(el('dt', '', label));
    const dd = el('dd');
    if (value instanceof Node) dd.append(value); else dd.textContent = value;
    list.push(dd);
  }

  function renderDep() {
    const name = route.dep;
    const d = model.deps.get(name);
    $('dep-name').textContent = name;
    $('dep-missing').hidden = !!d || !model.loaded;
    if (!d) {
      $('dep-state').replaceChildren();
      $('dep-facts').replaceChildren();
      return;
    }
    if (!d.seeded) enqueueSeed(d);
    const head = [badge(d.shown)];
    const why = whyOf(d);
    if (why) {
      const w = el('span', 'why', why);
      w.dataset.why = why;
      head.push(w);
    }
    if (d.localOpen.length) head.push(el('span', 'local-open', 'local-open ' + d.localOpen.length));
    if (d.shown === 'shadow' && d.breaker !== 'closed') head.push(el('span', 'would', 'would be ' + d.breaker));
    $('dep-state').replaceChildren(...head);

    const v = d.v || {};
    const p = policyOf(name) || {};
    const b = p.breaker || {};
    const r = p.retry || {};
    const f = v.fleet || {};
    const facts = [];
    let breaker = d.breaker;
    if (v.since) breaker += ' since ' + fmtTime(v.since) + ' (' + fmtAgo(model.at - Date.parse(v.since)) + ')';
    breaker += ' · generation ' + num(v.generation);
    if (num(v.openCount)) breaker += ' · opened ' + num(v.openCount) + '× in a row';
    fact(facts, 'Breaker', breaker);
    if (d.breaker !== 'closed') {
      const cur = v.since ? Date.parse(v.since) : 0;
      const opens = Math.max(1, num(v.openCount));
      const inc = el('span', 'incident', d.incident
        ? 'since ' + fmtDateTime(d.incident) + ' (' + fmtAgo(model.at - d.incident) + ' ago): the trip' +
          (opens > 1 ? ', then ' + (opens - 1) + ' re-open' + (opens > 2 ? 's' : '') + ' after failed probes; this ' + d.breaker + ' since ' + fmtTime(cur) : '')
        : 'not known: the node that opened it did not say (this open since ' + fmtTime(cur) + ')');
      inc.dataset.start = d.incident ? new Date(d.incident).toISOString() : '';
      fact(facts, 'Incident', inc);
      fact(facts, 'Tripped on', el('span', 'trip', d.trip ? tripTitle(d.trip) : 'not known: the node that opened it did not say'));
    }
    fact(facts, 'Last change', v.reason ? printable(v.reason) : '—');
    let ov = 'none';
    if (d.override) {
      ov = d.override + ' · by ' + overrideText(d) + (d.ov && d.ov.created ? ' · set ' + fmtDateTime(d.ov.created) : '');
    }
    fact(facts, 'Override', ov);
    fact(facts, 'Mode', d.shadow ? 'shadow (computes and reports, never rejects)' : (b.mode || 'enforce'));
    fact(facts, 'Failure rate now', pct(d.fr) + ' over the current window' + (b.failureRateThreshold !== undefined ? ' (opens at ' + pct(num(b.failureRateThreshold)) + ')' : ''));
    fact(facts, 'Slow calls now', pct(d.sr) + (b.slowCallRateThreshold !== undefined ? ' (opens at ' + pct(num(b.slowCallRateThreshold)) + ', slow ≥ ' + b.slowCallDuration + ')' : ''));
    fact(facts, 'Requests/s', fmtRate(d.rps) + ' (window ' + (b.window || '10s') + ': ' + (num(f.successes) + num(f.failures)) + ' requests, ' +
      num(f.failures) + ' failures, ' + num(f.retries) + ' retries, ' + num(f.rejected) + ' rejected)');
    fact(facts, 'Retries / budget', (d.allowed > 0 ? d.retries + ' of ' + fmtCount(d.allowed) + ' allowed over the window (' + pct(d.retries / d.allowed) + ')' : pct(d.budget)) +
      (r.budget ? ' · budget: ratio ' + r.budget.ratio + ' of first attempts, at least ' + r.budget.minRetriesPerSecond + '/s fleet-wide' : ''));
    // Adaptive throttling and the concurrency limit (policy sections
    // "throttle" and "concurrency"), over the fleet's window and rows.
    // The ramp after a close throttles too: say so rather than "off".
    const th = d.ramp
      ? el('span', 'throttle ramp', rampText(d) + ' (from ' + pct(num(b.rampStart)) + ' over ' + (b.rampDuration || '?') + ' after the close)')
      : v.throttleEnabled
        ? el('span', 'throttle', 'refusing ' + pct(num(v.throttleProbability)) + ' of first attempts while closed' +
          (p.throttle ? ' (k ' + p.throttle.k + ', from ' + p.throttle.minRequests + ' requests)' : ''))
        : el('span', 'throttle muted', 'off');
    th.dataset.probability = String(d.ramp ? d.ramp.p : v.throttleEnabled ? num(v.throttleProbability) : 0);
    fact(facts, 'Throttle', th);
    const inFlight = num(v.inFlight), limit = num(v.maxInFlight);
    const fl = el('span', 'in-flight', limit ? inFlight + ' of ' + limit + ' (' + pct(inFlight / limit) + ' of the fleet limit)' : inFlight + ' (no limit)');
    fl.dataset.inFlight = String(inFlight);
    fl.dataset.limit = String(limit);
    if (limit && inFlight >= limit) fl.classList.add('hot');
    fact(facts, 'In flight', fl);
    fact(facts, 'Failing nodes', d.failing.length ? d.failing.map((n) => n.node + ' (' + n.failures + ')').join(', ') : '—');
    fact(facts, 'Probers', d.probers.length ? d.probers.join(', ') : '—');
    fact(facts, 'Node-local opens', d.localOpen.length ? d.localOpen.join(', ') : '—');
    const tb = v.breaker || b;
    if (tb.confidence !== undefined || tb.fastPath !== undefined) {
      const conf = num(tb.confidence);
      fact(facts, 'Trip rule', conf > 0
        ? 'lower bound at ' + Math.round(conf * 1000) / 10 + '% confidence · fast path ' + (tb.fastPath ? 'on (freshest suffixes of the window)' : 'off')
        : 'classic (confidence 0): the rate itself, no fast path');
    }
    if (b.minimumRequests !== undefined) {
      fact(facts, 'Policy', 'at least ' + b.minimumRequests + ' requests from ' + b.minFailingNodes + ' failing nodes · open ' +
        b.openDuration + ' (max ' + b.maxOpenDuration + ') · ' + b.halfOpenProbes + ' probes · scope ' + b.scope);
    }
    $('dep-facts').replaceChildren(...facts);

    if (!depPage.chart) {
      const svg = $('dep-chart');
      depPage.chart = { bands: svgEl('g', {}), line: svgEl('polyline', { class: 'line', points: '' }), marks: svgEl('g', {}) };
      svg.append(depPage.chart.bands, depPage.chart.line, depPage.chart.marks);
    }
    drawSeries(d, depPage.chart, 600, 140, { threshold: num(b.failureRateThreshold) });
    $('dep-chart-legend').textContent = 'line: failure rate · dashed: threshold ' + pct(num(b.failureRateThreshold)) + ' · shading: open, half-open, forced · marks: state changes';
    const changes = [];
    for (let i = d.t.length - 1; i > 0 && changes.length < 20; i--) {
      if (d.s[i] !== d.s[i - 1]) changes.push(el('li', '', fmtTime(d.t[i]) + '  ' + d.s[i - 1] + ' → ' + d.s[i]));
    }
    if (!changes.length) changes.push(el('li', 'muted', 'no state change in the last 5 minutes'));
    $('dep-changes').replaceChildren(...changes);

    $('dep-zones').replaceChildren(...(d.zones.length ? d.zones.map((z) => {
      const tr = el('tr');
      tr.dataset.zone = z.zone;
      tr.append(el('td', '', z.zone || '(none)'), el('td', 'num', String(z.nodes)), el('td', 'num', String(z.requests)),
        el('td', 'num', String(z.failures)), el('td', 'num', pct(z.fr)), el('td', 'num', pct(z.sr)), el('td', 'num', String(z.rejected)));
      return tr;
    }) : [emptyRow(7, 'no traffic in the window')]));

    const probers = new Set(d.probers);
    const nodes = (v.nodes || []).map((n) => {
      const c = n.counts || {};
      const req = num(c.successes) + num(c.failures);
      const tr = el('tr');
      tr.dataset.node = n.node;
      const role = el('td');
      if (n.nodeLocalOpen) role.append(el('span', 'local-open', 'local-open'));
      if (probers.has(n.node) || n.prober) role.append(el('span', 'yes', ' prober'));
      const fr = el('td', 'num', pct(req ? num(c.failures) / req : 0));
      if (num(c.failures) > 0) fr.classList.add('hot');
      tr.append(el('td', '', n.node), el('td', '', n.zone || '—'), el('td', 'num', String(num(c.firstAttempts))),
        el('td', 'num', String(num(c.retries))), el('td', 'num', String(num(c.successes))), el('td', 'num', String(num(c.failures))),
        el('td', 'num', String(num(c.slowCalls))), el('td', 'num', String(num(c.rejected))), fr, role);
      return tr;
    });
    $('dep-nodes').replaceChildren(...(nodes.length ? nodes : [emptyRow(10, 'no node reports traffic in the window')]));
  }

  function emptyRow(span, text) {
    const tr = el('tr');
    const td = el('td', 'muted', text);
    td.colSpan = span;
    tr.append(td);
    return tr;
  }

  function flatten(o, prefix, out) {
    if (o === null || typeof o !== 'object' || Array.isArray(o)) {
      out[prefix] = JSON.stringify(o);
      return out;
    }
    for (const k of Object.keys(o)) flatten(o[k], prefix ? prefix + '.' + k : k, out);
    return out;
  }

  function auditChange(e) {
    const before = e.before, after = e.after;
    switch (e.action) {
      case 'override.set': {
        let s = (after && after.state) || '?';
        if (after && after.expires) s += ' until ' + fmtDateTime(after.expires);
        else s += ' until cleared';
        if (after && after.reason) s += ' — ' + after.reason;
        if (before && before.state) s = 'replaced ' + before.state + ': ' + s;
        return s;
      }
      case 'override.clear':
        return 'cleared ' + ((before && before.state) || 'the override') + (before && before.reason ? ' — ' + before.reason : '');
      case 'policy.delete':
        return 'policy deleted';
      case 'policy.put': {
        const a = flatten(after, '', {}), b = before ? flatten(before, '', {}) : {};
        const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => k !== 'schema' && k !== 'dependency').sort();
        const lines = keys.filter((k) => a[k] !== b[k]).map((k) => k + ': ' + (b[k] === undefined ? '—' : b[k]) + ' → ' + (a[k] === undefined ? '—' : a[k]));
        return lines.length ? lines.join('\n') : 'policy written, unchanged';
      }
      default:
        return JSON.stringify(after);
    }
  }

  function renderAudit() {
    const note = $('dep-audit-note');
    if (depPage.auditError) {
      note.textContent = 'Cannot read the audit: ' + depPage.auditError;
      return;
    }
    const entries = depPage.audit || [];
    $('dep-audit').replaceChildren(...(entries.length ? entries.map((e) => {
      const tr = el('tr');
      tr.dataset.revision = e.revision;
      tr.append(el('td', '', fmtDateTime(e.at)), el('td', 'actor', printable(e.actor)), el('td', '', e.action), el('td', 'change', auditChange(e).split('\n').map(printable).join('\n')));
      return tr;
    }) : [emptyRow(4, 'nobody changed this dependency\'s policy or override')]));
    note.textContent = entries.length ? 'Newest first (at most 50). Overrides that expire by their TTL leave no entry.' : '';
  }

  // ---- history and what-if (the dependency page) ----
  //
  // GET /api/v1/series draws the dependency's history (failure and
  // slow-call rates, the breaker's states as bands); an admin edits the
  // policy in #policy-json, POST /api/v1/simulate replays it (its states
  // overlaid under the plot, its summary in #policy-sim, violations by
  // JSON path in #policy-violations), and PUT /api/v1/policies/NAME writes
  // it with a compare-and-swap on the revision loaded. A viewer gets the
  // stored policy to read: the editor is not rendered at all.

  // rev is the stored policy's latest revision; base the one the editor's
  // text was loaded from, which a save must still find (compare-and-swap):
  // a write by someone else meanwhile moves rev, never base.
  // act counts the editor's actions: a simulation that ends after a later
  // save (or simulation) leaves the status line to it.
  const whatif = { name: null, series: null, sim: null, stored: null, rev: 0, base: 0, since: '15m', timer: 0, simTimer: 0, seq: 0, histSeq: 0, act: 0 };

  function enterWhatif(name) {
    whatif.name = name;
    whatif.series = null;
    whatif.sim = null;
    whatif.stored = null;
    whatif.rev = 0;
    whatif.base = 0;
    $('dep-history').replaceChildren();
    $('hist-note').textContent = 'loading…';
    loadHistory();
    loadStoredPolicy(true);
    clearInterval(whatif.timer);
    whatif.timer = setInterval(() => {
      if (route.dep && !document.hidden) loadHistory();
    }, 15000);
  }

  let historyTimer = 0;
  function historySoon() {
    clearTimeout(historyTimer);
    historyTimer = setTimeout(loadHistory, 2500); // the history trails the gossip by a couple of seconds
  }

  async function loadHistory() {
    const name = route.dep;
    if (!name) return;
    const seq = ++whatif.histSeq;
    try {
      const s = await api('/api/v1/series?dependency=' + encodeURIComponent(name) + '&since=' + encodeURIComponent(whatif.since));
      if (route.dep !== name || seq !== whatif.histSeq) return;
      whatif.series = s;
      $('hist-note').textContent = '';
    } catch (e) {
      if (route.dep !== name) return;
      whatif.series = null;
      $('hist-note').textContent = e.status === 404 ? 'No history: ' + e.message : 'Cannot read the history: ' + e.message;
    }
    drawHistory();
  }

  function drawHistory() {
    const svg = $('dep-history');
    const s = whatif.series;
    if (!s) {
      svg.replaceChildren();
      return;
    }
    const W = 800, H = 160, LANE = 14;
    const from = Date.parse(s.from), to = Date.parse(s.to);
    const span = Math.max(1, to - from);
    const x = (t) => Math.max(0, Math.min(W, ((t - from) / span) * W));
    const y = (v) => H - LANE - 2 - Math.max(0, Math.min(1, v)) * (H - LANE - 4);
    const reality = svgEl('g', { class: 'reality' });
    for (const iv of s.states || []) {
      if (iv.state === 'closed') continue;
      const b = band(x(Date.parse(iv.from)), x(Date.parse(iv.to)), H - LANE, iv.state);
      b.dataset.state = iv.state;
      const title = svgEl('title', {});
      title.textContent = iv.state + ' ' + fmtTime(iv.from) + '–' + fmtTime(iv.to) + (iv.reason ? ': ' + iv.reason : '');
      b.appendChild(title);
      reality.appendChild(b);
    }
    const fr = [], sr = [];
    for (const p of s.points || []) {
      const xi = x(Date.parse(p.at)).toFixed(1);
      fr.push(xi + ',' + y(num(p.failureRate)).toFixed(1));
      sr.push(xi + ',' + y(num(p.slowRate)).toFixed(1));
    }
    const kids = [reality,
      svgEl('polyline', { class: 'line slow', points: sr.join(' ') }),
      svgEl('polyline', { class: 'line', points: fr.join(' ') })];
    const p = policyOf(route.dep) || {};
    const thr = p.breaker ? num(p.breaker.failureRateThreshold) : 0;
    if (thr > 0) kids.push(svgEl('line', { x1: 0, x2: W, y1: y(thr).toFixed(1), y2: y(thr).toFixed(1), class: 'threshold' }));
    // A proposed policy's replay, in a lane under the plot.
    const overlay = svgEl('g', { class: 'overlay' });
    if (whatif.sim && whatif.sim.proposed) {
      for (const iv of whatif.sim.proposed.states || []) {
        if (iv.state === 'closed') continue;
        const r = svgEl('rect', { x: x(Date.parse(iv.from)).toFixed(1), y: H - LANE + 2, width: Math.max(1, x(Date.parse(iv.to)) - x(Date.parse(iv.from))).toFixed(1),
          height: LANE - 3, class: 'band proposed ' + iv.state });
        r.dataset.state = iv.state;
        const title = svgEl('title', {});
        title.textContent = 'proposed: ' + iv.state + ' ' + fmtTime(iv.from) + '–' + fmtTime(iv.to);
        r.appendChild(title);
        overlay.appendChild(r);
      }
    }
    kids.push(overlay);
    svg.replaceChildren(...kids);
    const axis = $('hist-axis').children;
    axis[0].textContent = fmtTime(s.from);
    axis[1].textContent = fmtTime(s.to) + ' (' + s.step + ' points)';
    $('hist-legend').textContent = 'line: failure rate · dashed: slow calls' + (thr ? ' · red dashes: threshold ' + pct(thr) : '') +
      ' · shading: the breaker open, half-open, forced' + (whatif.sim ? ' · lane below: the proposed policy' : '');
  }

  async function loadStoredPolicy(fillEditor) {
    const name = route.dep;
    if (!name) return;
    try {
      const e = await api('/api/v1/policies/' + depPath(name));
      if (route.dep !== name) return;
      whatif.stored = e.policy;
      whatif.rev = num(e.modRevision);
    } catch (err) {
      if (route.dep !== name) return;
      whatif.stored = null;
      whatif.rev = 0; // none stored: the write must find none either
      if (err.status !== 404) $('policy-note').textContent = 'Cannot read the policy: ' + err.message;
    }
    if (fillEditor || !$('policy-json')) whatif.base = whatif.rev;
    renderPolicyBox(fillEditor);
  }

  const isAdmin = () => !!(model.who && model.who.role === 'admin');

  function policyText() {
    if (whatif.stored) return JSON.stringify(whatif.stored, null, 2);
    return JSON.stringify({ schema: 1, dependency: route.dep }, null, 2);
  }

  // renderPolicyBox shows the stored policy, and for an admin the editor
  // (created from its template; removed for anyone else).
  function renderPolicyBox(fillEditor) {
    if (!route.dep) return;
    const box = $('policy-box');
    $('policy-current').textContent = whatif.stored ? JSON.stringify(whatif.stored, null, 2) :
      'No policy of its own: ' + route.dep + ' runs on the fleet default.';
    let ed = $('policy-editor');
    if (!isAdmin()) {
      if (ed) ed.remove();
      $('policy-note').textContent = 'Revision ' + (whatif.rev || '—') + '. Changing the policy needs an admin token.';
      return;
    }
    $('policy-note').textContent = 'Revision ' + (whatif.rev || 'none (the fleet default)') + '.' + (whatif.base !== whatif.rev
      ? ' The editor holds revision ' + (whatif.base || 'none') + ': someone changed the policy since; Reload to edit theirs.' : '');
    if (!ed) {
      whatif.base = whatif.rev;
      ed = $('policy-editor-template').content.firstElementChild.cloneNode(true);
      box.appendChild(ed);
      $('policy-json').value = policyText();
      $('policy-json').addEventListener('input', () => {
        clearTimeout(whatif.simTimer);
        whatif.simTimer = setTimeout(simulatePolicy, 800);
      });
      $('policy-simulate-btn').addEventListener('click', () => simulatePolicy());
      $('policy-save-btn').addEventListener('click', () => savePolicy());
      $('policy-reload-btn').addEventListener('click', () => {
        loadStoredPolicy(true).then(() => policyStatus('ok', 'ok: loaded revision ' + (whatif.base || 'none')));
      });
    } else if (fillEditor) {
      $('policy-json').value = policyText();
    }
  }

  function policyStatus(result, text) {
    const s = $('policy-status');
    if (!s) return;
    s.dataset.result = result;
    s.textContent = text;
    s.title = text;
  }

  // readEditor parses #policy-json: the document, or null with the
  // problem shown.
  function readEditor() {
    const text = $('policy-json').value;
    try {
      return JSON.parse(text);
    } catch (e) {
      showViolations([{ field: '$', message: 'not JSON: ' + e.message }]);
      return null;
    }
  }

  function showViolations(vs) {
    const ul = $('policy-violations');
    if (!ul) return;
    ul.replaceChildren(...(vs || []).map((v) => {
      const li = el('li', '', (v.field ? v.field + ': ' : '') + v.message);
      li.dataset.field = v.field || '';
      return li;
    }));
  }

  function decodePolicy(b64) {
    try { return JSON.parse(atob(b64 || '')); } catch (e) { return null; }
  }

  async function simulatePolicy() {
    clearTimeout(whatif.simTimer);
    if (!$('policy-json')) return;
    const doc = readEditor();
    if (!doc) return;
    const name = route.dep;
    const seq = ++whatif.seq;
    const act = ++whatif.act;
    const status = (result, text) => {
      if (act === whatif.act) policyStatus(result, text);
    };
    status('pending', 'simulating over the last ' + whatif.since + '…');
    try {
      const r = await api('/api/v1/simulate', { method: 'POST', body: JSON.stringify({ dependency: name, policy: doc, since: whatif.since }) });
      if (route.dep !== name || seq !== whatif.seq) return;
      whatif.sim = r;
      showViolations([]);
      renderDiff(decodePolicy(r.current && r.current.policyJson), decodePolicy(r.proposed && r.proposed.policyJson));
      renderSim(r);
      status('ok', 'ok: simulated ' + fmtTime(r.from) + '–' + fmtTime(r.to));
    } catch (e) {
      if (route.dep !== name || seq !== whatif.seq) return;
      whatif.sim = null;
      $('policy-sim').replaceChildren();
      $('policy-diff').replaceChildren();
      if (e.status === 400 && e.body && e.body.violations) {
        showViolations(e.body.violations);
        status('error', 'error: the policy is invalid (' + e.body.violations.length + ' violation(s))');
      } else {
        status('error', 'error: ' + e.message);
      }
    }
    drawHistory();
  }

  function renderDiff(cur, prop) {
    const box = $('policy-diff');
    const a = flatten(cur || {}, '', {}), b = flatten(prop || {}, '', {});
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => k !== 'schema' && k !== 'dependency' && a[k] !== b[k]).sort();
    const ul = el('ul');
    for (const k of keys) {
      const li = el('li', '', k + ': ' + (a[k] === undefined ? '—' : a[k]) + ' → ' + (b[k] === undefined ? '—' : b[k]));
      li.dataset.field = k;
      ul.appendChild(li);
    }
    box.replaceChildren(el('strong', '', keys.length ? 'Changes (effective policy)' : 'No change: the proposed policy is the current one'), ul);
  }

  function renderSim(r) {
    const box = $('policy-sim');
    const t = el('table');
    const head = el('tr');
    for (const h of ['', 'Side', 'Opened', 'Closed', 'Opens', 'To open', 'Refused', 'Would fail', 'Failed through', 'Retries']) {
      head.appendChild(el('th', /^(Opens|Refused|Would|Failed|Retries|To)/.test(h) ? 'num' : '', h));
    }
    t.appendChild(head);
    const row = (label, side, s, tot) => {
      const tr = el('tr');
      tr.dataset.side = side;
      const tt = tot || (s && s.totals) || {};
      const secs = s && s.secondsToOpen !== undefined && s.secondsToOpen !== null ? num(s.secondsToOpen).toFixed(1) + ' s' : '—';
      tr.append(el('td', '', label), el('td', '', side), el('td', '', s && s.opened ? fmtTime(s.opened) : '—'),
        el('td', '', s && s.closed ? fmtTime(s.closed) : '—'), el('td', 'num', String(num(s ? s.opens : tt.opens))),
        el('td', 'num', tot ? '' : secs), el('td', 'num', String(num(tt.refused))),
        el('td', 'num', side === 'fleet' ? '—' : String(num(tt.refusedWouldFail))), el('td', 'num', String(num(tt.failedLetThrough))),
        el('td', 'num', String(num(tt.retriesAllowed))));
      return tr;
    };
    (r.incidents || []).forEach((inc, i) => {
      const tr = row('#' + (i + 1) + ' ' + fmtTime(inc.from), 'fleet', inc.fleet);
      tr.classList.add('incident');
      t.append(tr, row('', 'current', inc.current), row('', 'proposed', inc.proposed));
    });
    const total = (side, tt) => {
      const tr = row(side === 'fleet' ? 'Total' : '', side, null, tt);
      tr.classList.add('total');
      return tr;
    };
    t.append(total('fleet', r.fleetTotals), total('current', r.current && r.current.totals), total('proposed', r.proposed && r.proposed.totals));
    const notes = el('ul', 'muted');
    for (const n of r.notes || []) notes.appendChild(el('li', '', n));
    box.replaceChildren(el('strong', '', (r.incidents || []).length + ' incident(s) in the replay'), t, notes);
  }

  async function savePolicy() {
    clearTimeout(whatif.simTimer);
    whatif.act++;
    const doc = readEditor();
    if (!doc) return;
    const name = route.dep;
    policyStatus('pending', 'writing ' + name + ' over revision ' + (whatif.base || 'none') + '…');
    try {
      const e = await api('/api/v1/policies/' + depPath(name), {
        method: 'PUT', body: JSON.stringify({ policy: doc, expectedRevision: whatif.base }),
      });
      if (route.dep !== name) return;
      whatif.stored = e.policy;
      whatif.rev = whatif.base = num(e.modRevision);
      showViolations([]);
      renderPolicyBox(false);
      policyStatus('ok', 'ok: ' + name + ' written at revision ' + whatif.rev);
      loadPolicies();
      loadDepExtras();
    } catch (e) {
      if (e.status === 409) {
        policyStatus('conflict', 'conflict: someone changed the policy of ' + name + ' after revision ' + (whatif.base || 'none') +
          ' was loaded; nothing written (Reload to see theirs, then save again): ' + e.message);
      } else if (e.status === 400 && e.body && e.body.violations) {
        showViolations(e.body.violations);
        policyStatus('error', 'error: the policy is invalid (' + e.body.violations.length + ' violation(s))');
      } else if (e.status === 401 || e.status === 403) {
        policyStatus('error', 'error: ' + e.message + ' (saving needs an admin token)');
      } else {
        policyStatus('error', 'error: ' + e.message);
      }
    }
  }

  // ---- routing and rendering ----

  const route = { dep: null };

  function parseRoute() {
    const m = /^#\/dep\/(.+)$/.exec(location.hash || '');
    let dep = null;
    if (m) {
      try { dep = decodeURIComponent(m[1]); } catch (e) { dep = m[1]; }
    }
    route.dep = dep;
    $('view-fleet').hidden = !!dep;
    $('view-dep').hidden = !dep;
    if (dep) {
      $('force-dep').value = dep;
      document.title = dep + ' · Fusebox';
      enterDep(dep);
      window.scrollTo(0, 0);
    } else {
      document.title = 'Fusebox fleet';
      orderDirty = true;
      clearInterval(whatif.timer);
    }
    schedule();
  }

  function schedule() {
    if (!rafPending) {
      rafPending = true;
      requestAnimationFrame(render);
    }
  }

  function render() {
    rafPending = false;
    const t0 = performance.now();
    try {
      renderNow();
    } finally {
      renderMs = performance.now() - t0;
    }
  }

  function renderNow() {
    renderSummary();
    if (namesDirty) {
      namesDirty = false;
      const opts = [];
      for (const name of [...model.deps.keys()].sort()) {
        const o = document.createElement('option');
        o.value = name;
        opts.push(o);
      }
      $('dep-names').replaceChildren(...opts);
    }
    if (route.dep) {
      renderDep();
      return;
    }
    if (orderDirty) {
      orderDirty = false;
      reorder();
    }
    for (const d of model.deps.values()) {
      if (!d.row || !d.row.isConnected) continue;
      if (d.stateDirty) {
        updateState(d);
        d.stateDirty = false;
      }
      if (!d.visible) continue;
      if (d.rowDirty) {
        updateCells(d);
        d.rowDirty = false;
      }
      if (d.sparkDirty) {
        drawSeries(d, d.cells, 120, 24);
        d.sparkDirty = false;
      }
    }
  }

  // ---- banners ----

  const banners = new Map();

  function showBanner(key, text) {
    banners.set(key, text);
    const b = $('banner');
    b.textContent = [...banners.values()].join(' ');
    b.hidden = false;
  }

  function clearBanner(key) {
    if (!banners.delete(key)) return;
    const b = $('banner');
    b.textContent = [...banners.values()].join(' ');
    b.hidden = banners.size === 0;
  }

  // ---- wiring ----

  function onTokenChanged() {
    const t = token();
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: the token lives in the input only */ }
    clearBanner('auth');
    loadWhoami();
    loadPolicies();
    connect();
    refreshSoon(0);
    if (route.dep) loadDepExtras();
  }

  function init() {
    try {
      const saved = sessionStorage.getItem(TOKEN_KEY);
      if (saved) $('token').value = saved;
    } catch (e) { /* no storage */ }

    let tokenTimer = 0;
    $('token').addEventListener('input', () => {
      clearTimeout(tokenTimer);
      tokenTimer = setTimeout(onTokenChanged, 400);
    });
    $('token').addEventListener('change', () => {
      clearTimeout(tokenTimer);
      onTokenChanged();
    });

    $('filter').addEventListener('input', () => {
      filterText = $('filter').value.trim().toLowerCase();
      orderDirty = true;
      schedule();
    });
    $('filter').addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        $('filter').value = '';
        filterText = '';
        orderDirty = true;
        schedule();
      }
    });
    document.addEventListener('keydown', (e) => {
      const t = e.target;
      if (e.key === '/' && !(t instanceof HTMLInputElement) && !route.dep) {
        e.preventDefault();
        $('filter').focus();
      }
    });

    for (const th of document.querySelectorAll('#deps th[data-sort]')) {
      th.addEventListener('click', () => {
        const key = th.dataset.sort;
        if (sort.key === key) {
          sort.dir = -sort.dir;
        } else {
          sort.key = key;
          sort.dir = (key === 'name' || key === 'state') ? 1 : -1; // numbers: largest first
        }
        for (const h of document.querySelectorAll('#deps th[data-sort]')) h.removeAttribute('aria-sort');
        th.setAttribute('aria-sort', (sort.dir === 1) === (key === 'name' || key === 'state') ? 'ascending' : 'descending');
        orderDirty = true;
        schedule();
      });
    }

    $('override-form').addEventListener('submit', (e) => e.preventDefault());
    $('force-open-btn').addEventListener('click', () => override('forced-open'));
    $('force-closed-btn').addEventListener('click', () => override('forced-closed'));
    $('clear-btn').addEventListener('click', () => override('clear'));
    $('hist-since').addEventListener('change', () => {
      whatif.since = $('hist-since').value;
      loadHistory();
      if (whatif.sim) simulatePolicy();
    });

    window.addEventListener('hashchange', parseRoute);
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) refreshSoon(0);
    });
    const top = document.querySelector('.top');
    const setTop = () => document.documentElement.style.setProperty('--top-h', top.offsetHeight + 'px');
    window.addEventListener('resize', setTop);
    setTop();

    parseRoute();
    loadWhoami();
    loadPolicies();
    connect();
    poll();
  }

  init();
})();
