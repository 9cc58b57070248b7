// Queues and workers: GET /v1/queues (depths, consumers, dead-letter
// growth) and GET /v1/workers (the workers' heartbeats). A server without
// these routes answers 404: the page says so.

import { ApiError, get } from './api.js';
import { ago, badge, copyable, emptyRow, every, h, num, panel, table, timeEl } from './dom.js';

/** Renders the queues and workers page into root; returns a function that stops it. */
export function queuesPage(root) {
  const status = h('span', { class: 'muted small', id: 'updated' });
  const queuesBox = h('div', { class: 'scroll', id: 'queues' });
  const workersBox = h('div', { class: 'scroll', id: 'workers' });
  root.append(
    h('section', { class: 'panel' }, h('div', { class: 'title-row' }, h('h1', null, 'Queues & workers'), status),
      h('p', { class: 'muted' }, 'The RabbitMQ queues of this installation and the workers that report to it.')),
    panel('Queues', { id: 'queues-panel' }, queuesBox),
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
