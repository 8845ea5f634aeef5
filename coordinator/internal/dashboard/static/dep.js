// The dependency page (#/dep/NAME): the breaker's state and what holds
// it, the facts of its policy and window, its zones and nodes; the audit
// trail (audit.js) and the history with the policy editor (whatif.js)
// below.

import { enterAudit } from './audit.js';
import { overrideText, rampText, tripTitle, whyOf } from './explain.js';
import { model, policyOf, route } from './model.js';
import { $, badge, el, emptyRow, fmtAgo, fmtCount, fmtDateTime, fmtRate, fmtTime, num, pct, printable } from './util.js';
import { enterWhatif } from './whatif.js';

// enterDep opens the page of the dependency name: its audit trail, its
// history and its policy load; renderDep draws the rest from the model.
export function enterDep(name) {
  enterAudit(name);
  enterWhatif(name);
}

function fact(list, label, value) {
  list.push(el('dt', '', label));
  const dd = el('dd');
  if (value instanceof Node) dd.append(value); else dd.textContent = value;
  list.push(dd);
}

// renderDep writes the page from the model: the header's state, the
// facts, the zones and the nodes.
export function renderDep() {
  const name = route.dep;
  const d = model.deps.get(name);
  $('dep-name').textContent = name;
  $('dep-missing').hidden = !!d || !model.loaded;
  if (!d) {
    $('dep-state').replaceChildren();
    $('dep-facts').replaceChildren();
    return;
  }
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
