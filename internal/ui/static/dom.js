// DOM helpers. Every value from the API goes into the page as text
// (Node.append of a string, textContent, setAttribute), never as HTML.

/** Creates an HTML element with attributes and children. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** Creates an SVG element with attributes and children. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs, children);
}

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') for (const [p, val] of Object.entries(v)) el.style.setProperty(p, val);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Runs fn now and every ms while the page is visible; returns a stop. */
export function every(ms, fn) {
  let timer = 0;
  let stopped = false;
  let running = false;
  const tick = async () => {
    clearTimeout(timer);
    if (stopped) return;
    if (document.visibilityState === 'visible' && !running) {
      running = true;
      try {
        await fn();
      } catch (err) {
        console.warn(err);
      } finally {
        running = false;
      }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  const onVisible = () => document.visibilityState === 'visible' && tick();
  document.addEventListener('visibilitychange', onVisible);
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
}

/** Shows a message in the notice bar (kind: 'error', 'ok' or 'info'). */
export function notify(message, kind = 'info') {
  const bar = document.getElementById('notice');
  bar.className = `notice ${kind}`;
  bar.replaceChildren(h('span', null, message), h('button', { type: 'button', class: 'link', 'aria-label': 'dismiss', onclick: () => { bar.hidden = true; } }, '×'));
  bar.hidden = false;
}

/** Hides the notice bar. */
export function clearNotice() {
  document.getElementById('notice').hidden = true;
}

/** Asks a yes/no question in a modal dialog; resolves true on confirm. */
export function confirmAction(title, text, confirmLabel = 'Confirm') {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = confirmLabel;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener('click', yes);
      cancel.removeEventListener('click', no);
      dialog.removeEventListener('cancel', no);
      dialog.close();
      resolve(answer);
    };
    const yes = () => done(true);
    const no = () => done(false);
    ok.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('cancel', no);
    dialog.showModal();
    cancel.focus();
  });
}

const numberFormat = new Intl.NumberFormat('en');

/** A count with thousands separators. */
export const num = (n) => (n == null ? '–' : numberFormat.format(n));

/** A duration in ms, short: 850ms, 12.3s, 4m05s, 3h20m, 2d4h. */
export function duration(ms) {
  if (ms == null || !isFinite(ms)) return '–';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const sec = ms / 1000;
  if (sec < 60) return `${sec.toFixed(sec < 10 ? 1 : 0)}s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m}m${String(Math.floor(sec % 60)).padStart(2, '0')}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(hr / 24)}d${hr % 24}h`;
}

/** How long ago an RFC 3339 time was, as an element with the time as title. */
export function ago(iso) {
  if (!iso) return h('span', { class: 'muted' }, '–');
  return h('time', { datetime: iso, title: localTime(iso) }, `${duration(Date.now() - Date.parse(iso))} ago`);
}

/** An RFC 3339 time in local time, YYYY-MM-DD HH:MM:SS. */
export function localTime(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A time element showing an RFC 3339 time in local time. */
export function timeEl(iso) {
  if (!iso) return h('span', { class: 'muted' }, '–');
  return h('time', { datetime: iso, title: iso }, localTime(iso));
}

/** A state badge (job, task or delivery state). */
export function badge(state) {
  return h('span', { class: `badge state-${String(state).replace(/[^a-z_-]/g, '')}` }, state);
}

/** A monospace id with a copy button. */
export function copyable(text, href) {
  const label = href ? h('a', { href, class: 'mono' }, text) : h('span', { class: 'mono' }, text);
  const button = h('button', {
    type: 'button', class: 'copy', title: 'copy', 'aria-label': 'copy',
    onclick: async (e) => {
      e.preventDefault();
      try {
        await navigator.clipboard.writeText(text);
        button.classList.add('done');
      } catch {
        button.classList.add('failed');
      }
      setTimeout(() => button.classList.remove('done', 'failed'), 1200);
    },
  }, copyIcon());
  return h('span', { class: 'copyable' }, label, button);
}

/** A small "copy" icon: two overlapping sheets. */
function copyIcon() {
  return s('svg', { viewBox: '0 0 16 16', width: 12, height: 12, 'aria-hidden': 'true' },
    s('rect', { x: 5, y: 5, width: 9, height: 9, rx: 1.5 }),
    s('path', { d: 'M3 11V3.5A1.5 1.5 0 0 1 4.5 2H11' }));
}

/** A progress bar of a job's completed and failed tasks. */
export function progressBar(job, big = false) {
  const total = Math.max(job.expected_tasks, 1);
  const pc = (n) => `${Math.min(100, (100 * n) / total).toFixed(2)}%`;
  const done = job.completed_tasks + job.failed_tasks;
  return h('div', {
    class: big ? 'progress big' : 'progress', role: 'progressbar',
    'aria-valuemin': 0, 'aria-valuemax': job.expected_tasks, 'aria-valuenow': done,
    title: `${num(job.completed_tasks)} completed, ${num(job.failed_tasks)} failed of ${num(job.expected_tasks)}`,
  },
  h('span', { class: 'ok', style: { width: pc(job.completed_tasks) } }),
  h('span', { class: 'bad', style: { width: pc(job.failed_tasks) } }));
}

/** A rate in tasks per second: the job's rate as the API computes it
 * (finished tasks from the first start to the latest finish, or to the
 * close; null while not measurable), one definition with the CLI's. */
export function rate(r) {
  if (r == null) return '–';
  if (r >= 100) return `${num(Math.round(r))}/s`;
  return `${r.toFixed(r >= 10 ? 1 : 2)}/s`;
}

/** Whether a job state is open (the job may still change by itself). */
export const isOpen = (state) => state === 'pending' || state === 'running';

/** A panel: a section with a heading, an optional toolbar, and a body. */
export function panel(title, attrs, ...body) {
  return h('section', { class: 'panel', ...attrs }, h('h2', null, title), ...body);
}

/** A table with a header row; rows are added to its tbody. */
export function table(attrs, headers) {
  return h('table', attrs, h('thead', null, h('tr', null, headers.map((x) => h('th', null, x)))), h('tbody'));
}

/** A one-cell row that says why a table is empty. */
export function emptyRow(cols, text) {
  return h('tr', { class: 'empty' }, h('td', { colspan: cols }, text));
}

/** Pretty-prints JSON text when it parses, else returns it as it is. */
export function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
