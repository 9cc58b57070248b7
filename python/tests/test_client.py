"""warren_client: against a real warren server (with Python workers), and against small fakes."""

import base64
import datetime
import http.client
import http.server
import io
import json
import os
import random
import socketserver
import threading
import time
import unittest
from unittest import mock

from .harness import WarrenTestCase, free_port
from warren_client import (BadRequest, Client, Conflict, ConnectionFailed, Forbidden, Job, NotFound, ServerError,
                           Task, Unauthorized, ValidationFailed, WaitTimeout, WarrenError)
from warren_client._sse import EventReader
from warren_worker import Permanent


# -- fakes -------------------------------------------------------------------


class Proxy:
    """An HTTP proxy in front of the real server that records every request and may break its event streams.

    events: "forward" relays the stream; "cut" relays the first event of
    the first stream and then closes its connection, and closes every later
    stream before its first event (a server that went away); "missing"
    answers 404 as a server without event streams would. on_poll, when set, is called at
    every GET of a job (not of its events, tasks or result).
    """

    def __init__(self, upstream, events="forward", on_poll=None):
        self.upstream = upstream
        self.events = events
        self.on_poll = on_poll
        self.requests = []
        self.streams = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.handle(self)

            do_POST = do_DELETE = do_GET

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def paths(self, suffix=None):
        with self.lock:
            return [p for _, p in self.requests if suffix is None or p.split("?")[0].endswith(suffix)]

    def polls(self):
        with self.lock:
            return [p for m, p in self.requests if m == "GET" and p.count("/") == 3]

    def handle(self, h):
        with self.lock:
            self.requests.append((h.command, h.path))
            if h.path.endswith("/events"):
                self.streams += 1
            stream = self.streams
        if h.path.endswith("/events") and self.events == "missing":
            body = b'{"error":{"code":"not_found","message":"no route for GET ' + h.path.encode() + b'"}}'
            self.answer(h, 404, body)
            return
        if h.command == "GET" and h.path.count("/") == 3 and self.on_poll:
            self.on_poll()
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        headers = {k: v for k, v in h.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
        up = http.client.HTTPConnection("127.0.0.1", int(self.upstream.rsplit(":", 1)[1]), timeout=60)
        try:
            up.request(h.command, h.path, body=body, headers=headers)
            resp = up.getresponse()
            if not h.path.endswith("/events") or resp.status != 200:
                self.answer(h, resp.status, resp.read(), resp.getheader("Content-Type"))
                return
            h.send_response(200)
            h.send_header("Content-Type", resp.getheader("Content-Type"))
            h.send_header("Connection", "close")
            h.end_headers()
            for line in iter(resp.readline, b""):
                if self.events == "cut" and stream > 1:
                    break  # no event: the connection drops
                h.wfile.write(line)
                h.wfile.flush()
                if self.events == "cut" and line == b"\n":
                    break  # after the first event: the connection drops
            h.close_connection = True
        finally:
            up.close()

    @staticmethod
    def answer(h, status, body, content_type="application/json"):
        h.send_response(status)
        h.send_header("Content-Type", content_type or "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


class Recorder:
    """A fake server that records each request as it arrives (its chunked body decoded chunk by chunk) and answers."""

    def __init__(self, status=202, body=None, content_type="application/json"):
        self.status = status
        self.body = body if body is not None else b'{"id":"J1","state":"pending","status_url":"/v1/jobs/J1"}'
        self.content_type = content_type
        self.requests = []
        self.progress = threading.Condition()
        self.received = b""  # the body of the request being read, so far
        rec = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                rec.serve(self.rfile, self.wfile)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def wait_received(self, nbytes, timeout=10):
        with self.progress:
            return self.progress.wait_for(lambda: len(self.received) >= nbytes, timeout)

    def serve(self, rfile, wfile):
        try:
            self._serve(rfile, wfile)
        except (ValueError, OSError):
            pass  # a request cut short: not recorded

    def _serve(self, rfile, wfile):
        method, target, _ = rfile.readline().decode().split(" ", 2)
        headers = {}
        while True:
            line = rfile.readline().decode()
            if line in ("\r\n", "\n", ""):
                break
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        chunks = 0
        with self.progress:
            self.received = b""
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int(rfile.readline().split(b";")[0], 16)
                if size == 0:
                    rfile.readline()
                    break
                data = rfile.read(size)
                rfile.readline()
                chunks += 1
                with self.progress:
                    self.received += data
                    self.progress.notify_all()
        elif headers.get("content-length"):
            with self.progress:
                self.received = rfile.read(int(headers["content-length"]))
        self.requests.append({"method": method, "target": target, "headers": headers, "body": self.received,
                              "chunks": chunks})
        wfile.write(b"HTTP/1.1 %d Answer\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                    % (self.status, self.content_type.encode(), len(self.body)) + self.body)


# -- without a server -----------------------------------------------------------


WARREN_VARS = ("WARREN_SERVER", "WARREN_LISTEN", "WARREN_TOKEN", "WARREN_API_TOKENS", "WARREN_CA_CERT")


def clean_env(**env):
    """os.environ without the variables the client reads, plus env."""
    out = {k: v for k, v in os.environ.items() if k not in WARREN_VARS}
    out.update(env)
    return mock.patch.dict(os.environ, out, clear=True)


class ClientConfigTest(unittest.TestCase):

    def test_the_server_comes_from_the_parameter_then_the_variables_then_the_default(self):
        cases = [
            ({}, None, "http://127.0.0.1:8080"),
            ({"WARREN_LISTEN": ":9999"}, None, "http://127.0.0.1:9999"),
            ({"WARREN_LISTEN": "0.0.0.0:9001"}, None, "http://127.0.0.1:9001"),
            ({"WARREN_LISTEN": "[::]:9002"}, None, "http://127.0.0.1:9002"),
            ({"WARREN_LISTEN": "10.1.2.3:9003"}, None, "http://10.1.2.3:9003"),
            ({"WARREN_SERVER": "warren.example:81", "WARREN_LISTEN": ":9999"}, None, "http://warren.example:81"),
            ({"WARREN_SERVER": "https://warren.example/api/"}, None, "https://warren.example/api"),
            ({"WARREN_SERVER": "http://a.example"}, "http://b.example:82", "http://b.example:82"),
            ({"WARREN_SERVER": "  "}, None, "http://127.0.0.1:8080"),
        ]
        for env, param, want in cases:
            with self.subTest(env=env, param=param), clean_env(**env):
                self.assertEqual(want, Client(param).base_url)

    def test_a_bad_server_url_is_refused_without_its_password(self):
        for url in ("ftp://u:hunter2@files.example", "http://u:hunter2@/", "http://u:hunter2@h.example/?q=1"):
            with self.subTest(url=url), clean_env(WARREN_SERVER=url):
                with self.assertRaises(ValueError) as cm:
                    Client()
                self.assertIn("WARREN_SERVER", str(cm.exception))
                self.assertNotIn("hunter2", str(cm.exception))

    def test_the_token_comes_from_the_parameter_then_warren_token_then_the_first_server_token(self):
        rec = Recorder(200, b'{"id":"J1","state":"running"}')
        self.addCleanup(rec.close)
        cases = [
            ({}, None, None),
            ({"WARREN_API_TOKENS": "a:b:read+write, c:admin"}, None, "Bearer a:b"),
            ({"WARREN_API_TOKENS": "a:read", "WARREN_TOKEN": "t1"}, None, "Bearer t1"),
            ({"WARREN_TOKEN": "t1"}, "t2", "Bearer t2"),
            ({"WARREN_TOKEN": "t1"}, "", None),
        ]
        for env, token, want in cases:
            with self.subTest(env=env, token=token), clean_env(**env):
                Client(rec.base, token).get("J1")
                self.assertEqual(want, rec.requests[-1]["headers"].get("authorization"))

    def test_user_information_in_the_url_is_basic_authorization_unless_there_is_a_token(self):
        rec = Recorder(200, b'{"id":"J1","state":"running"}')
        self.addCleanup(rec.close)
        url = rec.base.replace("http://", "http://ops:p%40ss@")
        with clean_env():
            c = Client(url)
            self.assertEqual(rec.base.replace("http://", "http://ops:xxxxx@"), c.base_url)
            self.assertNotIn("p%40ss", repr(c))
            c.get("J1")
            self.assertEqual("Basic " + base64.b64encode(b"ops:p@ss").decode(),
                             rec.requests[-1]["headers"]["authorization"])
            Client(url, "tok").get("J1")
            self.assertEqual("Bearer tok", rec.requests[-1]["headers"]["authorization"])

    def test_a_connection_failure_names_the_server_without_its_password(self):
        with clean_env():
            c = Client("http://ops:hunter2@127.0.0.1:%d" % free_port(), timeout=5)
        with self.assertRaises(ConnectionFailed) as cm:
            c.get("J1")
        e = cm.exception
        self.assertIsInstance(e, ConnectionError)
        self.assertEqual(("connection_failed", None), (e.code, e.status))
        self.assertIn("cannot reach the warren server at http://ops:xxxxx@127.0.0.1:", str(e))
        self.assertNotIn("hunter2", str(e))
        # wait retries until its timeout.
        with self.assertRaises(WaitTimeout) as cm:
            c.wait("J1", timeout=0.3)
        self.assertIsNone(cm.exception.job)
        self.assertIn("last seen: never read", str(cm.exception))

    def test_a_job_deleted_while_waited_for_is_not_found(self):
        rec = Recorder(200, b'event: deleted\ndata: {"id":"J1"}\n\n', "text/event-stream")
        self.addCleanup(rec.close)
        with self.assertRaises(NotFound) as cm:
            Client(rec.base, "").wait("J1", timeout=10)
        self.assertEqual(("not_found", 404, "job J1 was deleted"), (cm.exception.code, cm.exception.status,
                                                                     cm.exception.message))
        self.assertEqual(["/v1/jobs/J1/events"], [r["target"] for r in rec.requests])

    def test_an_answer_that_is_not_the_apis_is_an_http_error(self):
        rec = Recorder(502, b"<html>bad gateway</html>", "text/html")
        self.addCleanup(rec.close)
        with self.assertRaises(ServerError) as cm:
            Client(rec.base, "").get("J1")
        self.assertEqual(("http_error", 502), (cm.exception.code, cm.exception.status))
        self.assertIn("bad gateway", cm.exception.message)


class SubmitStreamTest(unittest.TestCase):
    """What submit sends, seen by a fake server."""

    def setUp(self):
        self.rec = Recorder()
        self.addCleanup(self.rec.close)
        self.client = Client(self.rec.base, "tok")

    def test_tasks_stream_as_ndjson_in_chunks_while_the_generator_runs(self):
        payload = "x" * 1000
        streamed = []

        def tasks():
            for i in range(300):
                yield {"i": i, "pad": payload}
            # ~300 KB so far, over the client's 64 KiB chunks: the server
            # must have some of it before the generator goes on.
            streamed.append(self.rec.wait_received(100_000))
            for i in range(300, 600):
                yield {"i": i, "pad": payload}

        reduce_task = {"task": "sum_results", "queue": "reducers", "payload": {"scale": 2}}
        job = self.client.submit("square", tasks(), reduce=reduce_task, max_retries=2, fail_fast=True,
                                 metadata={"run": "é"}, queue=None, idempotency_key="k-1")
        self.assertEqual([True], streamed, "the body was not sent while the tasks were read")
        self.assertIsInstance(job, Job)
        self.assertEqual(("J1", "pending", "/v1/jobs/J1"), (job.id, job.state, job.status_url))
        (req,) = self.rec.requests
        h = req["headers"]
        self.assertEqual(("POST", "/v1/jobs"), (req["method"], req["target"]))
        self.assertEqual("chunked", h.get("transfer-encoding"))
        self.assertNotIn("content-length", h)
        self.assertEqual("application/x-ndjson", h["content-type"])
        self.assertEqual("k-1", h["idempotency-key"])
        self.assertEqual("Bearer tok", h["authorization"])
        self.assertGreater(req["chunks"], 4)
        lines = req["body"].decode().split("\n")
        self.assertEqual("", lines.pop(), "the body ends with a newline")
        self.assertEqual({"type": "square", "reduce": reduce_task, "max_retries": 2, "fail_fast": True,
                          "metadata": {"run": "é"}}, json.loads(lines[0]), "None options are left out")
        self.assertEqual([{"i": i, "pad": payload} for i in range(600)], [json.loads(l) for l in lines[1:]])

    def test_an_error_of_the_tasks_iterator_ends_the_submission_as_itself(self):
        def tasks():
            yield 1
            raise OSError("the input file went away")

        with self.assertRaises(OSError) as cm:
            self.client.submit("square", tasks())
        self.assertNotIsInstance(cm.exception, ConnectionFailed)
        self.assertEqual("the input file went away", str(cm.exception))

        with self.assertRaises(TypeError) as cm:
            self.client.submit("square", [1, object()])
        self.assertIn("task 2 is not a JSON value", str(cm.exception))
        with self.assertRaises(TypeError):
            self.client.submit("square", [float("nan")])
        self.assertEqual([], self.rec.requests, "no submission was completed")

    def test_tasks_must_be_an_iterable_of_payloads(self):
        for tasks in ("abc", b"abc", {"a": 1}, 42):
            with self.subTest(tasks=tasks), self.assertRaises(TypeError):
                self.client.submit("square", tasks)
        self.assertEqual([], self.rec.requests)


class EventReaderTest(unittest.TestCase):

    def events(self, raw):
        r = EventReader(io.BytesIO(raw).readline)
        out = []
        while True:
            ev = r.next()
            if ev is None:
                return out
            out.append((ev.event, ev.data, ev.id))

    def test_parses_events_as_the_standard_says(self):
        raw = (b"\xef\xbb\xbf: keepalive\n\n"
               b"event: progress\nid: 3\ndata: {\"a\":\ndata:1}\n ignored: field\n\n"
               b"event:closed\r\nid:4\r\ndata:x\r\n\r\n"
               b"data: cr\rdata: only\r\r"
               b"event: nodata\n\n"
               b"data: dropped without its blank line\n")
        self.assertEqual([("progress", "{\"a\":\n1}", "3"), ("closed", "x", "4"), ("message", "cr\nonly", "4")],
                         self.events(raw))

    def test_an_event_over_the_limit_is_refused(self):
        r = EventReader(io.BytesIO(b"data: " + b"x" * 100 + b"\n\n").readline, max_event_bytes=50)
        with self.assertRaises(ValueError):
            r.next()


# -- against a real server ---------------------------------------------------------


class Gate:
    """A handler's gate: tasks block until the test opens it."""

    def __init__(self):
        self.open_ = threading.Event()
        self.entered = threading.Event()

    def open(self):
        self.open_.set()

    def handler(self, payload, task):
        self.entered.set()
        if not self.open_.wait(60):
            raise RuntimeError("the test never opened the gate")
        return payload


class ClientTest(WarrenTestCase):

    queues = ("default", "gpu")  # the search test submits a job to "gpu"

    def setUp(self):
        self.client = Client(self.server.base, "")

    def proxy(self, **kw):
        p = Proxy(self.server.base, **kw)
        self.addCleanup(p.close)
        return p

    def gated_job(self, gate, n=1):
        """A job of n tasks that stay running until the gate opens."""
        self.start_worker({"gated": gate.handler}, concurrency=2)
        self.addCleanup(gate.open)  # before the worker stops: cleanups run last in, first out
        job = self.client.submit("gated", range(n), reduce="sum", batch_size=1)
        self.assertTrue(gate.entered.wait(30), "no task started")
        return job

    def test_a_generator_of_20000_tasks_is_submitted_and_wait_follows_the_events(self):
        self.start_worker({"number": lambda payload, task: payload["n"]}, concurrency=8)
        produced = []

        def tasks():
            for n in range(1, 20001):
                produced.append(n)
                yield {"n": n}

        job = self.client.submit("number", tasks(), reduce="sum", metadata={"from": "test_client"})
        self.assertEqual(20000, len(produced))
        self.assertEqual(26, len(job.id))
        self.assertIn(job.state, ("pending", "running"))
        proxy = self.proxy()
        seen = []
        done = Client(proxy.base, "").wait(job, timeout=120, on_progress=seen.append)
        self.assertTrue(done.closed)
        self.assertEqual(("completed", 20000, 20000, 0, None),
                         (done.state, done.expected_tasks, done.completed_tasks, done.failed_tasks, done.error))
        self.assertEqual({"from": "test_client"}, done.metadata)
        self.assertEqual(done, seen[-1])
        self.assertEqual(["/v1/jobs/%s/events" % job.id], proxy.paths(), "one stream, no poll")
        self.assertEqual(20000 * 20001 // 2, self.client.result(job.id))
        self.assertEqual(done.raw, self.client.get(job.id).raw)

    def test_submit_then_runs_a_two_stage_chain(self):
        self.start_worker({"number": lambda payload, task: payload["n"],
                           "square": lambda payload, task: payload * payload}, concurrency=4)
        job = self.client.submit("number", ({"n": n} for n in range(1, 4)),
                                 then={"type": "square", "reduce": "sum", "metadata": {"stage": 2}})
        first = self.client.wait(job, timeout=60)
        self.assertEqual("completed", first.state)
        self.assertEqual([1, 2, 3], self.client.result(job.id))
        self.assertEqual({"type": "square", "remaining": 1}, first.then)
        self.assertIsNone(first.previous_job)
        second = self.client.wait(first.next_job, timeout=60)
        self.assertEqual(("completed", 3, job.id, None), (second.state, second.expected_tasks, second.previous_job, second.then))
        self.assertEqual({"stage": 2}, second.metadata)
        self.assertEqual(1 + 4 + 9, self.client.result(second.id))

    def test_submit_then_is_validated_with_its_field_path(self):
        with self.assertRaises(ValidationFailed) as cm:
            self.client.submit("number", [1], then={"type": "square", "then": {"max_retries": 1}})
        self.assertIn("then.then.type is required", str(cm.exception))

    def test_wait_polls_when_the_stream_breaks(self):
        gate = Gate()
        job = self.gated_job(gate)
        proxy = self.proxy(events="cut", on_poll=gate.open)
        seen = []
        done = Client(proxy.base, "").wait(job.id, timeout=60, on_progress=seen.append)
        self.assertEqual(("completed", 1), (done.state, done.completed_tasks))
        calls = ["events" if p.endswith("/events") else "poll" for _, p in proxy.requests
                 if p.endswith("/events") or p.count("/") == 3]
        self.assertEqual(["events", "events"], calls[:2], "a cut stream is opened again once: %s" % proxy.requests)
        self.assertEqual({"poll"}, set(calls[2:]), "then polls: %s" % proxy.requests)
        self.assertEqual(done, seen[-1])
        self.assertEqual("running", seen[0].state, "the first event, before the cut")

    def test_wait_polls_a_server_without_event_streams(self):
        gate = Gate()
        job = self.gated_job(gate)
        proxy = self.proxy(events="missing", on_poll=gate.open)
        done = Client(proxy.base, "").wait(job.id, timeout=60)
        self.assertEqual("completed", done.state)
        self.assertEqual(1, len(proxy.paths("/events")))
        self.assertGreaterEqual(len(proxy.polls()), 2, "a GET to tell an unknown job from a missing route, then polls")

    def test_wait_without_events_polls(self):
        gate = Gate()
        job = self.gated_job(gate)
        proxy = self.proxy(on_poll=gate.open)
        done = Client(proxy.base, "").wait(job.id, timeout=60, events=False)
        self.assertEqual("completed", done.state)
        self.assertEqual([], proxy.paths("/events"))

    def test_wait_times_out_with_the_job_as_last_seen(self):
        gate = Gate()
        job = self.gated_job(gate)
        for events in (True, False):
            with self.subTest(events=events):
                start = time.monotonic()
                with self.assertRaises(WaitTimeout) as cm:
                    self.client.wait(job.id, timeout=0.5, events=events)
                self.assertLess(time.monotonic() - start, 5)
                e = cm.exception
                self.assertIsInstance(e, TimeoutError)
                self.assertEqual(("timeout", None), (e.code, e.status))
                self.assertEqual((job.id, "running"), (e.job.id, e.job.state))
                self.assertIn("did not close within 0.5 s", str(e))
        gate.open()
        self.assertEqual("completed", self.client.wait(job.id, timeout=60).state)

    def test_result_and_tasks_page_by_page(self):
        self.start_worker({"tenfold": lambda payload, task: payload * 10}, concurrency=4)
        job = self.client.submit("tenfold", iter(range(1, 26)), reduce="collect")
        self.assertEqual("completed", self.client.wait(job.id, timeout=60).state)
        self.assertEqual([n * 10 for n in range(1, 26)], self.client.result(job.id))

        proxy = self.proxy()
        tasks = list(Client(proxy.base, "").tasks(job.id, page_size=10))
        self.assertEqual(3, len(proxy.paths("/tasks")), "25 tasks, pages of 10")
        self.assertEqual(list(range(1, 26)), [t.task_id for t in tasks])
        self.assertTrue(all(isinstance(t, Task) and t.state == "completed" and t.attempts == 1 for t in tasks))
        self.assertEqual([n * 10 for n in range(1, 26)], [t.result for t in tasks])
        self.assertEqual([], list(self.client.tasks(job.id, state="failed")))

        self.client.delete(job.id)
        with self.assertRaises(NotFound):
            self.client.get(job.id)

    def test_list_filters_and_searches(self):
        marker = "order-%08x" % random.getrandbits(32)
        gpu = self.client.submit("thumbnail", [1], queue="gpu", metadata={"order": marker, "who": "Acme"})
        plain = self.client.submit("echo", [1, 2], metadata={"order": marker})
        other = self.client.submit("echo", [1])
        for j in (gpu, plain, other):
            self.addCleanup(self._cancel_quietly, j.id)

        self.assertEqual([plain.id, gpu.id], [j.id for j in self.client.list(search=marker.upper())])
        self.assertEqual([gpu.id], [j.id for j in self.client.list(search=marker, queue="gpu")])
        self.assertEqual([plain.id], [j.id for j in self.client.list(search=marker, type="echo", page_size=1)])
        self.assertTrue(all(isinstance(j, Job) for j in self.client.list(search=marker)))
        created = datetime.datetime.fromisoformat(self.client.get(plain.id).created_at.replace("Z", "+00:00"))
        self.assertEqual([plain.id], [j.id for j in self.client.list(search=marker, created_after=created)])
        self.assertEqual([gpu.id], [j.id for j in self.client.list(search=marker, created_before=created)])
        naive = created.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        self.assertEqual([plain.id], [j.id for j in self.client.list(search=marker, created_after=naive)])
        # A state the job holds for sure: pending ends when the relay has
        # published its tasks.
        self.client.cancel(plain.id)
        self.assertEqual([plain.id], [j.id for j in self.client.list(search=marker, state="cancelled", type="echo",
                                                                        created_after=created.isoformat())])

        proxy = self.proxy()
        found = list(Client(proxy.base, "").list(search=marker, page_size=1))
        self.assertEqual([plain.id, gpu.id], [j.id for j in found])
        self.assertEqual(2, len(proxy.paths("/v1/jobs")), "two matches, pages of 1")
        with self.assertRaises(BadRequest) as cm:
            self.client.list(search="ab")
        self.assertEqual(("invalid_parameter", 400), (cm.exception.code, cm.exception.status))
        self.assertIn("at least 3 characters", cm.exception.message)

    def _cancel_quietly(self, job_id):
        try:
            self.client.cancel(job_id)
        except Conflict:
            pass

    def test_cancel(self):
        gate = Gate()
        job = self.gated_job(gate, n=2)  # both running: none left in the queue for another test's worker
        cancelled = self.client.cancel(job.id)
        self.assertEqual((job.id, "cancelled"), (cancelled.id, cancelled.state))
        self.assertTrue(cancelled.closed)
        self.assertEqual("cancelled", self.client.wait(job.id, timeout=10).state)
        with self.assertRaises(Conflict) as cm:
            self.client.cancel(job.id)
        self.assertEqual(("conflict", 409), (cm.exception.code, cm.exception.status))
        self.assertIn("already cancelled", cm.exception.message)
        with self.assertRaises(Conflict):
            self.client.result(job.id)

    def test_redrive_after_failures(self):
        failing = {2, 4}

        def picky(payload, task):
            if payload in failing:
                raise Permanent("not today: %d" % payload)
            return payload

        self.start_worker({"picky": picky}, concurrency=4)
        job = self.client.submit("picky", [1, 2, 3, 4, 5], reduce="collect", max_retries=0)
        failed = self.client.wait(job.id, timeout=60)
        self.assertEqual(("failed", 5, 3, 2), (failed.state, failed.expected_tasks, failed.completed_tasks,
                                               failed.failed_tasks))
        self.assertIsNotNone(failed.error)
        self.assertEqual([2, 4], sorted(e["task_id"] for e in failed.errors))
        self.assertEqual([2, 4], [t.task_id for t in self.client.tasks(job.id, state="failed")])
        with self.assertRaises(Conflict):
            self.client.result(job.id)

        failing.clear()
        redriven = self.client.redrive(job.id)
        self.assertEqual(job.id, redriven.id)
        self.assertFalse(redriven.closed)
        self.assertEqual(0, redriven.failed_tasks)
        done = self.client.wait(job.id, timeout=60)
        self.assertEqual(("completed", 5, 0), (done.state, done.completed_tasks, done.failed_tasks))
        self.assertEqual([1, 2, 3, 4, 5], self.client.result(job.id))
        with self.assertRaises(Conflict) as cm:
            self.client.redrive(job.id)
        self.assertIn("nothing to redrive", cm.exception.message)

    def test_errors_carry_the_apis_code_and_message(self):
        with self.assertRaises(NotFound) as cm:
            self.client.get("no-such-job")
        e = cm.exception
        self.assertEqual(("not_found", 404), (e.code, e.status))
        self.assertIn('"no-such-job" not found', e.message)
        self.assertIsInstance(e, WarrenError)
        for call in (self.client.result, self.client.tasks, self.client.cancel, self.client.redrive,
                     self.client.delete, lambda j: self.client.wait(j, timeout=10)):
            for job_id in ("no-such-job", "no/such job?"):
                with self.subTest(call=call, job_id=job_id), self.assertRaises(NotFound) as cm:
                    call(job_id)
                self.assertIn('"%s" not found' % job_id, cm.exception.message)

        with self.assertRaises(BadRequest) as cm:
            self.client.submit("square", [1], colour="blue")
        self.assertEqual(("unknown_field", 400), (cm.exception.code, cm.exception.status))
        self.assertIn('unknown field "colour"', cm.exception.message)
        with self.assertRaises(BadRequest) as cm:
            self.client.tasks("no-such-job", page_size=5000)
        self.assertEqual("invalid_parameter", cm.exception.code)
        with self.assertRaises(ValidationFailed) as cm:
            self.client.submit("square", [1], reduce="no-such-reducer")
        self.assertEqual(("validation_failed", 422), (cm.exception.code, cm.exception.status))
        with self.assertRaises(ValidationFailed):
            self.client.submit("square", iter(()))

    def test_submit_takes_max_concurrency(self):
        lock = threading.Lock()
        running, most = [0], [0]

        def slow(payload, task):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= 1
            return payload

        self.start_worker({"slow": slow}, concurrency=8)
        job = self.client.submit("slow", range(20), reduce="sum", max_concurrency=2)
        done = self.client.wait(job, timeout=60)
        self.assertEqual(("completed", 20), (done.state, done.completed_tasks))
        self.assertEqual(2, done.raw["max_concurrency"])
        self.assertEqual(2, most[0], "at most 2 tasks ran at once, and 2 did")
        self.assertEqual(0, self.client.get(self.client.submit("slow", [1]).id).raw["max_concurrency"], "no cap")
        with self.assertRaises(ValidationFailed) as cm:
            self.client.submit("slow", [1], max_concurrency=0)
        self.assertIn("max_concurrency must be between 1 and 10000", cm.exception.message)

    def test_a_job_refused_at_its_first_line_is_answered_while_its_tasks_still_stream(self):
        # The server answers and closes after the spec line: the client
        # reports its answer, not the broken pipe of the tasks it was sending.
        with self.assertRaises(BadRequest) as cm:
            self.client.submit("square", ({"pad": "x" * 100} for _ in range(200_000)), colour="blue")
        self.assertEqual("unknown_field", cm.exception.code)

    def test_an_idempotency_key_gives_the_same_job(self):
        self.start_worker({"square": lambda payload, task: payload * payload})
        first = self.client.submit("square", [1, 2], reduce="sum", idempotency_key="same-key")
        again = self.client.submit("square", [1, 2], reduce="sum", idempotency_key="same-key")
        self.assertEqual(first.id, again.id)
        with self.assertRaises(ValidationFailed) as cm:
            self.client.submit("square", [3], reduce="sum", idempotency_key="same-key")
        self.assertEqual("idempotency_key_reused", cm.exception.code)
        self.client.wait(first, timeout=60)
        self.assertEqual(5, self.client.result(first))


class TokenTest(WarrenTestCase):
    server_env = {"WARREN_API_TOKENS": "writer-tok:write,reader-tok:read"}

    def test_bearer_tokens_and_their_scopes(self):
        base = self.server.base
        for token in ("", "wrong-tok"):
            with self.subTest(token=token):
                with self.assertRaises(Unauthorized) as cm:
                    Client(base, token).submit("echo", [1])
                self.assertEqual(("unauthorized", 401), (cm.exception.code, cm.exception.status))
        with self.assertRaises(Forbidden) as cm:
            Client(base, "reader-tok").submit("echo", [1])
        self.assertEqual(("forbidden", 403), (cm.exception.code, cm.exception.status))

        self.start_worker({"echo": lambda payload, task: payload})
        with clean_env(WARREN_SERVER=base, WARREN_TOKEN="writer-tok"):
            writer = Client()
        job = writer.submit("echo", [1, 2, 3], reduce="sum")
        reader = Client(base, "reader-tok")
        with self.assertRaises(Unauthorized):
            Client(base, "").wait(job.id, timeout=30)  # the stream's 401 ends the wait
        done = reader.wait(job.id, timeout=60)
        self.assertEqual("completed", done.state)
        self.assertEqual(6, reader.result(job.id))
        with self.assertRaises(Forbidden):
            reader.cancel(job.id)


if __name__ == "__main__":
    unittest.main()
