// The dead-letter page: what tasks.dlq holds, grouped by reason, routing
// key and job, each message pending or settled (a redrive, a replay or a
// delete dealt with it), with replay and purge (admin scope,
// confirmation asked).
// It lists the queue when opened and on Refresh only.

import { can, get, post } from './api.js';
import {
  badge, clearNotice, confirmAction, copyable, emptyRow, h, notify, num, panel, table, timeEl,
} from './dom.js';

const listLimit = 500;

/** What each settled reason (the API's DeadLetter.settled) means. */
const settledWhy = {
  job_deleted: 'its job was deleted (or the store never knew it)',
  job_cancelled: 'its job was cancelled',
  resent: 'a redrive or a replay sent its task back since',
  completed: 'another copy of its task completed',
  unknown_task: 'its job has no such task',
};

/** Renders the dead-letter page into root; returns a function that stops it. */
export function deadLettersPage(root, { query, navigate }) {
  const jobID = query.get('job_id') || '';
  const status = h('span', { class: 'muted small', id: 'updated' });
  const summary = h('div', { class: 'groups', id: 'dl-groups' });
  const listBox = h('div', { class: 'scroll', id: 'dl-list' });
  const jobInput = h('input', { id: 'dl-job', type: 'search', placeholder: 'job id', value: jobID, size: 28, 'aria-label': 'job id' });
  const filters = h('form', {
    class: 'filters',
    onsubmit: (e) => {
      e.preventDefault();
      const v = jobInput.value.trim();
      navigate(v ? `/ui/deadletters?job_id=${encodeURIComponent(v)}` : '/ui/deadletters');
    },
  }, jobInput, h('button', { type: 'submit' }, 'Filter'), jobID && h('a', { href: '/ui/deadletters', class: 'clear' }, 'every job'));
  const scope = jobID ? `of job ${jobID}` : '';
  const toolbar = h('div', { class: 'actions' },
    can('admin') && h('button', { type: 'button', id: 'dl-replay-all', class: 'primary', onclick: () => replay(jobID) }, jobID ? 'Replay this job’s' : 'Replay all'),
    can('admin') && h('button', { type: 'button', id: 'dl-purge-settled', onclick: () => purgeSettled(jobID),
      title: 'delete the dead letters a redrive, a replay or a delete already settled; pending ones stay' }, 'Purge settled'),
    can('admin') && h('button', { type: 'button', id: 'dl-purge-all', class: 'danger', onclick: () => purge(jobID) }, jobID ? 'Purge this job’s' : 'Purge all'),
    h('button', { type: 'button', onclick: () => load() }, 'Refresh'));

  root.append(h('section', { class: 'panel' },
    h('div', { class: 'title-row' }, h('h1', null, 'Dead letters ', jobID && h('small', { class: 'mono' }, scope)), status),
    h('p', { class: 'muted' }, 'Tasks that failed for good, or messages that could not be handled, wait in the dead-letter queue. ',
      'Replaying a task runs it again (its job reopens); purging drops the messages (the tasks stay failed). ',
      'A dead letter is settled once a redrive or a replay sent its task back, or its job was deleted or cancelled: nothing is left to do about it.'),
    h('div', { class: 'title-row' }, filters, toolbar), summary),
  panel('Messages', { id: 'dl-messages' }, listBox));

  async function load() {
    const q = new URLSearchParams({ limit: String(listLimit) });
    if (jobID) q.set('job_id', jobID);
    let out;
    try {
      out = await get(`/v1/deadletters?${q}`);
    } catch (err) {
      status.textContent = '';
      summary.replaceChildren(h('p', { class: 'error' }, err.status === 503 ? `Not available: ${err.message}` : `Could not load: ${err.message}`));
      listBox.replaceChildren();
      return;
    }
    const letters = out.deadletters;
    const pending = letters.filter((d) => d.pending).length;
    status.textContent = `${num(letters.length)}${letters.length >= listLimit ? '+' : ''} message(s), ${num(pending)} pending · updated ${new Date().toLocaleTimeString()}`;
    summary.replaceChildren(
      group('By reason', 'dl-by-reason', letters, (d) => d.reason || '(none)'),
      group('By routing key', 'dl-by-key', letters, (d) => d.routing_key || '(none)'),
      jobGroup(letters));
    const t = table({ class: 'list', id: 'dl-table' }, ['Time', 'Job', 'Task', 'State', 'Reason', 'Routing key', 'Attempts', 'Error']);
    const rows = letters.map((d) => h('tr', { 'data-job-id': d.job_id, 'data-pending': String(d.pending), class: d.pending ? null : 'settled' },
      h('td', null, timeEl(d.time)),
      h('td', null, d.job_id ? copyable(d.job_id, `/ui/jobs/${encodeURIComponent(d.job_id)}`) : '–'),
      h('td', { class: 'num mono' }, d.task_ids && d.task_ids.length > 1 ? `${d.task_ids[0]}…${d.task_ids.at(-1)} (${d.task_ids.length})`
        : d.job_id ? h('a', { href: `/ui/jobs/${encodeURIComponent(d.job_id)}/tasks/${d.task_id}`, class: 'task-link' }, String(d.task_id)) : String(d.task_id)),
      h('td', { class: 'dl-state' }, d.pending ? badge('pending')
        : h('span', { class: 'muted small', title: settledWhy[d.settled] || d.settled }, `settled: ${(d.settled || '').replace('_', ' ')}`)),
      h('td', null, badge(d.reason || 'unknown')),
      h('td', { class: 'mono small' }, d.routing_key),
      h('td', { class: 'num' }, num(d.attempts)),
      h('td', { class: 'error-text' }, d.error)));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(8, 'The dead-letter queue is empty.')]));
    listBox.replaceChildren(t);
  }

  function group(title, id, letters, key) {
    const counts = new Map();
    for (const d of letters) counts.set(key(d), (counts.get(key(d)) || 0) + 1);
    const t = table({ class: 'list compact', id }, [title, 'Count']);
    const rows = [...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => h('tr', null, h('td', { class: 'mono small' }, k), h('td', { class: 'num' }, num(n))));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(2, 'none')]));
    return h('div', { class: 'group' }, t);
  }

  function jobGroup(letters) {
    const counts = new Map();
    for (const d of letters) counts.set(d.job_id, (counts.get(d.job_id) || 0) + 1);
    const t = table({ class: 'list compact', id: 'dl-by-job' }, ['By job', 'Count', can('admin') ? '' : null].filter((x) => x !== null));
    const rows = [...counts].sort((a, b) => b[1] - a[1]).map(([j, n]) => h('tr', { 'data-job-id': j },
      h('td', null, j ? copyable(j, `/ui/deadletters?job_id=${encodeURIComponent(j)}`) : '(none)'),
      h('td', { class: 'num' }, num(n)),
      can('admin') && j && h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'small primary', onclick: () => replay(j) }, 'Replay'),
        h('button', { type: 'button', class: 'small danger', onclick: () => purge(j) }, 'Purge'))));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(3, 'none')]));
    return h('div', { class: 'group' }, t);
  }

  async function replay(job) {
    const what = job ? `the dead letters of job ${job}` : 'every dead letter';
    if (!(await confirmAction('Replay dead letters?', `The tasks of ${what} are published again and run; their jobs reopen.`, 'Replay'))) return;
    clearNotice();
    try {
      const r = await post('/v1/deadletters/replay', job ? { job_id: job } : undefined);
      notify(`Replayed ${num(r.replayed)}, skipped ${num(r.skipped)}.`, 'ok');
    } catch (err) {
      notify(err.message, 'error');
    }
    load();
  }

  async function purgeSettled(job) {
    const what = job ? `of job ${job} ` : '';
    if (!(await confirmAction('Purge settled dead letters?', `This deletes the settled dead letters ${what}from the queue: those whose task a redrive or a replay sent back, or whose job was deleted or cancelled. Pending ones stay.`, 'Purge settled'))) return;
    clearNotice();
    try {
      const r = await post('/v1/deadletters/purge', job ? { job_id: job, settled: true } : { settled: true });
      notify(`Purged ${num(r.purged)} settled.`, 'ok');
    } catch (err) {
      notify(err.message, 'error');
    }
    load();
  }

  async function purge(job) {
    const what = job ? `the dead letters of job ${job}` : 'every dead letter';
    if (!(await confirmAction('Purge dead letters?', `This deletes ${what} from the queue for good. Their tasks stay failed.`, 'Purge'))) return;
    clearNotice();
    try {
      const r = await post('/v1/deadletters/purge', job ? { job_id: job } : { all: true });
      notify(`Purged ${num(r.purged)}.`, 'ok');
    } catch (err) {
      notify(err.message, 'error');
    }
    load();
  }

  // No periodic refresh: listing takes every message and gives it back,
  // which RabbitMQ counts as a delivery of each (docs/operations.md,
  // Dead-letter queues). The page lists on open, on Refresh and after an
  // action.
  load();
  return () => {};
}
