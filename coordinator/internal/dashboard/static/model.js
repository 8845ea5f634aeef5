// What the page knows of the fleet, and how it learns it: the snapshot
// polled from GET /api/v1/fleet?compact=1 every 2 s (10 s in a hidden tab,
// stretched to keep the page's work under a tenth of the main thread), the
// policies from GET /api/v1/policies (windows for requests/s, thresholds),
// and per dependency the sparkline's series. Data updates the model and
// marks what changed dirty; schedule asks for one render in the next
// animation frame, which app.js draws (onRender).

import { api, clearBanner, showBanner } from './api.js';
import { num, parseDuration } from './util.js';

export const HISTORY_MS = 5 * 60 * 1000; // the sparkline's span
const POLL_MS = 2000;
const HIDDEN_POLL_MS = 10000;
// Sort order of the state column: trouble first.
const SEVERITY = { 'open': 0, 'forced-open': 1, 'half-open': 2, 'local-open': 3, 'shadow': 4, 'forced-closed': 5, 'closed': 6 };

export const model = {
  deps: new Map(), // name → dep (see newDep)
  members: [],
  at: 0, // server time of the last snapshot (ms)
  skew: 0, // server clock − browser clock (ms), from the snapshots
  loaded: false, // a snapshot arrived
  defaultPolicy: null,
  policies: {},
  who: null,
};

// route is the page shown: the fleet (dep null) or a dependency's page.
export const route = { dep: null };

// dirty says what the next render must redo beyond the dirty rows: the
// rows' order (or the filter changed), the names of the override form's
// list, and the rows of dependencies gone from the fleet.
export const dirty = { order: true, names: true, gone: [] };

// sort is the fleet table's order: a column and a direction.
export const sort = { key: 'state', dir: 1 };

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

export const serverNow = () => Date.now() + model.skew;

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

export function compare(a, b) {
  const va = sortValue(a), vb = sortValue(b);
  if (va !== vb) return (va < vb ? -1 : 1) * sort.dir;
  if (a.name === b.name) return 0;
  return (a.name < b.name ? -1 : 1) * (sort.key === 'name' ? sort.dir : 1);
}

export function policyOf(name) {
  // hasOwn: "__proto__" is a valid dependency name.
  return (Object.prototype.hasOwnProperty.call(model.policies, name) && model.policies[name]) || model.defaultPolicy || null;
}

function windowSeconds(name) {
  const p = policyOf(name);
  const w = p && p.breaker ? parseDuration(p.breaker.window) : NaN;
  return w > 0 ? w / 1000 : 10;
}

export function threshold(name) {
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
  if (sortValue(d) !== oldKey) dirty.order = true;
}

// markEvent shows what an event (or the page's own override) changed in
// d at server time at, until a snapshot newer than it arrives.
export function markEvent(d, at) {
  const old = sortValue(d);
  d.eventAt = Math.max(d.eventAt, at);
  d.shown = shownOf(d);
  pushPoint(d, at, d.fr, d.shown);
  d.stateDirty = true;
  d.rowDirty = true;
  d.sparkDirty = true;
  if (sortValue(d) !== old) dirty.order = true;
  schedule();
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
export function seedSeries(d, series) {
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

// ---- snapshots ----

let pollTimer = 0, soonTimer = 0, polling = false, pollAgain = false, applyMs = 0;

export async function poll() {
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
export function refreshSoon(ms) {
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

export function addDep(name) {
  const d = newDep(name);
  model.deps.set(name, d);
  dirty.order = true;
  dirty.names = true;
  return d;
}

// removeDep forgets a dependency the fleet no longer reports; the table
// drops its row at its next render.
function removeDep(d) {
  model.deps.delete(d.name);
  if (d.row) dirty.gone.push(d);
  dirty.order = true;
  dirty.names = true;
}

export async function loadPolicies() {
  try {
    const p = await api('/api/v1/policies');
    model.defaultPolicy = p.default || null;
    model.policies = p.policies || {};
    schedule();
  } catch (e) { /* the poll reports the problem */ }
}

// ---- rendering ----

let renderer = () => {}, rafPending = false, renderMs = 0;

// onRender sets what a frame draws (app.js: the page).
export function onRender(fn) {
  renderer = fn;
}

// schedule asks for one render in the next animation frame, however many
// changes ask for it before then.
export function schedule() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(() => {
    rafPending = false;
    const t0 = performance.now();
    try {
      renderer();
    } finally {
      renderMs = performance.now() - t0;
    }
  });
}
