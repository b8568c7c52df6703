// The console's script. Everything the server or an agent says reaches the
// page through textContent (never innerHTML): it is shown, never parsed.
// The owner's token is posted once to sign in and never kept: not in a URL,
// not in storage; the session cookie is HttpOnly and this script never sees it.
'use strict';

const $ = (id) => document.getElementById(id);

/** An element with `text` as its text (never as markup). */
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const cell of cells) {
    const td = document.createElement('td');
    if (cell instanceof Node) td.appendChild(cell); else td.textContent = String(cell);
    tr.appendChild(td);
  }
  return tr;
}

class SignedOut extends Error {}

/** A request to the API: the cookie authenticates it; a state-changing one
 *  carries the console's header (the server's CSRF rule). */
async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (method !== 'GET') init.headers['X-CC-Console'] = '1';
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) { showSignIn(); throw new SignedOut('signed out'); }
  if (!r.ok) {
    let message = r.statusText;
    try { message = (await r.json()).error; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return r.status === 204 ? null : r.json();
}

/** Reads an NDJSON response line by line until it ends or `stop()` is true. */
async function follow(path, onLine, controller) {
  const r = await fetch(path, { credentials: 'same-origin', signal: controller.signal });
  if (r.status === 401) { showSignIn(); return; }
  if (!r.ok || !r.body) throw new Error(path + ': ' + r.status);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, at);
      buffered = buffered.slice(at + 1);
      if (line.trim()) onLine(JSON.parse(line));
    }
  }
}

// ---- the badge (SPEC B8): what really holds, never flattering ----

/** The badge of a backend kind: `none` never looks protected, a microVM
 *  without a kernel boundary (TCG) says it is emulated. */
function badge(kind, kernelBoundary, available) {
  if (available === false) return el('span', 'unavailable', 'badge unavailable');
  if (kind === 'none') return el('span', 'NOT SANDBOXED — runs on the host', 'badge unprotected');
  if (kind === 'microvm' && !kernelBoundary) return el('span', 'microVM, emulated (TCG) — no kernel boundary', 'badge emulated');
  if (kind === 'microvm') return el('span', 'microVM — kernel boundary', 'badge protected');
  if (kind === 'native') return el('span', 'native sandbox — shared kernel', 'badge protected');
  return el('span', 'unknown: ' + kind, 'badge unprotected');
}

// ---- backends and sandboxes ----

async function showBackends() {
  const answer = await api('GET', '/v1/backends');
  const body = $('backends').tBodies[0];
  body.replaceChildren();
  for (const b of answer.backends) {
    const probe = b.probe || {};
    const said = probe.available ? probe.note : (probe.note + (probe.hint ? ' — ' + probe.hint : ''));
    const source = b.source && (b.source.path || b.source.kind) || '';
    const name = el('span', b.name + (answer.default && answer.default.backend === b.name ? ' (default)' : ''));
    body.appendChild(row([name, badge(probe.kind, probe.kernelBoundary, probe.available), said, source]));
  }
}

function describeLimits(details) {
  const limits = details && details.limits;
  if (!limits || typeof limits !== 'object') return '—';
  const shown = (k, v) => {
    if (!v || typeof v !== 'object') return k + ': ' + v;
    const value = v.value === null || v.value === undefined ? 'none' : k.endsWith('Bytes') ? (v.value / 1048576).toFixed(0) + ' MiB' : v.value;
    return k + ': ' + value + (v.enforced ? ' (held: ' + v.by + ')' : ' (not enforced: ' + v.by + ')');
  };
  return Object.entries(limits).map(([k, v]) => shown(k, v)).join('\n');
}

function describeUsage(details) {
  const u = details && details.usage;
  if (!u) return '—';
  const parts = [];
  if (u.memoryBytes !== undefined) parts.push('memory ' + (u.memoryBytes / 1048576).toFixed(1) + ' MiB');
  if (u.tasks !== undefined) parts.push('tasks ' + u.tasks);
  if (u.source) parts.push('(' + u.source + ')');
  return parts.join('\n');
}

async function showSandboxes() {
  const list = await api('GET', '/v1/sandboxes');
  const body = $('sandboxes').tBodies[0];
  body.replaceChildren();
  for (const s of list) {
    const d = s.details || {};
    const b = badge(s.backend, s.kernelBoundary);
    const who = el('div');
    who.appendChild(b);
    who.appendChild(el('div', s.backendName + ': ' + s.note, 'quiet'));
    const cells = [s.sessionId, who, s.state + (s.error ? ' — ' + s.error : ''),
      el('div', describeLimits(d), 'wrap'), el('div', describeUsage(d), 'wrap'), d.runningExecs ?? ''];
    const tr = row(cells);
    tr.dataset.sandbox = s.sessionId;
    body.appendChild(tr);
  }
}

// ---- live events ----

const EVENTS_KEPT = 500;

function eventText(e) {
  const parts = [new Date().toLocaleTimeString(), e.sandboxId || '', e.type];
  if (e.execId) parts.push('exec ' + e.execId);
  if (e.type === 'violation') parts.push(e.action + ' ' + e.target + (e.rule ? ' — ' + e.rule : ''));
  else if (e.type === 'stdout' || e.type === 'stderr') parts.push(e.data !== undefined ? e.data : '(binary)');
  else if (e.type === 'exit') parts.push('code ' + e.exitCode);
  else if (e.type === 'killed') parts.push(e.reason);
  else if (e.type === 'state') parts.push(e.state);
  else if (e.type === 'lagged') parts.push(e.missed + ' events missed');
  else if (e.type === 'approval') parts.push(e.id + ' ' + e.state);
  return parts.filter((p) => p !== '').join('  ');
}

function addEvent(e) {
  // The feed is open: what happens from now on is shown.
  if (e.type === 'connected') { document.body.dataset.events = 'live'; return; }
  const cls = e.type === 'violation' ? 'violation'
    : ['starting', 'ready', 'created', 'destroyed'].includes(e.type) ? 'lifecycle' : '';
  const li = el('li', eventText(e), cls);
  li.dataset.type = e.type;
  const list = $('events');
  list.appendChild(li);
  while (list.children.length > EVENTS_KEPT) list.firstChild.remove();
  list.scrollTop = list.scrollHeight;
  if (['ready', 'destroyed', 'created', 'exit', 'killed'].includes(e.type)) refreshSoon();
}

// ---- approvals (SPEC H4): this page is an owner while it is open ----

const prompts = new Map();

function showPrompt(p) {
  const li = el('li');
  li.dataset.prompt = p.id;
  li.appendChild(el('div', 'sandbox ' + p.sessionId + ' asks to run:'));
  li.appendChild(el('code', p.command));
  li.appendChild(el('div', (p.rule || '') + (p.reasons && p.reasons.length ? ' — ' + p.reasons.join('; ') : ''), 'quiet'));
  const allow = el('button', 'Allow');
  allow.type = 'button';
  allow.className = 'allow';
  const deny = el('button', 'Deny');
  deny.type = 'button';
  deny.className = 'deny';
  const said = el('span', '', 'error');
  const answer = (decision) => api('POST', '/v1/approvals/' + encodeURIComponent(p.id), { decision })
    .catch((e) => { said.textContent = e.message; });
  allow.addEventListener('click', () => answer('allow'));
  deny.addEventListener('click', () => answer('deny'));
  const buttons = el('div');
  buttons.append(allow, deny, said);
  li.appendChild(buttons);
  prompts.set(p.id, li);
  $('approvals').appendChild(li);
  $('approvals-none').hidden = true;
}

function onApproval(m) {
  if (m.type === 'connected') document.body.dataset.approvals = 'live';
  if (m.type === 'prompt') showPrompt(m);
  if (m.type === 'resolved') {
    const li = prompts.get(m.id);
    if (li) li.remove();
    prompts.delete(m.id);
    $('approvals-none').hidden = prompts.size > 0;
    addEvent({ type: 'approval', sandboxId: '', execId: 0, id: m.id, state: m.answer });
  }
}

// ---- the terminal ----

let terminal = null;

/** An xterm.js terminal that never writes the clipboard (OSC 52) and
 *  never opens a link by itself. */
function makeTerminal(container) {
  const term = new Terminal({
    convertEol: false,
    cursorBlink: true,
    scrollback: 5000,
    // OSC 8 hyperlinks: shown, never followed (the default would offer to).
    linkHandler: { activate() {}, allowNonHttpProtocols: false },
  });
  // OSC 52 asks the terminal to write the clipboard: swallowed.
  term.parser.registerOscHandler(52, () => true);
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();
  return { term, fit };
}

async function openTerminal(backend) {
  const status = $('terminal-status');
  status.textContent = 'starting…';
  if (terminal) terminal.close();
  const container = $('terminal');
  container.replaceChildren();
  const { term, fit } = makeTerminal(container);
  const made = await api('POST', '/v1/terminals', { backend, cols: term.cols, rows: term.rows });
  $('terminal-badge').replaceChildren(badge(made.backend, made.kernelBoundary));
  const { ticket } = await api('POST', '/v1/terminals/' + encodeURIComponent(made.id) + '/tickets');
  const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  const ws = new WebSocket(scheme + location.host + '/v1/terminals/' + encodeURIComponent(made.id) + '/ws?ticket=' + encodeURIComponent(ticket));
  ws.binaryType = 'arraybuffer';
  const encoder = new TextEncoder();
  ws.addEventListener('open', () => { status.textContent = 'terminal ' + made.id; term.focus(); });
  ws.addEventListener('message', (m) => {
    if (m.data instanceof ArrayBuffer) { term.write(new Uint8Array(m.data)); return; }
    const control = JSON.parse(m.data);
    if (control.type === 'exit') status.textContent = 'the shell ended (code ' + control.code + ')';
    if (control.type === 'error') status.textContent = control.error;
  });
  ws.addEventListener('close', (c) => { if (!status.textContent.startsWith('the shell')) status.textContent = 'closed: ' + (c.reason || c.code); });
  const input = term.onData((d) => { if (ws.readyState === 1) ws.send(encoder.encode(d)); });
  const resize = term.onResize(({ cols, rows }) => {
    if (ws.readyState === 1) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  });
  const onWindow = () => fit.fit();
  window.addEventListener('resize', onWindow);
  terminal = {
    id: made.id,
    term,
    close() {
      input.dispose(); resize.dispose();
      window.removeEventListener('resize', onWindow);
      ws.close();
      term.dispose();
    },
  };
}

// ---- signing in and out ----

let streams = null;
let refresher = null;

function showSignIn() {
  if (streams) streams.abort();
  streams = null;
  clearInterval(refresher);
  $('main').hidden = true;
  $('signout').hidden = true;
  $('signin').hidden = false;
  $('status').textContent = 'signed out';
}

let refreshing = null;
function refreshSoon() {
  clearTimeout(refreshing);
  refreshing = setTimeout(() => showSandboxes().catch(reportError), 150);
}

function reportError(e) {
  if (!(e instanceof SignedOut)) $('status').textContent = e.message;
}

async function showConsole() {
  await showBackends();
  $('signin').hidden = true;
  $('main').hidden = false;
  $('signout').hidden = false;
  $('status').textContent = 'signed in as the owner';
  await showSandboxes();
  streams = new AbortController();
  follow('/v1/events', addEvent, streams).catch(reportError);
  follow('/v1/approvals', onApproval, streams).catch(reportError);
  refresher = setInterval(() => showSandboxes().catch(reportError), 3000);
}

async function signIn(event) {
  event.preventDefault();
  const field = $('token');
  const token = field.value.trim();
  field.value = '';
  $('signin-error').textContent = '';
  const r = await fetch('/v1/console/session', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json', 'X-CC-Console': '1' },
    body: JSON.stringify({ token }),
  });
  if (!r.ok) {
    let message = r.statusText;
    try { message = (await r.json()).error; } catch (_) { /* not JSON */ }
    $('signin-error').textContent = message;
    return;
  }
  await showConsole();
}

async function signOut() {
  if (terminal) { terminal.close(); terminal = null; }
  await api('DELETE', '/v1/console/session').catch(reportError);
  showSignIn();
}

document.addEventListener('DOMContentLoaded', () => {
  $('signin-form').addEventListener('submit', (e) => signIn(e).catch(reportError));
  $('signout').addEventListener('click', () => signOut());
  $('terminal-form').addEventListener('submit', (e) => {
    e.preventDefault();
    openTerminal($('terminal-backend').value).catch((err) => { $('terminal-status').textContent = err.message; });
  });
  // Already signed in (a cookie from before)? Else ask for the token.
  showConsole().catch((e) => { if (!(e instanceof SignedOut)) reportError(e); });
});
