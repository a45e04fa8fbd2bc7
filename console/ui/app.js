// sagafeed console: plain JavaScript, no framework, nothing fetched from
// elsewhere. Every value from the database reaches the page as a text node
// (el() below never parses HTML), so an id like <script> stays text.
'use strict';

const STATUSES = ['running', 'waiting', 'compensating', 'completed', 'cancelled', 'parked'];
let info = null;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'onclick' || k === 'onsubmit' || k === 'onchange') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null) continue;
    e.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function text(v) {
  if (v === undefined || v === null) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function badge(status) {
  return el('span', { class: 'badge s-' + (STATUSES.includes(status) ? status : 'running') }, text(status));
}

function when(v) {
  if (v === undefined || v === null || v === '') return '';
  if (typeof v === 'number') return new Date(v < 1e11 ? v * 1000 : v).toISOString().replace('.000Z', 'Z');
  return String(v);
}

function toast(msg) {
  const t = document.getElementById('toast');
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

async function api(path, opts) {
  const r = await fetch('/api/v1/' + path, Object.assign({ credentials: 'same-origin' }, opts || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { body = { error: 'not JSON (' + r.status + ')' }; }
  if (!r.ok) {
    const err = new Error((body && body.error) || ('HTTP ' + r.status));
    err.status = r.status;
    throw err;
  }
  return body;
}

function post(path, body) {
  return api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body || {}) });
}

function show(...nodes) {
  const m = document.getElementById('main');
  m.replaceChildren(...nodes);
}

function failure(e) {
  return el('p', { class: 'err', id: 'error' }, 'Error: ' + e.message);
}

function table(id, head, rows) {
  return el('table', { id },
    el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows));
}

function params() {
  const h = location.hash.replace(/^#/, '');
  const q = h.indexOf('?');
  return { path: q < 0 ? h : h.slice(0, q), args: new URLSearchParams(q < 0 ? '' : h.slice(q + 1)) };
}

// ---------------------------------------------------------------------------
// Sagas

async function pageSagas(args) {
  const wf = args.get('workflow') || (info.workflows[0] && info.workflows[0].name) || '';
  const f = {
    workflow: wf, status: args.get('status') || '', key: args.get('key') || '',
    q: args.get('q') || '', since: args.get('since') || '', until: args.get('until') || '',
    continuation: args.get('continuation') || '',
  };
  const form = el('form', { class: 'filters', id: 'filters', onsubmit: (ev) => {
    ev.preventDefault();
    const a = new URLSearchParams();
    for (const n of ['workflow', 'status', 'key', 'q', 'since', 'until']) {
      const v = document.getElementById('f-' + n).value.trim();
      if (v) a.set(n, v);
    }
    location.hash = '#/sagas?' + a.toString();
  } },
  el('label', {}, 'Workflow', el('select', { id: 'f-workflow' },
    info.workflows.map((w) => el('option', { value: w.name, selected: w.name === wf }, w.name)))),
  el('label', {}, 'Status', el('select', { id: 'f-status' }, el('option', { value: '' }, 'any'),
    STATUSES.map((s) => el('option', { value: s, selected: s === f.status }, s)))),
  el('label', {}, 'Partition key', el('input', { id: 'f-key', value: f.key, placeholder: 'c-001' })),
  el('label', {}, 'Id starts with', el('input', { id: 'f-q', value: f.q })),
  el('label', {}, 'Since', el('input', { id: 'f-since', value: f.since, placeholder: '2026-12-07T00:00:00Z' })),
  el('label', {}, 'Until', el('input', { id: 'f-until', value: f.until })),
  el('button', { type: 'submit', id: 'f-go' }, 'Filter'));
  const counts = el('div', { class: 'counts', id: 'counts' }, el('span', { class: 'muted' }, 'counting…'));
  const list = el('div', { id: 'list' }, el('p', { class: 'muted' }, 'Loading…'));
  show(el('h1', {}, 'Sagas'), form, counts, list);

  api('counts?workflow=' + encodeURIComponent(wf)).then((c) => {
    counts.replaceChildren(...STATUSES.map((s) => el('div', {
      class: 'count', id: 'count-' + s,
      onclick: () => { location.hash = '#/sagas?workflow=' + encodeURIComponent(wf) + '&status=' + s; },
    }, el('b', {}, (c.partial ? '≥ ' : '') + String(c.counts[s])), badge(s))),
    el('span', { class: 'muted', id: 'counts-note' }, (c.partial ? 'partial: console.query_timeout reached; ' : '') +
      'counted ' + Math.round(c.ageMs / 1000) + ' s ago'));
  }).catch((e) => counts.replaceChildren(failure(e)));

  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  try {
    const r = await api('sagas?' + q.toString());
    const rows = r.items.map((s) => el('tr', { class: 'saga-row' },
      el('td', {}, el('a', { class: 'saga-link', href: '#/saga/' + encodeURIComponent(s.workflow) + '/' + encodeURIComponent(text(s.id)) + (typeof s.key === 'string' ? '?key=' + encodeURIComponent(s.key) : '') }, text(s.id))),
      el('td', {}, badge(s.status)),
      el('td', {}, text(s.state)),
      el('td', {}, text(s.reason)),
      el('td', {}, text(s.key)),
      el('td', {}, when(s.ts))));
    const pager = el('div', { class: 'pager' },
      el('span', { class: 'muted', id: 'list-info' }, r.items.length + ' shown · ' + r.cosmosRequests + ' Cosmos requests' + (r.partial ? ' · stopped at the page budget' : '')),
      r.continuation ? el('button', { id: 'next', class: 'secondary', onclick: () => {
        const a = new URLSearchParams(q);
        a.set('continuation', r.continuation);
        location.hash = '#/sagas?' + a.toString();
      } }, 'Next page') : null,
      f.continuation ? el('button', { id: 'first', class: 'secondary', onclick: () => history.back() }, 'Back') : null);
    list.replaceChildren(table('sagas', ['Id', 'Status', 'State', 'Reason', 'Key', 'Updated'], rows), pager);
  } catch (e) {
    list.replaceChildren(failure(e));
  }
}

// ---------------------------------------------------------------------------
// One saga

// A recorded count of Cosmos retries as text; '' when none was recorded.
function count(n) {
  return typeof n === 'number' ? String(n) : '';
}

// The Cosmos retries of the step a transition ended (sfRetries on the item, see docs/operations.md):
// its do side when the transition leaves a step's `from` state (onward, or into compensation when it
// failed), the sum of the undo sides when it leaves the compensating state.
function transitionRetries(v, p) {
  const steps = v.steps || [];
  const s = steps.find((x) => x.from === p.from);
  if (s) return count(s.cosmosRetries);
  const undo = steps.filter((x) => typeof x.undoCosmosRetries === 'number');
  return undo.length ? String(undo.reduce((a, x) => a + x.undoCosmosRetries, 0)) : '';
}

function timelineOf(v) {
  const rows = [];
  for (const ev of v.events || []) {
    const p = ev.payload || {};
    rows.push({ t: ev.createdAt || '', kind: 'transition',
      what: text(p.from) + ' → ' + text(p.to) + ' (' + text(ev.eventType) + ')',
      detail: p.reason ? 'reason: ' + text(p.reason) : '',
      retries: transitionRetries(v, p),
      proof: 'outbox event ' + text(ev.id) + (ev.sourceLsn ? ' · lsn ' + ev.sourceLsn : '') });
  }
  for (const m of v.markerDocs || []) {
    const undo = m.phase === 'undo';
    rows.push({ t: m.at || when(m._ts), kind: undo ? 'compensation' : 'effect',
      what: (undo ? 'undo ' : 'do ') + text(m.step) + ' #' + text(m.element),
      detail: 'epoch ' + text(m.epoch) + (m.sourceLsn ? ' · lsn ' + m.sourceLsn : ''),
      proof: 'marker ' + text(m.id) });
  }
  for (const p of v.parked || []) {
    const e = p.error || {};
    rows.push({ t: p.parkedAt || '', kind: 'parked',
      what: text(p.status) + ' after ' + text(p.attempts) + ' attempt(s)',
      detail: text(e.message) + (e.httpStatus ? ' (HTTP ' + e.httpStatus + (e.substatus ? '/' + e.substatus : '') + ')' : ''),
      retries: p.status === 'parked' ? count(p.cosmosRetries) : '',
      proof: 'parking record ' + text(p.id) + (p.replayRequested ? ' · replay requested' : '') });
  }
  const doc = v.document;
  if (doc && doc.sfWait && typeof doc.sfWait === 'object') {
    const w = doc.sfWait;
    rows.push({ t: when(w.since), kind: 'waiting', what: 'waiting in step ' + text(w.step),
      detail: w.until ? 'until ' + when(w.until) : 'no timeout', proof: 'pending' });
  }
  if (doc && doc.sfDeadline && (v.status === 'running' || v.status === 'waiting')) {
    rows.push({ t: when(doc.sfDeadline), kind: 'deadline', what: 'deadline',
      detail: 'the saga compensates ("deadline exceeded") unless settled by then', proof: 'pending' });
  }
  rows.sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : 0));
  return rows;
}

async function pageSaga(path, args) {
  const parts = path.split('/');
  const key = args.get('key');
  const wf = decodeURIComponent(parts[2] || '');
  const id = decodeURIComponent(parts.slice(3).join('/'));
  show(el('h1', {}, 'Saga ', el('span', { id: 'saga-id' }, id)), el('p', { class: 'muted' }, 'Loading…'));
  let r;
  try {
    r = await api('sagas/' + encodeURIComponent(wf) + '/' + encodeURIComponent(id) + (key !== null ? '?key=' + encodeURIComponent(key) : ''));
  } catch (e) {
    show(el('h1', {}, 'Saga ', el('span', { id: 'saga-id' }, id)), failure(e));
    return;
  }
  const out = [el('h1', {}, 'Saga ', el('span', { id: 'saga-id' }, id))];
  for (const v of r.workflows) {
    const item = v.item || {};
    out.push(el('p', {}, 'Workflow ', el('b', {}, text(v.workflow)), ' · container ', text(v.container),
      ' · item ', el('code', {}, text(v.itemId)), ' · ', el('span', { id: 'saga-status' }, badge(v.status)),
      item.reason ? el('span', { id: 'saga-reason' }, ' · reason: ' + text(item.reason)) : null,
      item.failedStep ? ' · failed step: ' + text(item.failedStep) : null));
    out.push(el('h2', {}, 'Steps'));
    out.push(table('steps', ['Step', 'From → to', 'Status', 'Done', 'Undone', 'Cosmos retries', 'Undo retries'], (v.steps || []).map((s) => el('tr', {},
      el('td', {}, text(s.step)), el('td', {}, text(s.from) + ' → ' + text(s.to)), el('td', {}, text(s.status)),
      el('td', {}, (s.done || []).join(', ')), el('td', {}, (s.undone || []).join(', ')),
      el('td', { class: 'num' }, count(s.cosmosRetries)), el('td', { class: 'num' }, count(s.undoCosmosRetries))))));
    out.push(el('h2', {}, 'Timeline'));
    out.push(table('timeline', ['Time', 'Kind', 'What', 'Detail', 'Cosmos retries', 'Proof (exactly once)'], timelineOf(v).map((t) => el('tr', { class: 'tl-row' },
      el('td', {}, t.t), el('td', { class: 'kind k-' + t.kind }, t.kind), el('td', {}, t.what), el('td', {}, t.detail),
      el('td', { class: 'num retries' }, t.retries || ''), el('td', {}, t.proof)))));
    out.push(el('h2', {}, 'Item'));
    out.push(el('pre', { id: 'saga-item' }, v.document ? JSON.stringify(v.document, null, 2) : '(deleted)'));
  }
  out.push(el('p', { class: 'muted' }, r.cosmosRequests + ' Cosmos requests'));
  show(...out);
}

// ---------------------------------------------------------------------------
// Parked

async function replay(body, label) {
  if (!window.confirm('Replay ' + label + '? The running service re-runs its items in order.')) return;
  try {
    const r = await post('parked/replay', body);
    toast('Replay requested: ' + r.marked + ' record(s) marked. ' + r.note);
    const res = document.getElementById('replay-result');
    if (res) res.textContent = 'Replay of ' + label + ': ' + r.marked + ' record(s) marked for replay.';
    setTimeout(route, 1500);
  } catch (e) {
    toast('Replay refused: ' + e.message);
    const res = document.getElementById('replay-result');
    if (res) res.textContent = 'Replay refused (' + e.status + '): ' + e.message;
  }
}

async function pageParked() {
  show(el('h1', {}, 'Parked'), el('p', { class: 'muted' }, 'Loading…'));
  let r;
  try { r = await api('parked'); } catch (e) { show(el('h1', {}, 'Parked'), failure(e)); return; }
  const rows = r.records.map((p) => el('tr', { class: 'parked-row' },
    el('td', {}, text(p.parkKey)),
    el('td', {}, el('a', { href: '#/saga/' + encodeURIComponent(text(p.workflow)) + '/' + encodeURIComponent(text(p.sourceId)) + (typeof (p.partitionKey || [])[0] === 'string' ? '?key=' + encodeURIComponent(p.partitionKey[0]) : '') }, text(p.sourceId))),
    el('td', {}, p.status === 'parked' ? badge('parked') : el('span', { class: 'badge s-waiting' }, text(p.status))),
    el('td', {}, text(p.attempts)),
    el('td', {}, text(p.parkedAt)),
    el('td', {}, text((p.error || {}).message)),
    el('td', {}, p.replayRequested ? 'requested' : ''),
    el('td', {}, p.status === 'parked' ? el('button', { class: 'replay-key', onclick: () => replay({ key: p.parkKey }, 'key ' + p.parkKey) }, 'Replay key') : null)));
  show(el('h1', {}, 'Parked'),
    el('div', { class: 'bar' },
      el('span', { id: 'parked-total' }, r.total + ' record(s)' + (r.truncated ? ' (first ' + r.records.length + ' shown)' : '')),
      r.total > 0 ? el('button', { id: 'replay-all', class: 'danger', onclick: () => replay({ all: true }, 'every parked key') }, 'Replay all') : null,
      el('span', { id: 'replay-result', class: 'muted' })),
    table('parked', ['Key', 'Item', 'Status', 'Attempts', 'Parked at', 'Error', 'Replay', ''], rows),
    el('p', { class: 'muted' }, r.cosmosRequests + ' Cosmos requests'));
}

// ---------------------------------------------------------------------------
// Fleet

async function pageFleet() {
  show(el('h1', {}, 'Fleet'), el('p', { class: 'muted' }, 'Loading…'));
  let r;
  try { r = await api('fleet'); } catch (e) { show(el('h1', {}, 'Fleet'), failure(e)); return; }
  const reason = el('input', { id: 'pause-reason', placeholder: 'why (required to pause)', size: 40 });
  const act = async (what) => {
    try {
      const x = await post(what, what === 'pause' ? { reason: reason.value } : {});
      toast('Fleet ' + (x.paused ? 'paused' : 'resumed') + ' (control version ' + x.version + ')');
      route();
    } catch (e) {
      toast(what + ' refused: ' + e.message);
      document.getElementById('fleet-result').textContent = what + ' refused (' + e.status + '): ' + e.message;
    }
  };
  show(el('h1', {}, 'Fleet'),
    el('p', { id: 'fleet-state' }, r.paused ? el('b', {}, 'Paused') : el('b', {}, 'Running'),
      r.paused ? ' by ' + text(r.pausedBy) + ': ' + text(r.pauseReason) : '',
      r.controlChanged ? ' · since ' + text(r.controlChanged) : ''),
    el('div', { class: 'bar' }, reason,
      el('button', { id: 'pause', class: 'danger', onclick: () => act('pause') }, 'Pause'),
      el('button', { id: 'resume', onclick: () => act('resume') }, 'Resume'),
      el('span', { id: 'fleet-result', class: 'muted' })),
    el('h2', {}, 'Instances'),
    table('instances', ['Instance', 'Alive', 'Ranges'], (r.instances || []).map((i) => el('tr', {},
      el('td', {}, text(i.instance)), el('td', {}, i.alive ? 'yes' : 'no'), el('td', {}, text(i.ranges))))),
    el('h2', {}, 'Ranges'),
    table('ranges', ['Container', 'Range', 'Owner', 'Epoch', 'Lag (items)', 'Lag (s)', 'Checkpoint LSN', 'Last progress'],
      (r.ranges || []).map((g) => el('tr', {},
        el('td', {}, text(g.container)), el('td', {}, text(g.range)), el('td', {}, text(g.owner) + (g.owner && !g.ownerAlive ? ' (expired)' : '')),
        el('td', {}, text(g.epoch)), el('td', {}, g.started ? text(g.lagItems) : 'not started'), el('td', {}, text(g.lagSeconds)),
        el('td', {}, text(g.checkpointLsn)), el('td', {}, text(g.lastProgress))))),
    el('p', { class: 'muted' }, r.cosmosRequests + ' Cosmos requests'));
}

// ---------------------------------------------------------------------------
// Charts (SVG drawn here; samples kept in memory by the server)

const COLORS = ['#2d5bd7', '#c2372f', '#1c8a44', '#a0610b', '#7a3fb8', '#0f8a96', '#6b7488'];

function chart(id, title, series, unit) {
  const NS = 'http://www.w3.org/2000/svg';
  const W = 800, H = 180, P = 34;
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  svg.setAttribute('id', id);
  let tmin = Infinity, tmax = -Infinity, vmax = 0;
  for (const s of series) for (const [t, v] of s.points) { tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); vmax = Math.max(vmax, v); }
  if (!isFinite(tmin)) { tmin = Date.now() - 3600e3; tmax = Date.now(); }
  if (tmax === tmin) tmax = tmin + 1;
  if (vmax === 0) vmax = 1;
  const line = (x1, y1, x2, y2, c) => { const l = document.createElementNS(NS, 'line'); l.setAttribute('x1', x1); l.setAttribute('y1', y1); l.setAttribute('x2', x2); l.setAttribute('y2', y2); l.setAttribute('stroke', c); svg.appendChild(l); };
  const label = (x, y, s) => { const t = document.createElementNS(NS, 'text'); t.setAttribute('x', x); t.setAttribute('y', y); t.setAttribute('font-size', '11'); t.setAttribute('fill', '#6b7488'); t.textContent = s; svg.appendChild(t); };
  line(P, H - 20, W - 5, H - 20, '#c3c9d8');
  line(P, 5, P, H - 20, '#c3c9d8');
  label(2, 14, vmax.toFixed(vmax < 10 ? 1 : 0));
  label(2, H - 22, '0');
  label(P, H - 4, new Date(tmin).toISOString().slice(11, 19));
  label(W - 60, H - 4, new Date(tmax).toISOString().slice(11, 19));
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const pl = document.createElementNS(NS, 'polyline');
    pl.setAttribute('fill', 'none');
    pl.setAttribute('stroke', COLORS[i % COLORS.length]);
    pl.setAttribute('stroke-width', '2');
    pl.setAttribute('points', s.points.map(([t, v]) => (P + (t - tmin) / (tmax - tmin) * (W - P - 5)).toFixed(1) + ',' + (H - 20 - v / vmax * (H - 30)).toFixed(1)).join(' '));
    svg.appendChild(pl);
  });
  return el('div', { class: 'chart' }, el('b', {}, title), ' ', el('span', { class: 'muted' }, unit),
    el('div', { class: 'legend' }, series.map((s, i) => el('span', { class: 'c' + (i % COLORS.length) }, '■ ', el('span', { class: 'muted' }, s.name)))), svg);
}

function rates(samples, pick) {
  const out = {};
  for (let i = 1; i < samples.length; i++) {
    const a = pick(samples[i - 1]), b = pick(samples[i]);
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    if (dt <= 0) continue;
    for (const k of Object.keys(b)) {
      if (a[k] === undefined || a[k] === null || b[k] === null) continue;
      (out[k] = out[k] || []).push([samples[i].t, Math.max(0, (b[k] - a[k]) / dt)]);
    }
  }
  return Object.entries(out).map(([name, points]) => ({ name, points }));
}

async function pageCharts() {
  let r;
  try { r = await api('charts'); } catch (e) { show(el('h1', {}, 'Charts'), failure(e)); return; }
  const s = r.samples;
  const lag = {};
  for (const x of s) for (const [k, v] of Object.entries(x.lag)) (lag[k] = lag[k] || []).push([x.t, v]);
  show(el('h1', {}, 'Charts'),
    el('p', { class: 'muted', id: 'charts-source' }, s.length + ' sample(s) from ' + r.source + ' (last hour, kept in memory only).'),
    el('div', { class: 'charts' },
      chart('chart-lag', 'Lag per range', Object.entries(lag).map(([name, points]) => ({ name, points })), 'items'),
      chart('chart-settled', 'Sagas settled', rates(s, (x) => ({ 'settled/s': x.settled })), 'per second'),
      chart('chart-ru', 'Request units per container', rates(s, (x) => x.ru), 'RU/s')));
}

// ---------------------------------------------------------------------------
// Shell

function chrome() {
  const who = document.getElementById('who');
  const login = document.getElementById('login');
  const logout = document.getElementById('logout');
  who.textContent = info.database + ' · ' + info.mode + ' · ' + (info.writable ? (info.loggedIn ? 'admin' : 'read-only until you log in') : 'read-only');
  login.hidden = !info.writable || info.loggedIn;
  logout.hidden = !info.loggedIn;
  document.getElementById('foot').textContent = 'sagafeed ' + info.version;
}

async function route() {
  const { path, args } = params();
  for (const n of ['sagas', 'parked', 'fleet', 'charts']) {
    document.getElementById('nav-' + n).className = path.startsWith('/' + n) || (n === 'sagas' && path.startsWith('/saga/')) ? 'on' : '';
  }
  if (path.startsWith('/saga/')) return pageSaga(path, args);
  if (path === '/parked') return pageParked();
  if (path === '/fleet') return pageFleet();
  if (path === '/charts') return pageCharts();
  return pageSagas(args);
}

async function start() {
  try { info = await api('info'); } catch (e) { show(failure(e)); return; }
  chrome();
  document.getElementById('login').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await post('login', { token: document.getElementById('login-token').value });
      document.getElementById('login-token').value = '';
      info = await api('info');
      chrome();
      toast('Logged in');
    } catch (e) { toast('Login refused: ' + e.message); }
  });
  document.getElementById('logout').addEventListener('click', async () => {
    await post('logout', {});
    info = await api('info');
    chrome();
  });
  window.addEventListener('hashchange', route);
  route();
}

document.addEventListener('DOMContentLoaded', start);
