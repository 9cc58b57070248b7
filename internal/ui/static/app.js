// The dashboard's entry point: the token gate, the header, and a small
// router over the history API (every /ui/ path serves this same page).

import { ApiError, auth, can, loadAuth, onUnauthorized, setToken } from './api.js';
import { clearNotice, h } from './dom.js';
import { jobsPage } from './jobs.js';
import { jobPage } from './job.js';
import { taskPage } from './task.js';
import { deadLettersPage } from './deadletters.js';
import { queuesPage } from './queues.js';

const routes = [
  [/^\/ui\/(jobs\/?)?$/, 'jobs', jobsPage],
  [/^\/ui\/jobs\/([^/]+)$/, 'jobs', jobPage],
  [/^\/ui\/jobs\/([^/]+)\/tasks\/(\d+)$/, 'jobs', taskPage],
  [/^\/ui\/deadletters\/?$/, 'deadletters', deadLettersPage],
  [/^\/ui\/queues\/?$/, 'queues', queuesPage],
];

const main = document.getElementById('main');
let stopPage = null;
let authorized = false;

/** Goes to url (a /ui/ path) without reloading the page. */
export function navigate(url, replace = false) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
}

function render() {
  if (stopPage) stopPage();
  stopPage = null;
  main.replaceChildren();
  renderSession();
  if (!authorized) {
    tokenForm('');
    return;
  }
  const path = location.pathname;
  for (const [re, section, page] of routes) {
    const m = path.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.section === section);
    }
    stopPage = page(main, { params: m.slice(1), query: new URLSearchParams(location.search), navigate });
    return;
  }
  main.append(h('section', { class: 'panel' }, h('h1', null, 'Not found'),
    h('p', null, 'There is no such page. '), h('a', { href: '/ui/jobs' }, 'See the jobs')));
}

function renderSession() {
  const box = document.getElementById('session');
  const parts = [];
  if (authorized) {
    const scopes = auth.scopes.filter((x) => x !== 'read');
    parts.push(h('span', { class: 'scopes', title: `scopes: ${auth.scopes.join(', ')}` },
      auth.required ? (scopes.length ? `token: ${auth.scopes.at(-1)}` : 'token: read only') : 'no tokens: full access'));
  }
  if (auth.required && auth.token) {
    parts.push(h('button', { type: 'button', id: 'sign-out', class: 'link', onclick: signOut }, 'Sign out'));
  }
  box.replaceChildren(...parts);
}

function signOut() {
  setToken('');
  authorized = false;
  clearNotice();
  render();
}

function tokenForm(message) {
  const input = h('input', {
    id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true,
    placeholder: 'API token', 'aria-label': 'API token', size: 40,
  });
  const error = h('p', { class: 'error', id: 'token-error' }, message);
  const form = h('form', {
    id: 'token-form', class: 'panel narrow',
    onsubmit: async (e) => {
      e.preventDefault();
      setToken(input.value.trim());
      await start(true);
    },
  },
  h('h1', null, 'Sign in'),
  h('p', null, 'This warren server wants an API token (WARREN_API_TOKENS). ',
    'It is kept in this browser tab only, and sent as a bearer token.'),
  h('div', { class: 'row' }, input, h('button', { type: 'submit', class: 'primary' }, 'Sign in')),
  error);
  main.replaceChildren(form);
  input.focus();
}

/** Asks the server what the token may do, then shows the page or the form. */
async function start(fromForm = false) {
  try {
    await loadAuth();
  } catch (err) {
    authorized = false;
    if (err instanceof ApiError && err.status === 401) {
      setToken('');
      renderSession();
      tokenForm(fromForm ? 'The server does not know this token.' : 'Your token is no longer accepted: sign in again.');
      return;
    }
    main.replaceChildren(h('section', { class: 'panel' }, h('h1', null, 'The server does not answer'),
      h('p', { class: 'error' }, String(err.message || err)), h('button', { type: 'button', onclick: () => start() }, 'Retry')));
    return;
  }
  authorized = !auth.required || can('read');
  if (!authorized && auth.token) {
    setToken('');
  }
  render();
}

onUnauthorized(() => {
  if (!authorized) return;
  authorized = false;
  setToken('');
  if (stopPage) stopPage();
  stopPage = null;
  renderSession();
  tokenForm('The server refused the token (401): sign in again.');
});

document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || a.origin !== location.origin || !a.pathname.startsWith('/ui/') || a.target || a.hasAttribute('download')) return;
  if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  clearNotice();
  navigate(a.pathname + a.search);
});
window.addEventListener('popstate', render);

start();
