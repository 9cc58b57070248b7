// One task's page: its state and times, its payload and result, every
// attempt the server kept (who ran it, when, how it ended, the error and
// the traceback the worker sent), and its dead letter. Reached from the
// task table, the failed list and the dead letters.

import { get } from './api.js';
import { badge, copyable, duration, emptyRow, h, num, panel, table, timeEl } from './dom.js';

const previewChars = 64 << 10;

/** Renders task params[1] of job params[0] into root; returns a function that stops it. */
export function taskPage(root, { params }) {
  const jobID = decodeURIComponent(params[0]);
  const taskID = Number(params[1]);
  const jobURL = `/ui/jobs/${encodeURIComponent(jobID)}`;
  const abort = new AbortController();
  const head = h('section', { class: 'panel' }, h('a', { href: jobURL, class: 'back' }, '← Job'),
    h('h1', null, `Task ${taskID}`), h('p', { class: 'muted' }, 'Loading…'));
  root.append(head);

  (async () => {
    let t;
    try {
      t = await get(`/v1/jobs/${encodeURIComponent(jobID)}/tasks/${taskID}`, { signal: abort.signal });
    } catch (err) {
      if (abort.signal.aborted) return;
      head.replaceChildren(h('a', { href: jobURL, class: 'back' }, '← Job'), h('h1', null, `Task ${taskID}`),
        h('p', { class: 'error', id: 'task-error' }, err.message));
      return;
    }
    show(t);
  })();

  function show(t) {
    const card = (label, value, id) => h('div', { class: 'card', id: id || null }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
    const took = t.started_at && t.finished_at ? duration(Date.parse(t.finished_at) - Date.parse(t.started_at)) : '–';
    head.replaceChildren(
      h('a', { href: jobURL, class: 'back' }, '← Job'),
      h('div', { class: 'title-row', id: 'task-title' },
        h('h1', null, t.task_id === 0 ? 'Reduce task (0)' : `Task ${t.task_id}`, ' ', badge(t.state)),
        h('span', null, 'of job ', copyable(t.job_id, jobURL))),
      h('div', { class: 'cards', id: 'task-summary' },
        card('Attempts', num(t.attempts), 'task-attempts'), card('Generation', num(t.generation)),
        card('Worker', t.worker || '–'), card('Queued', timeEl(t.queued_at)), card('Started', timeEl(t.started_at)),
        card('Finished', timeEl(t.finished_at)), card('Took', took)),
      t.error ? h('pre', { class: 'error-text', id: 'task-error-text' }, t.error) : '');
    root.append(
      panel('Payload', { id: 'task-payload' }, json(t.payload)),
      t.state === 'completed' ? panel('Result', { id: 'task-result' }, json(t.result)) : '',
      panel('Attempts', { id: 'task-attempts-panel' }, attempts(t.attempt_history),
        h('p', { class: 'muted small' }, 'The server keeps the last attempts of each task (KeepAttempts, 20 by default), each error’s first 8 KB and each traceback’s last 16 KB.')),
      t.dead_letter ? deadLetter(t) : '');
  }

  return () => abort.abort();
}

// json is a JSON value pretty-printed, its first previewChars.
function json(value) {
  const text = JSON.stringify(value, null, 2) ?? 'null';
  return h('pre', { class: 'json' }, text.length > previewChars ? `${text.slice(0, previewChars)}\n…` : text);
}

// attempts is the table of a task's runs, oldest first; a run with a
// traceback has it in a row of its own under it, folded.
function attempts(list) {
  const t = table({ class: 'list', id: 'attempts-table' }, ['#', 'Outcome', 'Worker', 'Started', 'Finished', 'Took', 'Error']);
  const rows = [];
  for (const a of list) {
    const took = a.started_at ? duration(Date.parse(a.finished_at) - Date.parse(a.started_at)) : '–';
    rows.push(h('tr', { 'data-attempt': a.attempt },
      h('td', { class: 'num mono', title: `generation ${a.generation}` }, String(a.attempt)), h('td', null, badge(a.outcome)),
      h('td', { class: 'mono small' }, a.worker || '–'), h('td', null, timeEl(a.started_at)), h('td', null, timeEl(a.finished_at)),
      h('td', { class: 'num' }, took), h('td', { class: 'error-text' }, a.error)));
    if (a.traceback) {
      rows.push(h('tr', { class: 'traceback-row', 'data-traceback': a.attempt },
        h('td', { colspan: 7 }, h('details', { open: a === list.at(-1) },
          h('summary', null, 'Traceback'), h('pre', { class: 'traceback' }, a.traceback)))));
    }
  }
  t.tBodies[0].append(...(rows.length ? rows : [emptyRow(7, 'No attempt recorded yet: a run is recorded when it ends.')]));
  return h('div', { class: 'scroll' }, t);
}

// deadLetter is the panel of a failed task's dead letter.
function deadLetter(t) {
  const d = t.dead_letter;
  return panel('Dead letter', { id: 'task-dead-letter' },
    h('p', null, badge(d.reason), ` after ${num(d.attempts)} attempts, `, timeEl(d.time), ' — ',
      h('span', { class: 'mono small' }, d.message_id)),
    h('p', { class: 'error-text' }, d.error),
    h('p', { class: 'small' }, h('a', { href: `/ui/deadletters?job_id=${encodeURIComponent(t.job_id)}` }, 'Dead letters of this job →')));
}
