// The dependency page's audit trail (GET /api/v1/audit): who changed its
// policy or override, when, and what changed. The coordinator computes what
// changed (each entry's changes, the field diff fuseboxctl audit shows);
// the page only renders it.

import { api } from './api.js';
import { route } from './model.js';
import { $, el, emptyRow, fmtDateTime, printable } from './util.js';

const LIMIT = 50;
const audit = { name: null, entries: null, error: '', seq: 0 };

// enterAudit empties the trail for the dependency name and loads its own.
export function enterAudit(name) {
  audit.name = name;
  audit.entries = null;
  audit.error = '';
  $('dep-audit').replaceChildren();
  $('dep-audit-note').textContent = 'loading…';
  loadAudit();
}

// loadAudit reads the shown dependency's trail again (after a write, an
// event, a new token).
export async function loadAudit() {
  const name = route.dep;
  if (!name) return;
  const seq = ++audit.seq;
  try {
    const r = await api('/api/v1/audit?limit=' + LIMIT + '&dependency=' + encodeURIComponent(name));
    if (route.dep !== name || seq !== audit.seq) return;
    audit.entries = r.entries || [];
    audit.error = '';
  } catch (e) {
    if (route.dep !== name || seq !== audit.seq) return;
    audit.error = e.message;
  }
  renderAudit();
}

// overrideSummary says what an override entry did: the state set, until
// when and why, or the one cleared.
function overrideSummary(e) {
  const before = e.before, after = e.after;
  if (e.action === 'override.clear') {
    return 'cleared ' + ((before && before.state) || 'the override') + (before && before.reason ? ' — ' + before.reason : '');
  }
  let s = ((after && after.state) || '?') + (after && after.expires ? ' until ' + fmtDateTime(after.expires) : ' until cleared');
  if (after && after.reason) s += ' — ' + after.reason;
  if (before && before.state) s = 'replaced ' + before.state + ': ' + s;
  return s;
}

// changeCell is the Change column: an override's summary, or the fields
// the write changed (li[data-field], "field: from → to", "—" where the
// document had none).
function changeCell(e) {
  const td = el('td', 'change');
  if (e.action === 'override.set' || e.action === 'override.clear') {
    td.textContent = printable(overrideSummary(e));
    return td;
  }
  const changes = e.changes || [];
  if (e.action === 'policy.delete') td.append(el('span', '', 'policy deleted'));
  if (!changes.length) {
    if (e.action === 'policy.put') td.textContent = 'policy written, unchanged';
    return td;
  }
  const ul = el('ul', 'fields');
  for (const c of changes) {
    const li = el('li', '', printable(c.field + ': ' + (c.from || '—') + ' → ' + (c.to || '—')));
    li.dataset.field = c.field;
    ul.append(li);
  }
  td.append(ul);
  return td;
}

function renderAudit() {
  const note = $('dep-audit-note');
  if (audit.error) {
    note.textContent = 'Cannot read the audit: ' + audit.error;
    return;
  }
  const entries = audit.entries || [];
  $('dep-audit').replaceChildren(...(entries.length ? entries.map((e) => {
    const tr = el('tr');
    tr.dataset.revision = e.revision;
    tr.append(el('td', '', fmtDateTime(e.at)), el('td', 'actor', printable(e.actor)), el('td', '', e.action), changeCell(e));
    return tr;
  }) : [emptyRow(4, 'nobody changed this dependency\'s policy or override')]));
  note.textContent = entries.length ? 'Newest first (at most ' + LIMIT + '). Overrides that expire by their TTL leave no entry.' : '';
}
