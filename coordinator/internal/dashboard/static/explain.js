// What holds a breaker where it is, in words: the trip's evidence, the
// override, the ramp after a close. The fleet table and the dependency
// page both say it.

import { serverNow } from './model.js';
import { fmtAgo, fmtDur, fmtTime, num, pct, printable } from './util.js';

// whyOf names what holds a breaker open: "forced" (an operator), "slow
// calls" or "failures" (what tripped it); '' while it is closed.
export function whyOf(d) {
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
export function tripText(t) {
  const f = tripFacts(t);
  return f.what + ' ' + pct(f.rate) + ' ≥ ' + pct(f.thr) + ' of ' + f.req + ' req · ' + f.nodes + (f.nodes === 1 ? ' node' : ' nodes');
}

export function tripTitle(t) {
  const f = tripFacts(t);
  const conf = num(t.confidence);
  let s = 'Tripped on ' + f.n + ' ' + f.what + ' of ' + f.req + ' requests (' + pct(f.rate) + ') over ' + f.horizon +
    ', from ' + f.nodes + ' failing of ' + f.withRequests + ' nodes with requests' + (f.names.length ? ': ' + f.names.join(', ') +
    (f.nodes > f.names.length ? ' and ' + (f.nodes - f.names.length) + ' more' : '') : '') + '.';
  s += conf > 0 ? ' Lower bound of the rate ' + pct(num(t.lowerBound)) + ' at ' + Math.round(conf * 1000) / 10 + '% confidence ≥ ' + pct(f.thr) + '.'
    : ' Classic rule: the rate itself ≥ ' + pct(f.thr) + '.';
  return s + ' The policy wants at least ' + num(t.minimumRequests) + ' requests from ' + num(t.minFailingNodes) + ' failing nodes.';
}

export function overrideText(d) {
  const o = d.ov || {};
  let s = (o.actor ? printable(o.actor) : 'an operator') + (o.reason ? ': ' + printable(o.reason) : '');
  s += o.expires ? ' · until ' + fmtTime(o.expires) + ' (' + fmtAgo(o.expires - serverNow()) + ' left)' : ' · until cleared';
  return s;
}

export function rampText(d) {
  return 'Ramp: admitting ' + pct(1 - d.ramp.p) + ' of first attempts until ' + fmtTime(d.ramp.until);
}
