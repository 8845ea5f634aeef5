// The live event stream, GET /api/v1/events: breaker transitions and
// overrides change the badges at once, without waiting for the next poll.
//
// The stream is read with fetch, not EventSource: EventSource cannot send
// the Authorization header, and a token never goes in a URL (proxies log
// URLs; the coordinator refuses a token in the query). The body is parsed
// as server-sent events; a reconnect sends Last-Event-ID, so the
// coordinator replays what it still keeps.

import { authProblem, token } from './api.js';
import { loadAudit } from './audit.js';
import { addDep, loadPolicies, markEvent, model, refreshSoon, route, serverNow } from './model.js';
import { $ } from './util.js';
import { loadStoredPolicy } from './whatif.js';

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

// connect (re)opens the stream with the current token, closing the one
// open.
export async function connect() {
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
      loadAudit();
      loadStoredPolicy(false);
    }
    return;
  }
  if (!e.dependency || e.dependency === '_default') return;
  let d = model.deps.get(e.dependency);
  if (!d) d = addDep(e.dependency);
  if (e.type === 'transition') {
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
    if (route.dep === d.name) loadAudit();
  } else {
    return;
  }
  markEvent(d, at);
  refreshSoon();
}
