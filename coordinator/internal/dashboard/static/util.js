// DOM and text helpers shared by the dashboard's modules: elements, and
// numbers, times and other people's text formatted for display.

const SVG_NS = 'http://www.w3.org/2000/svg';

export const $ = (id) => document.getElementById(id);

export const num = (x) => (x === undefined || x === null || x === '') ? 0 : Number(x);

// parseDuration reads a Go duration ("10s", "1m30s", "500ms") in ms.
export function parseDuration(s) {
  if (typeof s !== 'string') return NaN;
  const units = { 'ns': 1e-6, 'us': 1e-3, 'µs': 1e-3, 'ms': 1, 's': 1000, 'm': 60000, 'h': 3600000 };
  let total = 0;
  let matched = '';
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;
  let m;
  while ((m = re.exec(s)) !== null) {
    total += parseFloat(m[1]) * units[m[2]];
    matched += m[0];
  }
  return matched === s.replace(/^[-+]/, '') && matched !== '' ? total : NaN;
}

export function pct(x) {
  if (!isFinite(x)) return '—';
  const p = x * 100;
  if (p === 0) return '0%';
  return (p >= 10 ? p.toFixed(0) : p.toFixed(1)) + '%';
}

export function fmtRate(r) {
  if (!isFinite(r) || r === 0) return '0';
  if (r >= 100) return r.toFixed(0);
  if (r >= 10) return r.toFixed(1);
  return r.toFixed(2);
}

export function fmtTime(x) {
  const d = new Date(x);
  return isNaN(d) ? '—' : d.toLocaleTimeString([], { hour12: false });
}

export function fmtDateTime(x) {
  const d = new Date(x);
  return isNaN(d) ? '—' : d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + d.toLocaleTimeString([], { hour12: false });
}

// fmtDur writes a span in ms the way Go does, roughly: "800ms", "10s", "2m30s".
export function fmtDur(ms) {
  if (!isFinite(ms) || ms <= 0) return '0s';
  if (ms < 1000) return Math.round(ms) + 'ms';
  if (ms < 10000) return Math.round(ms / 100) / 10 + 's';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  return m + 'm' + (s % 60 ? (s % 60) + 's' : '');
}

export function fmtCount(x) {
  return isFinite(x) ? String(Math.round(x)) : '—';
}

// printable shows text others wrote (actors, reasons) as the coordinator
// prints it (sharedstate.PrintableText): control characters, line
// separators and direction marks become escapes such as \x1b and \u202e.
export function printable(s) {
  return String(s || '').replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffd]/g, (c) => {
    const n = c.charCodeAt(0);
    if (c === '\n') return '\\n';
    if (c === '\r') return '\\r';
    if (c === '\t') return '\\t';
    return n < 0x100 ? '\\x' + n.toString(16).padStart(2, '0') : '\\u' + n.toString(16).padStart(4, '0');
  });
}

export function fmtAgo(ms) {
  if (!isFinite(ms)) return '';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return s + 's';
  if (s < 5400) return Math.round(s / 60) + 'm';
  return (s / 3600).toFixed(1) + 'h';
}

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}

export function badge(state) {
  const b = el('span', 'badge', state);
  b.dataset.state = state;
  return b;
}

export function band(x1, x2, H, state) {
  return svgEl('rect', { x: x1.toFixed(1), y: 0, width: Math.max(1, x2 - x1).toFixed(1), height: H, class: 'band ' + state });
}

export function emptyRow(span, text) {
  const tr = el('tr');
  const td = el('td', 'muted', text);
  td.colSpan = span;
  tr.append(td);
  return tr;
}
