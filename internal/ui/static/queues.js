// Queues and workers: GET /v1/queues (depths, consumers, dead-letter
// growth) and GET /v1/workers (the workers' heartbeats). A server without
// these routes answers 404: the page says so.

import { ApiError, can, get, post } from './api.js';
import { ago, badge, copyable, emptyRow, every, h, notify, num, panel, table, timeEl } from './dom.js';

/** Renders the queues and workers page into root; returns a function that stops it. */
export function queuesPage(root) {
  const status = h('span', { class: 'muted small', id: 'updated' });
  const queuesBox = h('div', { class: 'scroll', id: 'queues' });
  const workersBox = h('div', { class: 'scroll', id: 'workers' });
  const pausedBox = h('div', { id: 'paused-box' });
  let pausedBoxKey = '';
  // Pause a work queue by the name jobs give ("queue" in a submission):
  // the broker's names below carry the prefix and a suffix.
  const pauseName = h('input', { id: 'pause-queue-name', placeholder: 'work queue, e.g. gpu', 'aria-label': 'work queue to pause' });
  const pauseForm = h('form', { id: 'pause-queue-form', class: 'row', hidden: !can('write'), onsubmit: (e) => {
    e.preventDefault();
    const q = pauseName.value.trim();
    if (q) queueAction(q, 'pause');
  } }, pauseName, h('button', { type: 'submit' }, 'Pause queue'));
  root.append(
    h('section', { class: 'panel' }, h('div', { class: 'title-row' }, h('h1', null, 'Queues & workers'), status),
      h('p', { class: 'muted' }, 'The RabbitMQ queues of this installation and the workers that report to it.')),
    panel('Queues', { id: 'queues-panel' }, pausedBox, pauseForm, queuesBox),
    panel('Workers', { id: 'workers-panel' }, workersBox));

  const unavailable = (err) => h('p', { class: 'muted unavailable' },
    err instanceof ApiError && err.status === 404 ? 'Not available on this server.' : `Could not load: ${err.message}`);

  async function loadQueues() {
    let out;
    try {
      out = await get('/v1/queues');
    } catch (err) {
      queuesBox.replaceChildren(unavailable(err));
      return;
    }
    // The work queues paused (POST /v1/queues/{queue}/pause), by name:
    // the broker's names carry the prefix, so they are listed apart.
    // Rebuilt only when the list changes, so a Resume button is not
    // replaced under the pointer on every poll.
    const paused = out.paused || [];
    const pausedKey = JSON.stringify([can('write'), paused]);
    if (pausedKey !== pausedBoxKey) pausedBox.replaceChildren(...(paused.length
      ? [h('p', { class: 'warn-text', id: 'paused-queues' }, 'Paused work queues (no new task of their jobs starts): ',
        ...paused.flatMap((p, i) => [i ? ', ' : '', h('span', { class: 'mono', 'data-paused-queue': p.queue }, p.queue),
          h('span', { class: 'muted small' }, ` since ${new Date(p.paused_at).toLocaleString()}`),
          ...(can('write') ? [' ', h('button', { type: 'button', class: 'small', 'data-resume-queue': p.queue, onclick: () => queueAction(p.queue, 'resume') }, 'Resume')] : [])]))]
      : []));
    pausedBoxKey = pausedKey;
    const growth = (n) => (n == null ? h('span', { class: 'muted' }, '–') : h('span', { class: n > 0 ? 'bad-text' : '' }, n > 0 ? `+${num(n)}` : num(n)));
    const t = table({ class: 'list', id: 'queues-table' }, ['Queue', 'Kind', 'Messages', 'Consumers', 'Dead letters 1 min', 'Dead letters 15 min']);
    const rows = out.queues.map((q) => h('tr', { 'data-queue': q.name },
      h('td', { class: 'mono' }, q.name), h('td', null, badge(q.kind)),
      h('td', { class: 'num' }, num(q.messages)),
      h('td', { class: `num${q.consumers === 0 && q.kind === 'work' ? ' bad-text' : ''}` }, num(q.consumers)),
      h('td', { class: 'num' }, q.kind === 'dead' ? growth(q.dead_letters_1m) : ''),
      h('td', { class: 'num' }, q.kind === 'dead' ? growth(q.dead_letters_15m) : '')));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(6, 'No queue.')]));
    queuesBox.replaceChildren(t);
  }

  // queueAction pauses or resumes work queue q (POST
  // /v1/queues/{queue}/pause|resume), says so, and shows the queues again.
  async function queueAction(q, action) {
    try {
      const out = await post(`/v1/queues/${encodeURIComponent(q)}/${action}`);
      notify(action === 'pause' ? `Work queue ${q} is paused: no new task of its jobs starts until it is resumed.`
        : `Work queue ${q} is resumed.`, 'ok');
      if (out && out.warnings && out.warnings.length) notify(out.warnings.join(' '), 'error');
      pauseName.value = '';
    } catch (err) {
      notify(err.message, 'error');
    }
    await loadQueues();
  }

  async function loadWorkers() {
    let out;
    try {
      out = await get('/v1/workers');
    } catch (err) {
      workersBox.replaceChildren(unavailable(err));
      return;
    }
    const t = table({ class: 'list', id: 'workers-table' }, ['Worker', 'Id', 'Queues', 'Types', 'In flight', 'Started', 'Last seen', 'Alive']);
    const rows = out.workers.map((w) => h('tr', { 'data-worker': w.id },
      h('td', { class: 'mono' }, w.name), h('td', null, copyable(w.id)),
      h('td', { class: 'mono small' }, (w.queues || []).join(', ')),
      h('td', { class: 'small' }, (w.types || []).join(', ')),
      h('td', { class: 'num' }, h('div', { class: 'inflight' },
        h('span', null, `${num(w.in_flight)} / ${num(w.concurrency)}`),
        h('div', { class: 'progress thin' }, h('span', { class: 'run', style: { width: `${Math.min(100, (100 * w.in_flight) / Math.max(1, w.concurrency))}%` } })))),
      h('td', null, timeEl(w.started_at)), h('td', null, ago(w.last_seen)),
      h('td', null, badge(w.alive ? 'alive' : 'silent'))));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(8, 'No worker has reported.')]));
    // The first page only: a large fleet (or a flood of made-up
    // heartbeats) is not worth more than a count here.
    const more = (out.total || 0) - out.workers.length;
    workersBox.replaceChildren(t, ...(more > 0 ? [h('p', { class: 'muted', id: 'workers-more' }, `${num(more)} more`)] : []));
  }

  return every(5000, async () => {
    await Promise.all([loadQueues(), loadWorkers()]);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  });
}
