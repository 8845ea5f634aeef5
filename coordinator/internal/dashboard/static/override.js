// The override form: force a breaker open or closed, fleet-wide, or give
// the decision back (POST and DELETE /api/v1/overrides/NAME; an admin
// token), and the list of names it suggests.

import { api, depPath } from './api.js';
import { loadAudit } from './audit.js';
import { addDep, dirty, markEvent, model, refreshSoon, route, serverNow } from './model.js';
import { $, fmtTime, printable } from './util.js';

// actionStatus shows the last action's result in #action-status: its
// data-result is pending, ok or error, its text starts with "ok:" or
// "error:".
function actionStatus(result, text) {
  const s = $('action-status');
  s.dataset.result = result;
  s.textContent = text;
  s.title = text;
}

// override sets kind (forced-open, forced-closed) on the dependency the
// form names, or clears its override (kind "clear").
export async function override(kind) {
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
    if (route.dep === dep) loadAudit();
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

// renderNames fills the form's list of names when the fleet's changed.
export function renderNames() {
  if (!dirty.names) return;
  dirty.names = false;
  const opts = [];
  for (const name of [...model.deps.keys()].sort()) {
    const o = document.createElement('option');
    o.value = name;
    opts.push(o);
  }
  $('dep-names').replaceChildren(...opts);
}
