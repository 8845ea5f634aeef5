// Fusebox fleet dashboard: plain JavaScript modules, no build step, no
// third-party code, nothing fetched from anywhere but the coordinator that
// served it (see doc.go for what each module reads). This one starts the
// page: routing, the render of each frame, the token, and the wiring of
// the controls.

import { api, clearBanner, token } from './api.js';
import { loadAudit } from './audit.js';
import { enterDep, renderDep } from './dep.js';
import { connect } from './events.js';
import { dirty, loadPolicies, model, onRender, poll, refreshSoon, route, schedule } from './model.js';
import { override, renderNames } from './override.js';
import { renderSummary, renderTable, setFilter, sortBy } from './overview.js';
import { $ } from './util.js';
import { leaveWhatif, loadStoredPolicy, renderPolicyBox, setSince } from './whatif.js';

const TOKEN_KEY = 'fusebox.token';

// parseRoute shows the page the URL's fragment names: "#/dep/NAME" (NAME
// URL-encoded), else the fleet.
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
    dirty.order = true;
    leaveWhatif();
  }
  schedule();
}

// renderNow draws one frame: the summary, the override form's names, and
// the page shown.
function renderNow() {
  renderSummary();
  renderNames();
  if (route.dep) {
    renderDep();
  } else {
    renderTable();
  }
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
  if (route.dep) {
    // What the new token may read: the audit, and the stored policy (the
    // editor's text only if no editor holds the user's yet).
    loadAudit();
    loadStoredPolicy(!$('policy-json'));
  }
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

  $('filter').addEventListener('input', () => setFilter($('filter').value));
  $('filter').addEventListener('keydown', (e) => {
    if (e.key === 'Escape') {
      $('filter').value = '';
      setFilter('');
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
      const order = sortBy(th.dataset.sort);
      for (const h of document.querySelectorAll('#deps th[data-sort]')) h.removeAttribute('aria-sort');
      th.setAttribute('aria-sort', order);
    });
  }

  $('override-form').addEventListener('submit', (e) => e.preventDefault());
  $('force-open-btn').addEventListener('click', () => override('forced-open'));
  $('force-closed-btn').addEventListener('click', () => override('forced-closed'));
  $('clear-btn').addEventListener('click', () => override('clear'));
  $('hist-since').addEventListener('change', () => setSince($('hist-since').value));

  window.addEventListener('hashchange', parseRoute);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) refreshSoon(0);
  });
  const top = document.querySelector('.top');
  const setTop = () => document.documentElement.style.setProperty('--top-h', top.offsetHeight + 'px');
  window.addEventListener('resize', setTop);
  setTop();

  onRender(renderNow);
  parseRoute();
  loadWhoami();
  loadPolicies();
  connect();
  poll();
}

init();
