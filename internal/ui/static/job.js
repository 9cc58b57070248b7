// A job's page: its counters and progress, followed live through
// GET /v1/jobs/{id}/events (polling every 2 s on a server without it),
// its timeline, failed tasks, tasks, result, webhook deliveries, and the
// actions the token allows.

import { ApiError, can, del, follow, get, post, request } from './api.js';
import { timelineChart } from './chart.js';
import {
  ago, badge, clearNotice, confirmAction, copyable, duration, emptyRow, every, h, isOpen, notify, num,
  panel, pretty, progressBar, rate, table, timeEl,
} from './dom.js';

const taskStates = ['pending', 'queued', 'completed', 'failed', 'cancelled'];
const previewBytes = 16 << 10;
const slowEvery = 5000; // timeline, tasks and deliveries while the job is open

/** Renders job params[0]'s page into root; returns a function that stops it. */
export function jobPage(root, { params, navigate }) {
  const id = decodeURIComponent(params[0]);
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const abort = new AbortController();
  let job = null;
  let stopPoll = null;
  let stopSlow = null;
  let resultShown = false;

  const title = h('div', { class: 'title-row', id: 'job-title' }, h('h1', null, 'Job ', h('span', { class: 'mono' }, id)));
  const actions = h('div', { class: 'actions', id: 'job-actions' });
  const live = h('span', { class: 'muted small', id: 'live' });
  const summary = h('div', { class: 'cards', id: 'job-summary' });
  const progress = h('div', { id: 'job-progress' });
  const jobError = h('p', { class: 'bad-text', id: 'job-error', hidden: true });
  const timelineBox = h('div', { id: 'timeline' }, h('p', { class: 'muted' }, 'Loading…'));
  const failed = taskTable(base, { id: 'failed-tasks', state: 'failed', limit: 20, failedOnly: true });
  const tasks = taskTable(base, { id: 'tasks', state: '', limit: 50 });
  const resultPanel = panel('Result', { id: 'result', hidden: true });
  const deliveriesPanel = panel('Webhook deliveries', { id: 'deliveries', hidden: true });
  const details = panel('Policy and metadata', { id: 'details' });
  const failedPanel = panel('Failed tasks', { id: 'failed-panel', hidden: true }, failed.el,
    h('p', { class: 'small' }, h('a', { href: `/ui/deadletters?job_id=${encodeURIComponent(id)}` }, 'Dead letters of this job →')));

  root.append(
    h('section', { class: 'panel' }, h('a', { href: '/ui/jobs', class: 'back' }, '← Jobs'), title,
      h('div', { class: 'title-row' }, actions, live), jobError, summary, progress),
    panel('Progress over time', { id: 'timeline-panel' }, timelineBox),
    failedPanel,
    panel('Tasks', { id: 'tasks-panel' }, tasks.el),
    resultPanel, deliveriesPanel, details);

  function show(j) {
    const wasOpen = job && isOpen(job.state);
    job = j;
    // A job reducing stays running: its reduce task (task 0) is shown by
    // a badge of its own next to the job's state.
    const reducing = j.reduce_state === 'running' && isOpen(j.state)
      ? [' ', h('span', { class: 'badge running', id: 'reducing', title: 'the reduce task (task 0) is running' }, 'reducing')] : [];
    // A paused job stays in its state: the pause is a badge of its own.
    const paused = j.paused && isOpen(j.state)
      ? [' ', h('span', { class: 'badge state-paused', id: 'paused', title: `paused since ${new Date(j.paused_at).toLocaleString()}: no new task starts until it is resumed` }, 'paused')] : [];
    title.replaceChildren(h('h1', null, j.type, ' ', badge(j.state), ...reducing, ...paused), copyable(j.id));
    const done = j.completed_tasks + j.failed_tasks;
    const end = j.finished_at ? Date.parse(j.finished_at) : Date.now();
    const card = (label, value, cls, title) => h('div', { class: `card ${cls || ''}`, title: title || null }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
    summary.replaceChildren(
      j.spawned_tasks
        ? h('div', { class: 'card', id: 'spawned', title: `${num(j.spawned_tasks)} of them spawned by its tasks: expected_tasks grows as they spawn` },
          h('div', { class: 'label' }, 'Expected'), h('div', { class: 'value' }, num(j.expected_tasks)),
          h('div', { class: 'label' }, `${num(j.spawned_tasks)} spawned`))
        : card('Expected', num(j.expected_tasks)),
      card('Completed', num(j.completed_tasks), 'ok-text'),
      card('Failed', num(j.failed_tasks), j.failed_tasks ? 'bad-text' : ''),
      card(isOpen(j.state) ? 'Pending' : 'Unfinished', num(j.pending_tasks)),
      card('Finished', `${j.expected_tasks ? Math.floor((100 * done) / j.expected_tasks) : 100}%`, '',
        'completed and failed tasks, of the expected ones'),
      card('Rate', rate(j.rate), '', 'finished tasks per second, from the first task\'s start to the latest finish (to the close once closed)'),
      card('Created', ago(j.created_at)),
      card('Ran for', j.started_at ? duration(end - Date.parse(j.started_at)) : '–', '', 'since the first task started'),
      card('Closed', j.finished_at ? timeEl(j.finished_at) : '–'));
    progress.replaceChildren(progressBar(j, true));
    // An open job whose work queue has no consumer, or no live worker
    // serving its type, says so (waiting).
    const waitedFor = j.waiting ? duration(Date.now() - Date.parse(j.waiting.since)) : '';
    const waitingText = {
      paused: () => `Paused for ${waitedFor}: no new task starts until the job is resumed; tasks that were running finish.`,
      queue_paused: () => `Its work queue ${j.waiting.queue} is paused (for ${waitedFor}): no new task starts until the queue is resumed (warren resume --queue ${j.waiting.queue}).`,
      no_worker_for_type: () => `No live worker serves type ${j.waiting.type} on queue ${j.waiting.queue} (for ${waitedFor}): its tasks wait for one, and fail unknown_type after the task timeout.`,
    };
    const waiting = !isOpen(j.state) || !j.waiting ? ''
      : (waitingText[j.waiting.reason] || (() => `No consumer on queue ${j.waiting.queue} for ${waitedFor}: is a worker running with this prefix and this queue?`))();
    jobError.textContent = j.error || waiting;
    jobError.hidden = !j.error && !waiting;
    // A pause is said in the waiting colour, not as an error.
    jobError.className = !j.error && j.waiting && (j.waiting.reason === 'paused' || j.waiting.reason === 'queue_paused') ? 'warn-text' : 'bad-text';
    renderActions();
    renderDetails();
    if (j.state === 'completed' && j.result_url && !resultShown) {
      resultShown = true;
      loadResult();
    }
    if (wasOpen && !isOpen(j.state)) {
      if (stopPoll) stopPoll();
      stopPoll = null;
      live.textContent = 'closed';
      loadSlow();
    }
  }

  // The buttons are rebuilt only when what they would say changes: a
  // button replaced on every poll loses focus and hover, and a click that
  // lands while it is replaced is lost.
  let actionsKey = '';
  function renderActions() {
    const j = job;
    const key = [can('write'), j.state, j.paused, j.failed_tasks].join('|');
    if (key === actionsKey) return;
    actionsKey = key;
    const buttons = [];
    if (can('write') && isOpen(j.state)) {
      buttons.push(j.paused
        ? h('button', { type: 'button', id: 'action-resume', class: 'primary', onclick: resume }, 'Resume')
        : h('button', { type: 'button', id: 'action-pause', onclick: pause }, 'Pause'));
      buttons.push(h('button', { type: 'button', id: 'action-cancel', class: 'danger', onclick: cancel }, 'Cancel job'));
    }
    if (can('write') && (j.state === 'failed' || (j.state === 'completed' && j.failed_tasks > 0))) {
      buttons.push(h('button', { type: 'button', id: 'action-redrive', class: 'primary', onclick: redrive }, `Redrive ${num(j.failed_tasks)} failed`));
    }
    if (can('write') && !isOpen(j.state)) {
      buttons.push(h('button', { type: 'button', id: 'action-delete', class: 'danger', onclick: remove }, 'Delete'));
    }
    actions.replaceChildren(...buttons);
  }

  function renderDetails() {
    const j = job;
    const row = (k, v) => [h('dt', null, k), h('dd', null, v)];
    const tolerance = [j.tolerated_failures != null ? `${num(j.tolerated_failures)} tasks` : null,
      j.tolerated_failure_percent ? `${j.tolerated_failure_percent}%` : null].filter(Boolean).join(' and ') || 'none';
    details.replaceChildren(h('h2', null, 'Policy and metadata'),
      h('dl', { class: 'kv' },
        row('Reduce', reduceText(j)), row('Queue', j.queue), row('Priority', String(j.priority)),
        row('Max retries', String(j.max_retries)), row('Tolerated failures', tolerance),
        row('Fail fast', j.fail_fast ? 'yes' : 'no'), row('Task timeout', duration(1000 * j.task_timeout)),
        row('Batch size', j.batch_size ? String(j.batch_size) : 'automatic'),
        row('Concurrency', j.max_concurrency ? 'at most ' + j.max_concurrency + ' tasks at once' : 'no cap'),
        row('Retention', j.retention != null ? duration(1000 * j.retention) : 'forever'),
        row('Expires', j.expires_at ? timeEl(j.expires_at) : '–'),
        j.webhook && j.webhook.url ? row('Webhook', h('span', { class: 'mono' }, j.webhook.url)) : null,
        // The chain of follow-up jobs (then): the job that started this
        // one, and the one this one started or will start.
        j.previous_job ? row('Previous job', jobLink(j.previous_job)) : null,
        j.next_job ? row('Next job', jobLink(j.next_job)) : null,
        !j.next_job && j.then ? row('Then', `${j.then.type}, once this job completes (${j.then.remaining} more in the chain)`) : null,
        row('Created', timeEl(j.created_at)), row('Started', timeEl(j.started_at)),
        row('Published', timeEl(j.published_at)), row('Last finish', timeEl(j.last_finished_at))),
      h('h3', null, 'Metadata'),
      j.metadata == null ? h('p', { class: 'muted' }, 'none') : h('pre', { class: 'json' }, JSON.stringify(j.metadata, null, 2)));
  }

  function jobLink(id) {
    return copyable(id, `/ui/jobs/${encodeURIComponent(id)}`);
  }

  async function act(what, fn) {
    clearNotice();
    try {
      const value = await fn();
      notify(what, 'ok');
      return { ok: true, value };
    } catch (err) {
      notify(err.message, 'error');
      return { ok: false };
    }
  }

  async function cancel() {
    if (!(await confirmAction('Cancel this job?', `Job ${id} stops: its unfinished tasks are cancelled, and it cannot run again.`, 'Cancel job'))) return;
    const r = await act('The job is cancelled.', () => post(`${base}/cancel`));
    if (r.ok) { show(r.value); loadSlow(); }
  }

  // Pause and resume take effect at once and are undone as easily: no
  // confirmation. The answer's warnings (the workers not told) are shown.
  async function pause() {
    const r = await act('The job is paused: no new task starts until you resume it; running tasks finish.', () => post(`${base}/pause`));
    if (r.ok) { show(r.value); warnOf(r.value); }
  }

  async function resume() {
    const r = await act('The job is resumed: its tasks run again.', () => post(`${base}/resume`));
    if (r.ok) { show(r.value); warnOf(r.value); }
  }

  function warnOf(answer) {
    if (answer.warnings && answer.warnings.length) notify(answer.warnings.join(' '), 'error');
  }

  async function redrive() {
    if (!(await confirmAction('Redrive this job?', `The ${num(job.failed_tasks)} failed tasks of job ${id} run again; the job reopens.`, 'Redrive'))) return;
    const r = await act('The job is redriven: its failed tasks run again.', () => post(`${base}/redrive`));
    if (r.ok) {
      resultShown = false;
      resultPanel.hidden = true;
      show(r.value);
      follow_();
    }
  }

  async function remove() {
    if (!(await confirmAction('Delete this job?', `Job ${id}, its tasks and its result are deleted for good.`, 'Delete'))) return;
    const r = await act(`Job ${id} is deleted.`, () => del(base));
    if (r.ok) {
      stopAll();
      navigate('/ui/jobs');
    }
  }

  async function loadJob() {
    try {
      show(await get(base, { signal: abort.signal }));
      return true;
    } catch (err) {
      if (abort.signal.aborted) return false;
      if (err instanceof ApiError && err.status === 404) {
        gone('This job does not exist (or was deleted).');
        return false;
      }
      live.textContent = `could not load: ${err.message}`;
      return true;
    }
  }

  function gone(text) {
    stopAll();
    root.replaceChildren(h('section', { class: 'panel' }, h('a', { href: '/ui/jobs', class: 'back' }, '← Jobs'),
      h('h1', null, 'Job ', h('span', { class: 'mono' }, id)), h('p', { class: 'muted', id: 'job-gone' }, text)));
  }

  // Deliveries are read once while the job is open (a redriven job's
  // earlier ones), then once it closed until none is pending.
  let deliveriesRead = false;

  async function loadSlow() {
    const deliveries = !deliveriesRead || (job && !isOpen(job.state)) ? loadDeliveries() : null;
    deliveriesRead = true;
    await Promise.all([loadTimeline(), failed.reload(), tasks.reload(), deliveries]);
    failedPanel.hidden = !(job && job.failed_tasks > 0) && failed.empty();
  }

  async function loadTimeline() {
    try {
      const t = await get(`${base}/timeline`, { signal: abort.signal });
      timelineBox.replaceChildren(timelineChart(t, job ? job.expected_tasks : 0));
    } catch (err) {
      if (!abort.signal.aborted) timelineBox.replaceChildren(h('p', { class: 'muted' }, `Timeline not available: ${err.message}`));
    }
  }

  async function loadDeliveries() {
    let out;
    try {
      out = await get(`${base}/deliveries`, { signal: abort.signal });
    } catch {
      deliveriesPanel.hidden = true; // 404: a server without webhooks
      return;
    }
    const t = table({ class: 'list', id: 'deliveries-table' },
      ['Delivery', 'Event', 'State', 'Attempts', 'Last status', 'Last error', 'Created', 'Next attempt', 'Delivered']);
    const rows = out.deliveries.map((d) => h('tr', null,
      h('td', null, copyable(d.id)), h('td', null, d.event), h('td', null, badge(d.state)),
      h('td', { class: 'num' }, num(d.attempts)), h('td', { class: 'num' }, d.last_status == null ? '–' : String(d.last_status)),
      h('td', { class: 'error-text' }, d.last_error || ''), h('td', null, ago(d.created_at)),
      h('td', null, timeEl(d.next_attempt_at)), h('td', null, timeEl(d.delivered_at))));
    t.tBodies[0].append(...(rows.length ? rows : [emptyRow(9, 'No delivery yet: the webhook is called when the job closes.')]));
    deliveriesPanel.replaceChildren(h('h2', null, 'Webhook deliveries'), h('div', { class: 'scroll' }, t));
    deliveriesPanel.hidden = !(rows.length || (job && job.webhook));
    if (job && !isOpen(job.state) && out.deliveries.some((d) => d.state === 'pending')) {
      setTimeout(() => { if (!abort.signal.aborted) loadDeliveries(); }, slowEvery);
    }
  }

  async function loadResult() {
    resultPanel.hidden = false;
    resultPanel.replaceChildren(h('h2', null, 'Result'), h('p', { class: 'muted' }, 'Loading…'));
    let resp;
    try {
      resp = await request('GET', `${base}/result`, { raw: true, signal: abort.signal });
    } catch (err) {
      resultPanel.replaceChildren(h('h2', null, 'Result'), h('p', { class: 'muted' }, err.message));
      return;
    }
    const size = Number(resp.headers.get('Content-Length')) || null;
    const reader = resp.body.getReader();
    const chunks = [];
    let got = 0;
    while (got < previewBytes) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      got += value.length;
    }
    reader.cancel().catch(() => {});
    const bytes = new Uint8Array(got);
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
    const complete = size != null ? got >= size : got < previewBytes;
    const text = new TextDecoder().decode(complete ? bytes : bytes.subarray(0, previewBytes));
    const download = h('button', {
      type: 'button', id: 'result-download',
      onclick: async () => {
        const r = await request('GET', `${base}/result`, { raw: true });
        const url = URL.createObjectURL(await r.blob());
        const a = h('a', { href: url, download: `${id}.json` });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      },
    }, 'Download');
    resultPanel.replaceChildren(
      h('div', { class: 'title-row' }, h('h2', null, 'Result'),
        h('div', { class: 'actions' },
          h('span', { class: 'muted small' }, size != null ? `${num(size)} bytes` : '', complete ? '' : ` (first ${num(previewBytes >> 10)} KB shown)`),
          download)),
      h('pre', { class: 'json', id: 'result-preview' }, complete ? pretty(text) : `${text}\n…`));
  }

  function stopAll() {
    abort.abort();
    if (stopPoll) stopPoll();
    if (stopSlow) stopSlow();
    stopPoll = stopSlow = null;
  }

  function startSlow() {
    if (stopSlow) return;
    let first = true;
    stopSlow = every(slowEvery, async () => {
      if (!first && job && !isOpen(job.state)) { stopSlow(); stopSlow = null; return; }
      first = false;
      await loadSlow();
    });
  }

  function poll() {
    if (stopPoll) return;
    live.textContent = 'polling every 2 s';
    stopPoll = every(2000, async () => {
      const ok = await loadJob();
      if (!ok || !isOpen(job.state)) {
        if (stopPoll) stopPoll();
        stopPoll = null;
        live.textContent = ok ? 'closed' : '';
      }
    });
  }

  // follow_ follows the job's events while it is open; on a server
  // without the events route, or when the stream breaks, it polls.
  async function follow_() {
    startSlow();
    if (!job || !isOpen(job.state)) { live.textContent = ''; return; }
    live.textContent = 'live';
    let closed = false;
    try {
      await follow(`${base}/events`, (event, data) => {
        if (event === 'deleted') { closed = true; gone('This job was deleted.'); return; }
        if (event !== 'progress' && event !== 'closed') return;
        show(JSON.parse(data));
        if (event === 'closed') { closed = true; live.textContent = 'closed'; }
      }, abort.signal);
    } catch (err) {
      if (abort.signal.aborted) return;
    }
    if (!closed && !abort.signal.aborted) poll();
  }

  (async () => {
    if (await loadJob()) follow_(); // follow_ loads the rest at once
  })();
  return stopAll;
}

// taskTable is a paged table of a job's tasks, with a state filter
// unless it lists only failed tasks.
function taskTable(base, { id, state, limit, failedOnly }) {
  const cursors = [''];
  let next = null;
  let current = state;
  let count = 0;
  const headers = failedOnly
    ? ['Task', 'Attempts', 'Worker', 'Finished', 'Error']
    : ['Task', 'State', 'Attempts', 'Worker', 'Queued', 'Started', 'Finished', 'Took', 'Result or error'];
  const t = table({ class: 'list', id: `${id}-table` }, headers);
  const prev = h('button', { type: 'button', disabled: true }, '← Previous');
  const nextButton = h('button', { type: 'button', disabled: true }, 'Next →');
  const info = h('span', { class: 'muted small' });
  prev.addEventListener('click', () => { cursors.pop(); reload(); });
  nextButton.addEventListener('click', () => { if (next) { cursors.push(next); reload(); } });
  const filter = failedOnly ? null : h('select', {
    'aria-label': 'task state', id: `${id}-state`,
    onchange: (e) => { current = e.target.value; cursors.length = 1; reload(); },
  }, h('option', { value: '' }, 'any state'), taskStates.map((x) => h('option', { value: x }, x)));

  async function reload() {
    const q = new URLSearchParams({ limit: String(limit) });
    if (current) q.set('state', current);
    if (cursors.at(-1)) q.set('cursor', cursors.at(-1));
    let page;
    try {
      page = await get(`${base}/tasks?${q}`);
    } catch (err) {
      info.textContent = `could not load: ${err.message}`;
      return;
    }
    next = page.next_cursor;
    prev.disabled = cursors.length < 2;
    nextButton.disabled = !next;
    count = page.tasks.length;
    const rows = page.tasks.map((tk) => (failedOnly ? failedRow(base, tk) : taskRow(base, tk)));
    t.tBodies[0].replaceChildren(...(rows.length ? rows : [emptyRow(headers.length, failedOnly ? 'No failed task.' : 'No task in this state.')]));
    info.textContent = `page ${cursors.length}`;
  }

  const el = h('div', { id },
    filter && h('div', { class: 'filters' }, filter),
    h('div', { class: 'scroll' }, t), h('div', { class: 'pager' }, prev, nextButton, info));
  return { el, reload, empty: () => count === 0 };
}

// taskLink is a link to task tk's page, for the job of API path base.
function taskLink(base, tk, label) {
  return h('a', { href: `/ui${base.slice('/v1'.length)}/tasks/${tk.task_id}`, class: 'task-link' }, label || String(tk.task_id));
}

function failedRow(base, tk) {
  return h('tr', { 'data-task-id': tk.task_id },
    h('td', { class: 'num mono' }, taskLink(base, tk)), h('td', { class: 'num' }, num(tk.attempts)),
    h('td', { class: 'mono small' }, tk.worker || '–'), h('td', null, timeEl(tk.finished_at)),
    h('td', { class: 'error-text' }, clip(tk.error, 4000)));
}

function taskRow(base, tk) {
  const took = tk.started_at && tk.finished_at ? duration(Date.parse(tk.finished_at) - Date.parse(tk.started_at)) : '–';
  const detail = tk.state === 'completed' ? h('code', { class: 'result', title: clip(JSON.stringify(tk.result), 2000) }, clip(JSON.stringify(tk.result), 120))
    : h('span', { class: 'error-text', title: clip(tk.error, 2000) }, clip(tk.error, 160));
  return h('tr', { 'data-task-id': tk.task_id },
    h('td', { class: 'num mono', title: tk.task_id === 0 ? 'the reduce task' : null }, taskLink(base, tk, tk.task_id === 0 ? '0 (reduce)' : String(tk.task_id))), h('td', null, badge(tk.state)),
    h('td', { class: 'num' }, num(tk.attempts)), h('td', { class: 'mono small' }, tk.worker || '–'),
    h('td', null, timeEl(tk.queued_at)), h('td', null, timeEl(tk.started_at)), h('td', null, timeEl(tk.finished_at)),
    h('td', { class: 'num' }, took), h('td', null, detail));
}

// reduceText is a job's reducer: its name, or its reduce task's type and
// queue, with the reduce task's progress.
function reduceText(j) {
  if (typeof j.reduce === 'string') return j.reduce;
  const r = j.reduce || {};
  return `task ${r.task} on queue ${r.queue}${j.reduce_state ? ` (task 0: ${j.reduce_state})` : ''}`;
}

function clip(text, n) {
  if (!text) return '';
  return text.length > n ? `${text.slice(0, n)}…` : text;
}
