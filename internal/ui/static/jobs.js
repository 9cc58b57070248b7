// The jobs page: counts per state, a search box (the API's q) and filters
// by state, type, queue and age, one page of jobs (the API's cursor),
// refreshed every 2 s while visible.

import { get, request } from './api.js';
import {
  ago, badge, copyable, duration, emptyRow, every, h, isOpen, num, progressBar, rate, table,
} from './dom.js';

const states = ['pending', 'running', 'completed', 'failed', 'cancelled'];
const pageSize = 25;
// The created filter's choices: a job created within that long ago.
const ages = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };

/** Renders the jobs page into root; returns a function that stops it. */
export function jobsPage(root, { query, navigate }) {
  const state = states.includes(query.get('state')) ? query.get('state') : '';
  const type = query.get('type') || '';
  const queue = query.get('queue') || '';
  const search = query.get('q') || '';
  const age = ages[query.get('created')] ? query.get('created') : '';
  const filtered = Boolean(state || type || queue || search || age);
  const cursors = query.get('cursor') ? ['', query.get('cursor')] : [''];
  let next = null;

  // filterURL is this page's URL with the filters f changes.
  const filterURL = (f) => {
    const all = { q: search, state, type, queue, created: age, ...f };
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(all)) if (v) q.set(k, v);
    const qs = q.toString();
    return `/ui/jobs${qs ? `?${qs}` : ''}`;
  };

  const counts = h('div', { id: 'counts', class: 'counts' });
  const stateSelect = h('select', { id: 'filter-state', 'aria-label': 'state' },
    h('option', { value: '' }, 'any state'), states.map((x) => h('option', { value: x, selected: x === state }, x)));
  const typeInput = h('input', { id: 'filter-type', type: 'search', placeholder: 'type', value: type, 'aria-label': 'type', size: 12 });
  const searchInput = h('input', {
    id: 'filter-q', type: 'search', placeholder: 'search: id, metadata, errors…', value: search,
    'aria-label': 'search', size: 28, minlength: 3, maxlength: 200,
    title: 'jobs whose id starts with this, or with it in their type, queue, metadata values, error or a task\'s error (ignoring case; 3 characters at least)',
  });
  const queues = h('datalist', { id: 'queue-names' }, h('option', { value: 'default' }));
  const queueInput = h('input', {
    id: 'filter-queue', type: 'search', placeholder: 'queue', value: queue, 'aria-label': 'queue', size: 10, list: 'queue-names',
  });
  const ageSelect = h('select', { id: 'filter-created', 'aria-label': 'created' },
    h('option', { value: '' }, 'any time'),
    Object.keys(ages).map((x) => h('option', { value: x, selected: x === age }, `last ${x}`)));
  const filters = h('form', {
    id: 'filters', class: 'filters',
    onsubmit: (e) => {
      e.preventDefault();
      navigate(filterURL({
        q: searchInput.value.trim(), state: stateSelect.value, type: typeInput.value.trim(),
        queue: queueInput.value.trim(), created: ageSelect.value,
      }));
    },
  }, searchInput, stateSelect, typeInput, queueInput, queues, ageSelect, h('button', { type: 'submit' }, 'Filter'),
  filtered && h('a', { href: '/ui/jobs', class: 'clear' }, 'clear filters'));
  stateSelect.addEventListener('change', () => filters.requestSubmit());
  ageSelect.addEventListener('change', () => filters.requestSubmit());

  const jobsTable = table({ id: 'jobs-table', class: 'list' },
    ['Job', 'Type', 'State', 'Progress', 'Completed / failed / expected', 'Rate', 'Age', 'Duration']);
  const tbody = jobsTable.tBodies[0];
  const prev = h('button', { type: 'button', id: 'prev-page', disabled: true }, '← Newer');
  const nextButton = h('button', { type: 'button', id: 'next-page', disabled: true }, 'Older →');
  const status = h('span', { class: 'muted small', id: 'updated' });
  prev.addEventListener('click', () => { cursors.pop(); load(); });
  nextButton.addEventListener('click', () => { if (next) { cursors.push(next); load(); } });

  root.append(h('section', { class: 'panel' },
    h('div', { class: 'title-row' }, h('h1', null, 'Jobs'), status),
    counts, filters, h('div', { class: 'scroll' }, jobsTable),
    h('div', { class: 'pager' }, prev, nextButton)));

  async function load() {
    const q = new URLSearchParams({ limit: String(pageSize) });
    if (state) q.set('state', state);
    if (type) q.set('type', type);
    if (queue) q.set('queue', queue);
    if (search) q.set('q', search);
    if (age) q.set('created_after', new Date(Date.now() - ages[age]).toISOString());
    const cursor = cursors.at(-1);
    if (cursor) q.set('cursor', cursor);
    let page;
    try {
      page = await get(`/v1/jobs?${q}`);
    } catch (err) {
      status.textContent = `could not load: ${err.message}`;
      status.className = 'error small';
      return;
    }
    next = page.next_cursor;
    prev.disabled = cursors.length < 2;
    nextButton.disabled = !next;
    const now = Date.now();
    tbody.replaceChildren(...page.jobs.map((job) => row(job, now)));
    if (!page.jobs.length) {
      tbody.append(emptyRow(8, filtered ? 'No job matches these filters.' : 'No jobs yet: submit one with warren submit.'));
    }
    const known = new Set([...queues.options].map((o) => o.value));
    for (const job of page.jobs) {
      if (job.queue && !known.has(job.queue)) {
        known.add(job.queue);
        queues.append(h('option', { value: job.queue }));
      }
    }
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.className = 'muted small';
  }

  function row(job, now) {
    const finished = job.completed_tasks + job.failed_tasks;
    // Duration counts from the first task's start; before any outcome
    // reported one, from the submission.
    const started = Date.parse(job.started_at || job.created_at);
    const ended = job.finished_at ? Date.parse(job.finished_at) : now;
    return h('tr', { 'data-job-id': job.id, 'data-state': job.state },
      h('td', null, copyable(job.id, `/ui/jobs/${encodeURIComponent(job.id)}`)),
      h('td', { class: 'type' }, h('a', { href: filterURL({ type: job.type }), title: `only ${job.type} jobs` }, job.type),
        job.queue && job.queue !== 'default'
          ? [' ', h('a', { href: filterURL({ queue: job.queue }), class: 'queue muted small', title: `only jobs of queue ${job.queue}` }, `@${job.queue}`)]
          : null),
      h('td', null, badge(job.state), job.reduce_state === 'running' && job.state === 'running' ? [' ', h('span', { class: 'badge running' }, 'reducing')] : null,
        job.paused && isOpen(job.state) ? [' ', h('span', { class: 'badge state-paused', title: 'paused: no new task starts until it is resumed' }, 'paused')] : null),
      h('td', { class: 'wide' }, progressBar(job)),
      h('td', { class: 'num' }, num(job.completed_tasks), ' / ',
        h('span', { class: job.failed_tasks ? 'bad-text' : '' }, num(job.failed_tasks)), ' / ', num(job.expected_tasks)),
      h('td', { class: 'num rate', title: 'finished tasks per second, from the first task\'s start to the latest finish (to the close once closed)' },
        isOpen(job.state) || finished ? rate(job.rate) : '–'),
      h('td', null, ago(job.created_at)),
      h('td', { class: 'num' }, duration(ended - started)));
  }

  async function loadCounts() {
    let text;
    try {
      const resp = await request('GET', '/metrics', { raw: true, accept: 'text/plain' });
      text = await resp.text();
    } catch {
      counts.hidden = true;
      return;
    }
    const byState = {};
    for (const m of text.matchAll(/^warren_jobs\{state="([a-z]+)"\} ([0-9.e+]+)$/gm)) {
      byState[m[1]] = Number(m[2]);
    }
    if (!Object.keys(byState).length) {
      counts.hidden = true;
      return;
    }
    counts.hidden = false;
    counts.replaceChildren(...states.map((st) => h('a', {
      href: filterURL({ state: st === state ? '' : st }), class: `count state-${st}${st === state ? ' active' : ''}`,
      'data-count-state': st, title: st === state ? 'show every state' : `show only ${st} jobs`,
    }, h('span', { class: 'n' }, num(byState[st] || 0)), h('span', { class: 'label' }, st))));
  }

  const stops = [every(2000, load), every(10000, loadCounts)];
  return () => stops.forEach((stop) => stop());
}
