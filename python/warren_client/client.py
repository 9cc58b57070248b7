"""Client: warren's HTTP API (v1) from Python, on the standard library."""

import datetime
import http.client
import json
import os
import random
import socket
import ssl
import time
import urllib.parse
from collections.abc import Mapping

from ._config import Endpoint, resolve_server, resolve_token
from ._errors import ConnectionFailed, NotFound, ServerError, WaitTimeout, WarrenError, error_from_answer
from ._records import Job, Task
from ._sse import EventReader

__all__ = ["Client", "DEFAULT_TIMEOUT"]

USER_AGENT = "warren-client-python/0.1.0"

# DEFAULT_TIMEOUT is how long, in seconds, one network operation of a
# request (connecting, one send, one read) may take: the Go client's 30 s.
DEFAULT_TIMEOUT = 30.0

# A submission's body goes out in chunks of about this many bytes.
_CHUNK_BYTES = 64 << 10

# The most of an error answer's body read.
_MAX_ERROR_BODY = 64 << 10

# wait's event stream, as the Go client's Watch: the server sends the job at
# once, so a stream silent for longer than _FIRST_EVENT is held back by a
# buffering proxy, and wait polls instead; the server sends a keepalive every
# 15 s, so a stream silent for _IDLE is dead.
_FIRST_EVENT = 10.0
_IDLE = 45.0

# wait's polling interval grows by half each poll, from _POLL_MIN to _POLL_MAX, with jitter.
_POLL_MIN = 0.05
_POLL_MAX = 2.0

# How one event stream of wait ended.
_CLOSED, _CUT, _UNSUPPORTED = "closed", "cut", "unsupported"

# submit's first parameter is named type, as the API's field.
_builtin_type = type


def _dumps(value):
    # Compact, UTF-8, and never NaN or Infinity, which are not JSON.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _rfc3339(t):
    """t (None, an RFC 3339 string, or a datetime, naive meaning UTC) as the API's time parameters take it."""
    if t is None or isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.isoformat()


def _raw_id(job):
    """The id of job, a job id or a Job."""
    if isinstance(job, Job):
        job = job.raw.get("id")
    if not isinstance(job, str) or not job:
        raise TypeError("warren_client: a job id must be a non-empty string (or a Job), got %r" % (job,))
    return job


def _job_id(job):
    """The id of job, a job id or a Job, as a path segment."""
    return urllib.parse.quote(_raw_id(job), safe="")


class _NDJSONBody:
    """A submission's NDJSON body: the spec line alone, then the task lines, in chunks of about 64 KiB.

    Tasks are read from their iterator as the body is sent, so a generator of
    a million payloads never sits in memory. ``failure`` keeps an exception
    the tasks raised, so that it is not taken for a connection failure.
    """

    def __init__(self, head, tasks):
        self.head = head + b"\n"
        self.tasks = tasks
        self.failure = None

    def __iter__(self):
        # The spec goes out first, alone: a job the server refuses is
        # answered before the tasks are sent.
        yield self.head
        buf = bytearray()
        n = 0
        while True:
            try:
                task = next(self.tasks)
            except StopIteration:
                break
            except BaseException as e:
                self.failure = e
                raise
            n += 1
            try:
                buf += _dumps(task)
            except (TypeError, ValueError) as e:
                self.failure = TypeError("warren_client: submit: task %d is not a JSON value: %s" % (n, e))
                raise self.failure from None
            buf += b"\n"
            if len(buf) >= _CHUNK_BYTES:
                yield bytes(buf)
                buf.clear()
        if buf:
            yield bytes(buf)


class _Waiting:
    """One call of wait: its job, deadline, callback and the job as last read."""

    def __init__(self, job_id, timeout, on_progress):
        self.job_id = job_id
        self.path_id = urllib.parse.quote(job_id, safe="")
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.on_progress = on_progress
        self.job = None

    def seen(self, job):
        self.job = job
        if self.on_progress is not None:
            self.on_progress(job)

    def bounded(self, seconds):
        """seconds, or less when the deadline is nearer (never 0, which a socket reads as non-blocking)."""
        if self.deadline is None:
            return seconds
        return max(0.001, min(seconds, self.deadline - time.monotonic()))

    def check(self):
        """Raise WaitTimeout once the deadline has passed."""
        if self.deadline is None or time.monotonic() < self.deadline:
            return
        last = "never read"
        if self.job is not None and "expected_tasks" in self.job:
            last = "%s, %s of %s tasks completed, %s failed" % (
                self.job.state, self.job.completed_tasks, self.job.expected_tasks, self.job.failed_tasks)
        raise WaitTimeout("job %s did not close within %g s (last seen: %s)" % (self.job_id, self.timeout, last),
                          self.job)

    def sleep(self, seconds):
        if self.deadline is not None:
            seconds = min(seconds, max(0.0, self.deadline - time.monotonic()))
        time.sleep(seconds)


class Client:
    """A client of one warren server's HTTP API (v1). Safe to use from many threads.

    ``base_url`` defaults to ``WARREN_SERVER``; without it, to
    ``http://`` and the address of ``WARREN_LISTEN`` (a wildcard host read
    as 127.0.0.1); without either, ``http://127.0.0.1:8080``, as the
    ``warren`` client commands. A URL without a scheme is ``http://``; one
    with ``user:pass@`` sends them as Basic authorization when there is no
    token (as Go's HTTP client does). ``token`` defaults to ``WARREN_TOKEN``,
    then to the first token of ``WARREN_API_TOKENS``, and is sent as
    ``Authorization: Bearer <token>``. ``ca_cert`` (default
    ``WARREN_CA_CERT``) is a PEM file of the certificate authorities to
    trust for an ``https://`` server instead of the system's. ``timeout``
    bounds each network operation (connecting, one send, one read), in
    seconds.
    """

    def __init__(self, base_url=None, token=None, *, timeout=DEFAULT_TIMEOUT, ca_cert=None):
        url, source = resolve_server(base_url)
        self._endpoint = Endpoint(url, source)
        self._token = resolve_token(token)
        if self._token is not None and (not isinstance(self._token, str) or any(c in self._token for c in " \t\r\n")):
            raise ValueError("warren_client: the token must be a string without white space")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError("warren_client: timeout must be a number of seconds > 0, got %r" % (timeout,))
        self.timeout = float(timeout)
        self._ssl = None
        if self._endpoint.scheme == "https":
            cafile = ca_cert if ca_cert is not None else (os.environ.get("WARREN_CA_CERT", "").strip() or None)
            self._ssl = ssl.create_default_context(cafile=cafile)
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2

    @property
    def base_url(self):
        """The server's base URL, without its password."""
        return self._endpoint.url

    def __repr__(self):
        return "Client(%r)" % self.base_url

    # -- jobs ----------------------------------------------------------------

    def submit(self, type, tasks, *, idempotency_key=None, **options):
        """Submit a job of type whose tasks are the JSON values of tasks, and return it (a Job).

        ``tasks`` is any iterable (a list, a generator, a file's lines
        decoded...): it is streamed to ``POST /v1/jobs`` as NDJSON, with
        chunked transfer encoding, as it is read. ``options`` are the job's
        fields of the API, sent as given (None leaves one out): ``reduce``
        (a built-in reducer's name, or an object such as ``{"task": "TYPE"}``
        where the server has reduce tasks), ``max_retries``,
        ``tolerated_failures``, ``tolerated_failure_percent``,
        ``fail_fast``, ``task_timeout``, ``batch_size``, ``priority``,
        ``max_concurrency``, ``queue``, ``retention``, ``metadata``, ``webhook``, ``then``; a name
        the server does not know is its 400 ``unknown_field``. ``then`` is
        the follow-up job, a dict of the same options (its own ``then``
        continuing the chain, at most 10 jobs in all) and its ``type``,
        without tasks: the server creates it when this job completes, with
        one task per element of this job's result, a JSON array; the job's
        ``next_job`` then names it, and its ``previous_job`` this one.
        ``idempotency_key`` is sent as the ``Idempotency-Key`` header:
        submitting with the same key again returns the same job.

        The returned Job holds the 202's fields (``id``, ``state``,
        ``status_url``). An exception the tasks' iterator raises, or a task
        that is not JSON (TypeError), ends the request unfinished: the
        server writes nothing.
        """
        if isinstance(tasks, (str, bytes, bytearray, Mapping)):
            raise TypeError("warren_client: submit: tasks must be an iterable of task payloads (a list, a generator), "
                            "not a %s" % (_builtin_type(tasks).__name__,))
        try:
            it = iter(tasks)
        except TypeError:
            raise TypeError("warren_client: submit: tasks must be an iterable of task payloads, got %s"
                            % (_builtin_type(tasks).__name__,)) from None
        if "tasks" in options:
            raise TypeError("warren_client: submit: the tasks are the second argument, not an option")
        spec = {"type": type}
        spec.update((k, v) for k, v in options.items() if v is not None)
        try:
            head = _dumps(spec)
        except (TypeError, ValueError) as e:
            raise TypeError("warren_client: submit: the job's options are not JSON: %s" % e) from None
        headers = {"Content-Type": "application/x-ndjson"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return Job(self._json("POST", "/v1/jobs", body=_NDJSONBody(head, it), headers=headers))

    def get(self, job_id):
        """The job as it is now (a Job); NotFound when there is no such job."""
        return Job(self._json("GET", "/v1/jobs/" + _job_id(job_id)))

    def result(self, job_id):
        """A completed job's reduced result, as a JSON value.

        Conflict while the job is open, and when it failed or was cancelled.
        """
        return self._decode(self._call("GET", "/v1/jobs/%s/result" % _job_id(job_id)), "the result")

    def tasks(self, job_id, state=None, page_size=None):
        """An iterator of the job's tasks (Task), in task id order, page by page.

        ``state`` keeps only tasks in that state (pending, queued,
        completed, failed, cancelled); ``page_size`` is the tasks read per
        request (1 to 1000, default the server's). The first page is read
        now, so that an unknown job is NotFound here; the next ones as the
        iterator reaches them.
        """
        path = "/v1/jobs/%s/tasks" % _job_id(job_id)
        query = {}
        if state is not None:
            query["state"] = state
        if page_size is not None:
            query["limit"] = page_size
        page = self._page(path, query)
        return self._pages(path, query, page)

    def list(self, *, state=None, type=None, queue=None, search=None, created_after=None, created_before=None,
             page_size=None):
        """An iterator of jobs (Job), newest first, page by page (``GET /v1/jobs``).

        ``state``, ``type`` and ``queue`` keep only the jobs in that state,
        of that type, of that work queue (exactly; "default" for the jobs
        that name none). ``search`` keeps the jobs whose id starts with it,
        or that hold it, ignoring case, in their type, queue, a metadata
        value, their error or a task's error (3 to 200 bytes: the API's
        ``q``). ``created_after`` and ``created_before`` (datetime, a naive
        one taken as UTC, or an RFC 3339 string) keep the jobs created at or
        after, and before, them. ``page_size`` is the jobs read per request
        (1 to 1000, default the server's). The first page is read now, so
        that a bad filter is a WarrenError (code "invalid_parameter") here.
        """
        query = {}
        for name, value in (("state", state), ("type", type), ("queue", queue), ("q", search),
                            ("created_after", _rfc3339(created_after)), ("created_before", _rfc3339(created_before)),
                            ("limit", page_size)):
            if value is not None:
                query[name] = value
        page = self._page("/v1/jobs", query)
        return self._pages("/v1/jobs", query, page, "jobs", Job)

    def _page(self, path, query):
        return self._json("GET", path + ("?" + urllib.parse.urlencode(query) if query else ""))

    def _pages(self, path, query, page, key="tasks", record=Task):
        while True:
            for t in page.get(key) or ():
                yield record(t)
            cursor = page.get("next_cursor")
            if not cursor:
                return
            page = self._page(path, dict(query, cursor=cursor))

    def cancel(self, job_id):
        """Cancel an open job; return it, cancelled. Conflict when it is already closed."""
        return Job(self._json("POST", "/v1/jobs/%s/cancel" % _job_id(job_id)))

    def redrive(self, job_id):
        """Requeue the failed tasks of a closed job; return it, running again.

        The job is failed, or completed with tolerated failures; Conflict
        when it is open, cancelled or has no failed task. The API's redrive
        takes no body: every failed task goes back.
        """
        return Job(self._json("POST", "/v1/jobs/%s/redrive" % _job_id(job_id)))

    def delete(self, job_id):
        """Delete a closed job now, with its tasks and result. Conflict when it is open (cancel it first)."""
        self._call("DELETE", "/v1/jobs/" + _job_id(job_id))

    # -- waiting ---------------------------------------------------------------

    def wait(self, job_id, timeout=None, *, on_progress=None, events=True):
        """Wait for the job to close and return it as it closed (a Job whose ``closed`` is true).

        It follows the job's server-sent events (``GET /v1/jobs/{id}/events``)
        until the closed event. A stream cut before the close is opened
        again once; when that fails too, or the server has no event stream,
        or a proxy holds the events back, it polls ``GET /v1/jobs/{id}``
        instead, every 50 ms growing to 2 s. ``events=False`` polls from the
        start. Connection failures and 5xx answers are retried until the
        timeout; other API errors end the wait: NotFound for an unknown job,
        or one deleted meanwhile. ``timeout`` (seconds, None: forever) ends
        it with WaitTimeout (a TimeoutError), whose ``job`` is the job as
        last read. ``on_progress(job)`` is called with the job at each event
        or poll, the closed job last.
        """
        w = _Waiting(_raw_id(job_id), timeout, on_progress)
        cuts = 0
        while events:
            end, seen = self._follow(w)
            if end == _CLOSED:
                return w.job
            if end == _UNSUPPORTED:
                break
            # Cut: open it again, unless the last attempt was cut too
            # without an event; then poll.
            if seen:
                cuts = 0
            cuts += 1
            if cuts > 1:
                break
            w.check()
            w.sleep(0.1)
        return self._poll(w)

    def _follow(self, w):
        """Read one event stream of w's job: how it ended (_CLOSED, _CUT, _UNSUPPORTED) and how many jobs it gave."""
        conn = self._open(w.bounded(_FIRST_EVENT))
        try:
            try:
                conn.connect()
                sock = conn.sock
                conn.request("GET", self._endpoint.path + "/v1/jobs/%s/events" % w.path_id,
                             headers=self._headers({"Accept": "text/event-stream", "Cache-Control": "no-cache"}))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException):
                w.check()
                return _CUT, 0
            if resp.status != 200:
                return self._refused(w, resp), 0
            media = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
            if media != "text/event-stream":
                return _UNSUPPORTED, 0
            reader = EventReader(resp.readline)
            seen = 0
            while True:
                sock.settimeout(w.bounded(_IDLE if seen else _FIRST_EVENT))
                try:
                    ev = reader.next()
                except socket.timeout:  # before OSError: on Python 3.9 it is one
                    w.check()
                    return (_CUT if seen else _UNSUPPORTED), seen
                except (OSError, http.client.HTTPException, ValueError):
                    return _CUT, seen
                if ev is None:
                    return _CUT, seen
                if ev.event in ("progress", "closed"):
                    try:
                        job = Job(json.loads(ev.data))
                    except (ValueError, TypeError):
                        return _UNSUPPORTED, seen
                    seen += 1
                    w.seen(job)
                    if ev.event == "closed":
                        return _CLOSED, seen
                elif ev.event == "deleted":
                    raise NotFound("not_found", "job %s was deleted" % w.job_id, 404)
                # Other events are for newer clients.
        finally:
            conn.close()

    def _refused(self, w, resp):
        """How wait goes on when the server answered the stream's request with another status than 200."""
        data = resp.read(_MAX_ERROR_BODY)
        if resp.status < 400:
            return _UNSUPPORTED
        if resp.status in (404, 405):
            # An unknown job, or a server without event streams: ask.
            try:
                self.get(w.job_id)
            except (ConnectionFailed, ServerError):
                return _CUT
            return _UNSUPPORTED
        if resp.status >= 500:
            return _CUT  # busy, shutting down, or its store is down
        raise error_from_answer(resp.status, resp.reason, data)

    def _poll(self, w):
        interval = _POLL_MIN
        while True:
            try:
                job = Job(self._json("GET", "/v1/jobs/" + w.path_id, timeout=w.bounded(self.timeout)))
            except (ConnectionFailed, ServerError):
                pass
            else:
                w.seen(job)
                if job.closed:
                    return job
            w.check()
            # Jitter keeps many waiters from polling in step.
            w.sleep(interval / 2 + random.uniform(0, interval / 2))
            interval = min(interval * 1.5, _POLL_MAX)

    # -- HTTP ------------------------------------------------------------------

    def _open(self, timeout):
        e = self._endpoint
        if e.scheme == "https":
            return http.client.HTTPSConnection(e.host, e.port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(e.host, e.port, timeout=timeout)

    def _headers(self, extra=None):
        h = {"Accept": "application/json", "User-Agent": USER_AGENT}
        auth = "Bearer " + self._token if self._token else self._endpoint.basic
        if auth:
            h["Authorization"] = auth
        if extra:
            h.update(extra)
        return h

    def _call(self, method, path, body=None, headers=None, timeout=None):
        """Send a request; return the body of a 2xx answer, raise the API's error for any other."""
        conn = self._open(self.timeout if timeout is None else timeout)
        try:
            resp = self._exchange(conn, method, self._endpoint.path + path, body, self._headers(headers))
            status = resp.status
            data = resp.read(_MAX_ERROR_BODY if status >= 400 else None)
        except (OSError, http.client.HTTPException) as e:
            if e is getattr(body, "failure", None):
                raise  # the tasks' iterator's own error
            raise ConnectionFailed("cannot reach the warren server at %s: %s" % (self.base_url, _describe(e))) from e
        finally:
            conn.close()
        if status >= 400:
            raise error_from_answer(status, resp.reason, data)
        return data

    @staticmethod
    def _exchange(conn, method, path, body, headers):
        try:
            conn.request(method, path, body=body, headers=headers)
        except (OSError, http.client.HTTPException) as sent:
            if getattr(body, "failure", None) is not None or conn.sock is None:
                raise  # the tasks' iterator's own error, or no connection at all
            # The server may have answered before the body ended (a job it
            # refuses, a task over its limit) and closed the connection:
            # that answer says more than the broken pipe.
            try:
                return conn.getresponse()
            except (OSError, http.client.HTTPException):
                raise sent from None
        return conn.getresponse()

    def _json(self, method, path, body=None, headers=None, timeout=None):
        return self._decode(self._call(method, path, body, headers, timeout), "%s %s" % (method, path.split("?")[0]))

    @staticmethod
    def _decode(data, what):
        try:
            return json.loads(data)
        except ValueError:
            raise WarrenError("bad_response", "the answer to %s is not JSON: %r" % (what, data[:200])) from None


def _describe(e):
    text = str(e)
    return "%s: %s" % (_builtin_type(e).__name__, text) if text else _builtin_type(e).__name__
