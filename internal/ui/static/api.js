// The API client: the bearer token (kept in sessionStorage), JSON
// requests, and server-sent events read with fetch() so that the token
// can go in a header (EventSource cannot send one).

const tokenKey = 'warren.token';

/** An error answer of the API: its status, code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** What GET /v1/auth said, and the token in use. */
export const auth = {
  required: false,
  scopes: [],
  token: sessionStorage.getItem(tokenKey) || '',
};

/** Keeps token for this browser tab; '' forgets it. */
export function setToken(token) {
  auth.token = token;
  auth.scopes = [];
  if (token) sessionStorage.setItem(tokenKey, token);
  else sessionStorage.removeItem(tokenKey);
}

/** Whether the token's scopes allow scope (read, write or admin). */
export function can(scope) {
  return auth.scopes.includes(scope);
}

let unauthorized = () => {};

/** Sets what to do when a request answers 401 (the token form). */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

/**
 * Sends a request and returns its JSON body (null for 204), or the
 * Response itself when opts.raw. A non-2xx answer throws an ApiError
 * with the API's error code and message; a 401 also calls the
 * onUnauthorized handler.
 */
export async function request(method, path, opts = {}) {
  const headers = new Headers();
  if (auth.token) headers.set('Authorization', `Bearer ${auth.token}`);
  if (opts.accept) headers.set('Accept', opts.accept);
  const init = { method, headers, signal: opts.signal, cache: 'no-store', credentials: 'omit' };
  if (opts.body !== undefined) {
    headers.set('Content-Type', 'application/json');
    init.body = JSON.stringify(opts.body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    let code = '';
    let message = `${resp.status} ${resp.statusText}`;
    try {
      const body = await resp.json();
      code = body.error.code;
      message = body.error.message;
    } catch {
      // not the API's JSON error: keep the status line
    }
    const err = new ApiError(resp.status, code, message);
    if (resp.status === 401 && path !== '/v1/auth') unauthorized(err);
    throw err;
  }
  if (opts.raw) return resp;
  if (resp.status === 204) return null;
  return resp.json();
}

export const get = (path, opts) => request('GET', path, opts);
export const post = (path, body, opts) => request('POST', path, { ...opts, body });
export const del = (path, opts) => request('DELETE', path, opts);

/** Asks GET /v1/auth what the token may do, and records it in auth. */
export async function loadAuth() {
  const info = await get('/v1/auth');
  auth.required = info.auth_required;
  auth.scopes = info.scopes;
  return info;
}

/**
 * Reads the server-sent events of path, calling onEvent(name, data) for
 * each, until the stream ends (resolves) or fails (rejects; an ApiError
 * when the route answers non-2xx, a 404 on a server without it).
 */
export async function follow(path, onEvent, signal) {
  const resp = await request('GET', path, { signal, raw: true, accept: 'text/event-stream' });
  if (!(resp.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
    throw new ApiError(resp.status, 'not_a_stream', 'the events route did not answer with a stream');
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = 'message';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      let line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length) onEvent(event, data.join('\n'));
        event = 'message';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment: keepalive
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'event') event = val;
      else if (field === 'data') data.push(val);
    }
  }
}
