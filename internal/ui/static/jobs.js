// The jobs page: counts per state, filters by state and type, one page of
// jobs (the API's cursor), refreshed every 2 s while visible.

import { get, request } from './api.js';
import {
  ago, averageRate, badge, copyable, duration, emptyRow, every, h, isOpen, num, progressBar, rate, table,
} from './dom.js';

const states = ['pending', 'running', 'completed', 'failed', 'cancelled'];
const pageSize = 25;

/** Renders the jobs page into root; returns a function that stops it. */
export function jobsPage(root, { query, navigate }) {
  const state = states.includes(query.get('state')) ? query.get('state') : '';
  const type = query.get('type') || '';
  const cursors = query.get('cursor') ? ['', query.get('cursor')] : [''];
  let next = null;
  const seen = new Map(); // job id -> {done, at}: for the live rate

  const filterURL = (st, ty) => {
    const q = new URLSearchParams();
    if (st) q.set('state', st);
    if (ty) q.set('type', ty);
    const qs = q.toString();
    return `/ui/jobs${qs ? `?${qs}` : ''}`;
  };

  const counts = h('div', { id: 'counts', class: 'counts' });
  const stateSelect = h('select', { id: 'filter-state', 'aria-label': 'state' },
    h('option', { value: '' }, 'any state'), states.map((x) => h('option', { value: x, selected: x === state }, x)));
  const typeInput = h('input', { id: 'filter-type', type: 'search', placeholder: 'type', value: type, 'aria-label': 'type', size: 16 });
  const filters = h('form', {
    id: 'filters', class: 'filters',
    onsubmit: (e) => {
      e.preventDefault();
      navigate(filterURL(stateSelect.value, typeInput.value.trim()));
    },
  }, stateSelect, typeInput, h('button', { type: 'submit' }, 'Filter'),
  (state || type) && h('a', { href: '/ui/jobs', class: 'clear' }, 'clear filters'));
  stateSelect.addEventListener('change', () => filters.requestSubmit());

  const jobsTable = table({ id: 'jobs-table', class: 'list' },
    ['Job', 'Type', 'State', 'Progress', 'Done / failed / expected', 'Rate', 'Age', 'Duration']);
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
      tbody.append(emptyRow(8, state || type ? 'No job matches these filters.' : 'No jobs yet: submit one with warren submit.'));
    }
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.className = 'muted small';
  }

  function row(job, now) {
    const done = job.completed_tasks + job.failed_tasks;
    let r = averageRate(job);
    const before = seen.get(job.id);
    if (isOpen(job.state) && before && now > before.at && done >= before.done) {
      r = (1000 * (done - before.done)) / (now - before.at); // over the last refresh
    }
    seen.set(job.id, { done, at: now });
    const started = Date.parse(job.started_at || job.created_at);
    const ended = job.finished_at ? Date.parse(job.finished_at) : now;
    return h('tr', { 'data-job-id': job.id, 'data-state': job.state },
      h('td', null, copyable(job.id, `/ui/jobs/${encodeURIComponent(job.id)}`)),
      h('td', { class: 'type' }, h('a', { href: filterURL(state, job.type), title: `only ${job.type} jobs` }, job.type)),
      h('td', null, badge(job.state), job.reduce_state === 'running' && job.state === 'running' ? [' ', h('span', { class: 'badge running' }, 'reducing')] : null),
      h('td', { class: 'wide' }, progressBar(job)),
      h('td', { class: 'num' }, num(job.completed_tasks), ' / ',
        h('span', { class: job.failed_tasks ? 'bad-text' : '' }, num(job.failed_tasks)), ' / ', num(job.expected_tasks)),
      h('td', { class: 'num' }, isOpen(job.state) || done ? rate(r) : '–'),
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
      href: filterURL(st === state ? '' : st, type), class: `count state-${st}${st === state ? ' active' : ''}`,
      'data-count-state': st, title: st === state ? 'show every state' : `show only ${st} jobs`,
    }, h('span', { class: 'n' }, num(byState[st] || 0)), h('span', { class: 'label' }, st))));
  }

  const stops = [every(2000, load), every(10000, loadCounts)];
  return () => stops.forEach((stop) => stop());
}
