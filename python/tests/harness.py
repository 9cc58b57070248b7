"""Test harness: a real `warren server` and the real RabbitMQ, per test class.

Each test class gets its own random WARREN_PREFIX, SQLite file and port;
tearDownClass stops the server and deletes every prefixed queue and
exchange, so classes run against one broker and leave nothing behind.
The warren binary is built once per run (`go build ./cmd/warren`) unless
WARREN_BIN names one.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import uuid

import pika

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

from warren_worker import Worker  # noqa: E402
from warren_worker import _wire  # noqa: E402

AMQP_URL = os.environ.get("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
# Short retry tiers, the same for the server and the workers.
TIERS = "50ms,100ms"
TIERS_MS = [50, 100]

_build_lock = threading.Lock()
_binary = None


def warren_binary():
    """The warren binary: WARREN_BIN, else built once per test run."""
    global _binary
    with _build_lock:
        if _binary:
            return _binary
        if os.environ.get("WARREN_BIN"):
            _binary = os.environ["WARREN_BIN"]
            return _binary
        d = tempfile.mkdtemp(prefix="warren-py-bin-")
        atexit.register(shutil.rmtree, d, True)
        path = os.path.join(d, "warren")
        out = subprocess.run(["go", "build", "-o", path, "./cmd/warren"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if out.returncode != 0:
            raise RuntimeError("go build ./cmd/warren failed:\n" + out.stdout.decode(errors="replace"))
        _binary = path
        return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_prefix(name):
    return "wpy-%s-%s." % (uuid.uuid4().hex[:8], name[:30])


class Server:
    """A running `warren server` on its own prefix, SQLite file and port."""

    def __init__(self, prefix, tiers=TIERS, env_extra=None):
        self.prefix = prefix
        self.dir = tempfile.mkdtemp(prefix="warren-py-test-")
        self.base = "http://127.0.0.1:%d" % free_port()
        env = dict(os.environ)
        env.update({
            "WARREN_AMQP_URL": AMQP_URL,
            "WARREN_PREFIX": prefix,
            "WARREN_DATABASE_URL": "sqlite://" + os.path.join(self.dir, "warren.db"),
            "WARREN_LISTEN": self.base[len("http://"):],
            "WARREN_RETRY_TIERS": tiers,
            "WARREN_LOG_LEVEL": "warn",
        })
        env.update(env_extra or {})
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([warren_binary(), "server"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def output(self):
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def _wait_ready(self):
        # Another process: there is no signal to wait on but its /readyz.
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("warren server exited:\n" + self.output())
            try:
                with urllib.request.urlopen(self.base + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("warren server not ready:\n" + self.output())
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, True)

    # -- the API -----------------------------------------------------------

    def request(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def submit(self, spec, headers=None):
        status, body = self.request("POST", "/v1/jobs", spec, headers)
        if status != 202:
            raise AssertionError("submit: %d %s" % (status, body))
        return body["id"]

    def job(self, job_id):
        return self.request("GET", "/v1/jobs/" + job_id)[1]

    def tasks(self, job_id):
        return self.request("GET", "/v1/jobs/%s/tasks?limit=1000" % job_id)[1]["tasks"]

    def task(self, job_id, task_id):
        return self.request("GET", "/v1/jobs/%s/tasks/%d" % (job_id, task_id))[1]

    def attempts(self, job_id, task_id, n, timeout=10):
        """The task's attempt history once it has n attempts: a retried run's attempt message may
        still be on its way when the job closes (a redelivery)."""
        deadline = time.monotonic() + timeout
        while True:
            history = self.task(job_id, task_id)["attempt_history"]
            if len(history) >= n or time.monotonic() > deadline:
                return history
            time.sleep(0.02)

    def result(self, job_id):
        return self.request("GET", "/v1/jobs/%s/result" % job_id)[1]

    def wait_closed(self, job_id, timeout=60):
        """Wait for the job to close, on its server-sent events; return the job."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/v1/jobs/%s/events" % job_id, timeout=timeout) as r:
                    event = None
                    for line in r:
                        line = line.decode().rstrip("\n")
                        if line.startswith("event:"):
                            event = line.split(":", 1)[1].strip()
                        if event == "closed" and line.startswith("data:"):
                            return json.loads(line.split(":", 1)[1])
            except (urllib.error.URLError, OSError):
                pass
        raise AssertionError("job %s did not close in %ss: %s" % (job_id, timeout, self.job(job_id)))


def admin_connection():
    return pika.BlockingConnection(pika.URLParameters(AMQP_URL))


def delete_topology(prefix, queues=("default",), tiers_ms=TIERS_MS):
    """Delete every queue and exchange of prefix: what the server and the workers declared."""
    names = _wire.Names(prefix)
    conn = admin_connection()
    try:
        ch = conn.channel()
        qs = [names.results_queue, names.dead_queue, names.tasks_dlq, names.results_dlq, names.outcomes_queue]
        for q in queues:
            qs.append(names.work_queue(q))
            for ms in list(tiers_ms) + list(_wire.DEFAULT_RETRY_TIERS_MS):
                qs.append(names.retry_queue(q, _wire.tier_name(ms)))
        for q in qs:
            ch.queue_delete(q)
        for x, _ in names.exchanges():
            ch.exchange_delete(x)
    finally:
        conn.close()


def get_all(queue_name, limit=1000):
    """Take every message of a queue: [(method, properties, body)]."""
    conn = admin_connection()
    out = []
    try:
        ch = conn.channel()
        while len(out) < limit:
            method, props, body = ch.basic_get(queue_name, auto_ack=True)
            if method is None:
                break
            out.append((method, props, body))
    finally:
        conn.close()
    return out


class Observer:
    """A queue of the test's own bound to an exchange: a copy of every message published there."""

    def __init__(self, exchange, routing_key):
        self.conn = admin_connection()
        self.ch = self.conn.channel()
        q = self.ch.queue_declare("", exclusive=True, auto_delete=True, arguments={"x-queue-type": "classic"})
        self.queue = q.method.queue
        self.ch.queue_bind(self.queue, exchange, routing_key=routing_key)

    def take(self, n, timeout=30):
        """Wait for n messages; return them as (properties, body)."""
        out = []
        for method, props, body in self.ch.consume(self.queue, auto_ack=True, inactivity_timeout=timeout):
            if method is None:
                break
            out.append((props, body))
            if len(out) == n:
                break
        self.ch.cancel()
        return out

    def close(self):
        self.conn.close()


class WorkerRun:
    """A Worker running in a thread of the test process; events recorded and waitable."""

    def __init__(self, test, **kw):
        self.events = []
        self.cond = threading.Condition()
        kw.setdefault("amqp_url", AMQP_URL)
        kw.setdefault("prefix", test.prefix)
        kw.setdefault("retry_tiers", TIERS)
        kw.setdefault("heartbeat_interval", 1.0)
        self.worker = Worker(on_event=self._on_event, **kw)
        self.thread = None
        self.error = None

    def _on_event(self, ev):
        with self.cond:
            self.events.append(ev)
            self.cond.notify_all()

    def start(self):
        def run():
            try:
                self.worker.run()
            except BaseException as e:  # reported by stop()
                self.error = e
                with self.cond:
                    self.cond.notify_all()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.wait_for(lambda evs: any(e.kind == "connected" for e in evs), what="connected")
        return self

    def wait_for(self, pred, timeout=30, what="an event"):
        with self.cond:
            ok = self.cond.wait_for(lambda: self.error is not None or pred(self.events), timeout)
        if self.error is not None:
            raise self.error
        if not ok:
            raise AssertionError("timed out waiting for %s; events: %s" % (what, self.events))

    def kinds(self, kind):
        with self.cond:
            return [e for e in self.events if e.kind == kind]

    def stop(self):
        self.worker.stop()
        self.thread.join(60)
        if self.thread.is_alive():
            raise AssertionError("the worker did not stop")
        if self.error is not None:
            raise self.error


class WarrenTestCase(unittest.TestCase):
    """A test class with a warren server of its own."""

    queues = ("default",)
    # Variables of the class's server besides the harness's own (WARREN_API_TOKENS, say).
    server_env = {}

    @classmethod
    def setUpClass(cls):
        cls.prefix = new_prefix(cls.__name__)
        try:
            cls.server = Server(cls.prefix, env_extra=cls.server_env)
        except Exception:
            delete_topology(cls.prefix, cls.queues)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        delete_topology(cls.prefix, cls.queues)

    def start_worker(self, handlers, **kw):
        """Start a worker in a thread with handlers ({type: fn}), stopped at cleanup."""
        w = WorkerRun(self, **kw)
        for t, fn in handlers.items():
            w.worker.add_handler(t, fn)
        w.start()
        self.addCleanup(w.stop)
        return w
