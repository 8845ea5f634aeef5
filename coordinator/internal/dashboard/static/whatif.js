// The dependency page's history and policy editor.
//
// GET /api/v1/series draws the dependency's history, the page's one chart
// (failure and slow-call rates, the breaker's states as bands, its state
// changes listed below), read again every 2 s while the page is shown, so
// it is the live view too. An admin edits the policy in #policy-json, POST
// /api/v1/simulate replays it (its states in a lane under the plot, its
// changed fields in #policy-diff as the coordinator computes them, its
// summary in #policy-sim, violations by JSON path in #policy-violations),
// and PUT /api/v1/policies/NAME writes it with a compare-and-swap on the
// revision loaded. A viewer gets the stored policy to read: the editor is
// not rendered at all.

import { api, depPath } from './api.js';
import { loadAudit } from './audit.js';
import { loadPolicies, model, policyOf, route } from './model.js';
import { $, band, el, fmtTime, num, pct, svgEl } from './util.js';

// rev is the stored policy's latest revision; base the one the editor's
// text was loaded from, which a save must still find (compare-and-swap):
// a write by someone else meanwhile moves rev, never base.
// act counts the editor's actions: a simulation that ends after a later
// save (or simulation) leaves the status line to it.
// loading counts the history reads in flight: the refresh skips a turn
// rather than pile up reads behind a slow coordinator.
const whatif = { name: null, series: null, sim: null, stored: null, rev: 0, base: 0, since: '15m', timer: 0, simTimer: 0, seq: 0, histSeq: 0, act: 0, loading: 0 };
const REFRESH_MS = 2000;

// enterWhatif opens the history and the policy of the dependency name,
// and reads the history again every REFRESH_MS while the tab is visible.
export function enterWhatif(name) {
  whatif.name = name;
  whatif.series = null;
  whatif.sim = null;
  whatif.stored = null;
  whatif.rev = 0;
  whatif.base = 0;
  $('dep-history').replaceChildren();
  $('dep-changes').replaceChildren();
  $('hist-note').textContent = 'loading…';
  loadHistory();
  loadStoredPolicy(true);
  clearInterval(whatif.timer);
  whatif.timer = setInterval(() => {
    if (route.dep && !document.hidden && !whatif.loading) loadHistory();
  }, REFRESH_MS);
}

// leaveWhatif stops the refresh when the page is left.
export function leaveWhatif() {
  clearInterval(whatif.timer);
}

// setSince shows the history over since (a Go duration: 5m, 15m, 1h, 3h)
// and replays a simulation shown over it.
export function setSince(since) {
  whatif.since = since;
  loadHistory();
  if (whatif.sim) simulatePolicy();
}

async function loadHistory() {
  const name = route.dep;
  if (!name) return;
  const seq = ++whatif.histSeq;
  whatif.loading++;
  try {
    const s = await api('/api/v1/series?dependency=' + encodeURIComponent(name) + '&since=' + encodeURIComponent(whatif.since));
    if (route.dep !== name || seq !== whatif.histSeq) return;
    whatif.series = s;
    $('hist-note').textContent = '';
  } catch (e) {
    if (route.dep !== name || seq !== whatif.histSeq) return;
    whatif.series = null;
    $('hist-note').textContent = e.status === 404 ? 'No history: ' + e.message : 'Cannot read the history: ' + e.message;
  } finally {
    whatif.loading--;
  }
  drawHistory();
}

// drawHistory draws the history plot and lists its state changes.
function drawHistory() {
  const svg = $('dep-history');
  const s = whatif.series;
  if (!s) {
    svg.replaceChildren();
    $('dep-changes').replaceChildren();
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
  renderChanges(s.states || []);
}

// renderChanges lists the fleet breaker's state changes in the history,
// newest first (at most 20).
function renderChanges(states) {
  const items = [];
  for (let i = states.length - 1; i > 0 && items.length < 20; i--) {
    const iv = states[i];
    const li = el('li', '', fmtTime(iv.from) + '  ' + states[i - 1].state + ' → ' + iv.state);
    li.dataset.state = iv.state;
    if (iv.reason) li.title = iv.reason;
    items.push(li);
  }
  if (!items.length) items.push(el('li', 'muted', 'no state change in the last ' + $('hist-since').selectedOptions[0].textContent));
  $('dep-changes').replaceChildren(...items);
}

export async function loadStoredPolicy(fillEditor) {
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
export function renderPolicyBox(fillEditor) {
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
    renderDiff(r.changes || []);
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

// renderDiff lists the fields the proposed policy changes in the current
// effective one, as the coordinator computed them (the simulation's
// changes, the form of the audit's).
function renderDiff(changes) {
  const ul = el('ul');
  for (const c of changes) {
    const li = el('li', '', c.field + ': ' + (c.from || '—') + ' → ' + (c.to || '—'));
    li.dataset.field = c.field;
    ul.appendChild(li);
  }
  $('policy-diff').replaceChildren(el('strong', '', changes.length ? 'Changes (effective policy)' : 'No change: the proposed policy is the current one'), ul);
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
    loadAudit();
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
