// The fleet table and the summary: one row per dependency, the trouble
// first. Rows near the viewport (IntersectionObserver) get their numbers,
// lists and sparkline; every attached row its state. A row's sparkline is
// seeded from the coordinator's history (GET /api/v1/series, 5 minutes)
// when it first comes into view, then grows a point per poll and event.

import { api } from './api.js';
import { overrideText, rampText, tripText, tripTitle, whyOf } from './explain.js';
import { HISTORY_MS, compare, dirty, model, seedSeries, schedule, serverNow, sort, threshold } from './model.js';
import { $, band, el, fmtAgo, fmtCount, fmtDateTime, fmtRate, fmtTime, num, pct, printable, svgEl } from './util.js';

const SEED_CONCURRENCY = 3;
const BAND_STATES = new Set(['open', 'half-open', 'forced-open', 'forced-closed']);

function stateTitle(d) {
  const v = d.v || {};
  const parts = ['breaker ' + d.breaker];
  if (v.reason) parts.push('last change: ' + printable(v.reason));
  if (d.override) parts.push(d.override + (d.ov && d.ov.reason ? ': ' + printable(d.ov.reason) : ''));
  if (d.shadow) parts.push('shadow mode: computes and reports, never rejects');
  return parts.join(' · ');
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
let filterText = ''; // lower case

// rowObserver tells which rows are near the viewport: those get their
// numbers and sparkline, and a sparkline seeded when first seen.
const rowObserver = new IntersectionObserver((entries) => {
  let again = false;
  for (const en of entries) {
    const d = model.deps.get(en.target.dataset.dep);
    if (!d || d.row !== en.target) continue; // gone, or a gone row of the same name
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

// drawSeries draws a row's sparkline, W × H: the failure rate, a band
// per stretch the breaker was not closed, a mark per state change.
function drawSeries(d, g, W, H) {
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
  g.bands.replaceChildren(...bands);
  g.line.setAttribute('points', pts.join(' '));
  g.marks.replaceChildren(...marks);
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
    if (!d.visible) { // scrolled away: seeded when it comes back
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

export function renderSummary() {
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

// ---- rendering ----

// setFilter shows only the dependencies whose name contains text (any
// case).
export function setFilter(text) {
  filterText = text.trim().toLowerCase();
  dirty.order = true;
  schedule();
}

// sortBy orders the table by a column: again on the same column reverses
// it. Names and states sort ascending first, numbers largest first.
export function sortBy(key) {
  if (sort.key === key) {
    sort.dir = -sort.dir;
  } else {
    sort.key = key;
    sort.dir = (key === 'name' || key === 'state') ? 1 : -1;
  }
  dirty.order = true;
  schedule();
  return (sort.dir === 1) === (key === 'name' || key === 'state') ? 'ascending' : 'descending';
}

// renderTable writes what changed into the table: the rows' order when it
// changed, every attached row's state, and the numbers and sparklines of
// the rows near the viewport.
export function renderTable() {
  for (const d of dirty.gone.splice(0)) {
    rowObserver.unobserve(d.row);
    d.row.remove();
  }
  if (dirty.order) {
    dirty.order = false;
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
