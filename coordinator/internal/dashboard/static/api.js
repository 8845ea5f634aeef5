// The coordinator's JSON API, with the token the user typed (sent as
// "Authorization: Bearer", never in a URL), and the banner that says what
// went wrong.

import { $ } from './util.js';

class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body || null;
  }
}

export const token = () => $('token').value.trim();

export async function api(path, opts) {
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
export const depPath = (name) => name.split('/').map(encodeURIComponent).join('/');

export function authProblem(msg) {
  showBanner('auth', 'This coordinator needs a token: type a viewer token to watch the fleet, an admin token to override breakers. (' + msg + ')');
}

// ---- banners ----

const banners = new Map();

export function showBanner(key, text) {
  banners.set(key, text);
  const b = $('banner');
  b.textContent = [...banners.values()].join(' ');
  b.hidden = false;
}

export function clearBanner(key) {
  if (!banners.delete(key)) return;
  const b = $('banner');
  b.textContent = [...banners.values()].join(' ');
  b.hidden = banners.size === 0;
}
