"""Reduce tasks: the Python worker's reducers, and a plain pika reducer, against a fake outcomes responder,
then end to end against a real `warren server` (ReduceEndToEndTest).

No warren server answers the outcomes RPC in these tests: a responder
thread of the test's own, on its own pika connection, consumes outcomes.q
and answers pages of outcomes it was given (or an error, or nothing), as
docs/protocol.md ("Reduce tasks") says a server does. The worker and the
broker are real.
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest

import pika

from .harness import (AMQP_URL, PYTHON_DIR, TIERS, TIERS_MS, WarrenTestCase, WorkerRun, admin_connection, delete_topology,
                      get_all, new_prefix)
from warren_client import Client
from warren_worker import Permanent, Stale, _wire


def numbers(n, fail_every=0):
    """n outcomes: task i completed with result i, but every fail_every-th failed."""
    out = []
    for i in range(1, n + 1):
        if fail_every and i % fail_every == 0:
            out.append({"task_id": i, "state": "failed", "error": "boom"})
        else:
            out.append({"task_id": i, "state": "completed", "result": i})
    return out


class FakeOutcomes(threading.Thread):
    """Answers the outcomes RPC of prefix: pages of page_size, or error code, or (silent) nothing."""

    def __init__(self, prefix, outcomes=(), page_size=3, code=None, silent=False):
        super().__init__(daemon=True)
        self.names = _wire.Names(prefix)
        self.outcomes, self.page_size, self.code, self.silent = list(outcomes), page_size, code, silent
        self.requests = []
        self._quit = threading.Event()
        self._ready = threading.Event()

    def start(self):
        super().start()
        if not self._ready.wait(10):
            raise AssertionError("the fake outcomes responder did not start")
        return self

    def run(self):
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        try:
            ch = conn.channel()
            ch.queue_declare(self.names.outcomes_queue, durable=True, arguments={"x-queue-type": "quorum"})
            ch.basic_consume(self.names.outcomes_queue, lambda c, m, p, b: self._answer(c, p, b), auto_ack=True)
            self._ready.set()
            while not self._quit.is_set():
                conn.process_data_events(time_limit=0.05)
        finally:
            conn.close()

    def _answer(self, ch, props, body):
        req = json.loads(body)
        self.requests.append((req, props))
        if self.silent:
            return
        if self.code:
            reply = {"error": {"code": self.code, "message": "the fake says so"}}
        else:
            page = [o for o in self.outcomes if o["task_id"] > req["after"]][:self.page_size]
            last = page[-1]["task_id"]
            reply = {"outcomes": page, "next": last if last < self.outcomes[-1]["task_id"] else None}
        ch.basic_publish("", props.reply_to, json.dumps(reply).encode(),
                         pika.BasicProperties(correlation_id=props.correlation_id, content_type="application/json"))

    def stop(self):
        self._quit.set()
        self.join(10)


def publish_reduce(prefix, task_type, job_id, payload=None, expected=0, max_retries=3, generation=3, timeout_ms=None):
    """Publish job_id's reduce task as the relay does."""
    headers = {"x-retry": 0, "x-max-retries": max_retries, "x-generation": generation, "x-reduce": 1}
    if timeout_ms is not None:
        headers["x-task-timeout"] = timeout_ms
    names = _wire.Names(prefix)
    body = json.dumps({"job_id": job_id, "task_id": 0, "reduce": True, "payload": payload, "expected_tasks": expected})
    conn = admin_connection()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(names.jobs_exchange, "task", body.encode(), pika.BasicProperties(
            content_type="application/json", delivery_mode=2, message_id="%s:0" % job_id, correlation_id=job_id,
            type=task_type, headers=headers),
            mandatory=True)
    finally:
        conn.close()


def total(outcomes, job):
    s = failed = 0
    for o in outcomes:
        if o.state == "completed":
            s += o.result
        else:
            failed += 1
    return {"sum": s, "failed": failed}


class ReduceTest(unittest.TestCase):
    """A class of its own prefix and topology; no warren server."""

    @classmethod
    def setUpClass(cls):
        cls.prefix = new_prefix(cls.__name__)
        # The topology every warren process declares, as the worker does.
        names = _wire.Names(cls.prefix)
        conn = admin_connection()
        try:
            ch = conn.channel()
            for name, kind in names.exchanges():
                ch.exchange_declare(name, exchange_type=kind, durable=True)
            for name, exchange, key, args, _ in _wire.topology_specs(names, TIERS_MS, _wire.DEFAULT_DELIVERY_LIMIT, 0):
                ch.queue_declare(name, durable=True, arguments=args)
                if exchange:
                    ch.queue_bind(name, exchange, routing_key=key)
        finally:
            conn.close()

    @classmethod
    def tearDownClass(cls):
        delete_topology(cls.prefix)

    def setUp(self):
        # Each test starts from empty queues: an earlier test's leftovers must not answer for this one.
        for q in ("tasks.q", "results.q", "tasks.dlq", "dead.q", "outcomes.q"):
            get_all(self.prefix + q)

    def start(self, reducers, outcomes_timeout=None, **kw):
        kw.setdefault("name", "py-reduce")
        w = WorkerRun(self, **kw)
        for t, fn in reducers.items():
            w.worker.add_reducer(t, fn)
        if outcomes_timeout is not None:
            w.worker._outcomes_timeout = outcomes_timeout
        w.start()
        self.addCleanup(w.stop)
        return w

    def fake(self, **kw):
        f = FakeOutcomes(self.prefix, **kw).start()
        self.addCleanup(f.stop)
        return f

    def results(self, n, timeout=15):
        out, deadline = [], time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out += get_all(self.prefix + "results.q")
            time.sleep(0.05)
        self.assertEqual(n, len(out), "result messages")
        return out

    def test_pages_are_read_in_order_and_the_result_is_task_zero(self):
        f = self.fake(outcomes=numbers(10, fail_every=5), page_size=3)
        seen = []

        def reducer(outcomes, job):
            seen.append((job.job_id, job.payload, job.expected_tasks, job.attempt, job.generation, job.idempotency_key))
            return total(outcomes, job)
        w = self.start({"sum": reducer})
        publish_reduce(self.prefix, "sum", "job-r", payload={"k": 1}, expected=10)
        w.wait_for(lambda evs: any(e.kind == "completed" for e in evs), what="completed")

        (_, props, body), = self.results(1)
        doc = json.loads(body)
        self.assertEqual(("job-r", 0, {"sum": 40, "failed": 2}), (doc["job_id"], doc["task_id"], doc["result"]))
        self.assertEqual("job-r:0", props.message_id)
        self.assertEqual(3, props.headers["x-generation"])
        self.assertEqual([("job-r", {"k": 1}, 10, 1, 3, "job-r:0")], seen)
        self.assertEqual([0, 3, 6, 9], [r["after"] for r, _ in f.requests])
        for req, p in f.requests:
            self.assertEqual(("job-r", 3), (req["job_id"], req["generation"]))
            # The broker gives the responder the pseudo-queue's name for this channel.
            self.assertTrue(p.reply_to.startswith("amq.rabbitmq.reply-to"), p.reply_to)
            self.assertEqual(("60000", "application/json", 1), (p.expiration, p.content_type, p.delivery_mode))
        self.assertEqual([], get_all(self.prefix + "tasks.q"), "acked")

    def test_a_reducer_that_stops_early_reads_fewer_pages(self):
        f = self.fake(outcomes=numbers(100), page_size=3)

        def first_four(outcomes, job):
            ids = []
            for o in outcomes:
                ids.append(o.task_id)
                if len(ids) == 4:
                    break
            return ids
        w = self.start({"first": first_four})
        publish_reduce(self.prefix, "first", "job-early", expected=100)
        w.wait_for(lambda evs: any(e.kind == "completed" for e in evs), what="completed")
        (_, _, body), = self.results(1)
        self.assertEqual([1, 2, 3, 4], json.loads(body)["result"])
        self.assertEqual(2, len(f.requests), "4 outcomes are 2 pages of 3")

    def test_stale_is_acked_without_a_result(self):
        self.fake(code="stale")
        raised = []

        def reducer(outcomes, job):
            try:
                list(outcomes)
            except Stale as e:
                raised.append(e.code)
            return "must not be published"
        w = self.start({"sum": reducer})
        publish_reduce(self.prefix, "sum", "job-stale")
        w.wait_for(lambda evs: any(e.kind == "skipped" for e in evs), what="skipped")
        self.assertEqual(["stale"], raised)
        time.sleep(0.3)
        for q in ("tasks.q", "results.q", "tasks.dlq", "dead.q"):
            self.assertEqual([], get_all(self.prefix + q), q)

    def test_no_reply_or_an_error_is_retried_then_dead_lettered(self):
        for kw, text in (({"silent": True}, "no reply within 0.3s"), ({"code": "unavailable"}, "unavailable")):
            with self.subTest(**kw):
                f = FakeOutcomes(self.prefix, **kw).start()
                try:
                    def ignoring(outcomes, job):
                        try:
                            list(outcomes)
                        except Exception:
                            pass
                        return "partial"
                    w = WorkerRun(self, name="py-reduce")
                    w.worker.add_reducer("sum", ignoring)
                    w.worker._outcomes_timeout = 0.3
                    w.start()
                    try:
                        publish_reduce(self.prefix, "sum", "job-silent", max_retries=1)
                        w.wait_for(lambda evs: any(e.kind == "dead_lettered" for e in evs), what="dead_lettered")
                        retried = w.kinds("retried")
                        self.assertEqual(1, len(retried))
                        self.assertIn(text, retried[0].error)
                        self.assertEqual("retries_exhausted", w.kinds("dead_lettered")[0].reason)
                    finally:
                        w.stop()
                    dl = get_all(self.prefix + "tasks.dlq")
                    self.assertEqual(1, len(dl))
                    self.assertEqual("job-silent:0", dl[0][1].message_id)
                    self.assertTrue(json.loads(dl[0][2])["reduce"])
                    self.assertEqual([], get_all(self.prefix + "results.q"))
                    self.assertEqual(2, len(f.requests), "one request per run")
                    get_all(self.prefix + "dead.q")
                finally:
                    f.stop()

    def test_permanent_is_dead_lettered(self):
        self.fake(outcomes=numbers(3))

        def reducer(outcomes, job):
            raise Permanent("cannot reduce")
        w = self.start({"sum": reducer})
        publish_reduce(self.prefix, "sum", "job-perm")
        w.wait_for(lambda evs: any(e.kind == "dead_lettered" for e in evs), what="dead_lettered")
        dl = get_all(self.prefix + "tasks.dlq")
        self.assertEqual(1, len(dl))
        h = dl[0][1].headers
        self.assertEqual(("permanent", "cannot reduce", "py-reduce"), (h["x-failure-reason"], h["x-error"], h["x-worker"]))
        self.assertEqual([], get_all(self.prefix + "results.q"))

    def test_a_type_without_a_reducer_waits_then_fails(self):
        w = WorkerRun(self, name="py-reduce")
        w.worker.add_handler("sum", lambda payload, task: 1)
        w.start()
        self.addCleanup(w.stop)
        publish_reduce(self.prefix, "sum", "job-unknown", timeout_ms=300)
        w.wait_for(lambda evs: any(e.kind == "dead_lettered" for e in evs), what="dead_lettered")
        self.assertIn("no reducer for task type 'sum'", w.kinds("unserved")[0].error, "it went back first")
        ev = w.kinds("dead_lettered")[0]
        self.assertEqual("unknown_type", ev.reason)
        self.assertIn('no live worker has a reducer for type "sum" on queue "default" (for 300ms)', ev.error)

    def test_plain_pika_reducer_example(self):
        """python/examples/pika_reducer.py, written from docs/protocol.md with pika alone."""
        f = self.fake(outcomes=numbers(7, fail_every=3), page_size=2)
        publish_reduce(self.prefix, "sum", "job-pika", payload={"scale": 10}, expected=7)
        env = dict(os.environ, WARREN_AMQP_URL=AMQP_URL, WARREN_PREFIX=self.prefix, PYTHONPATH="")
        proc = subprocess.run([sys.executable, os.path.join(PYTHON_DIR, "examples", "pika_reducer.py"), "--once"],
                              env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(0, proc.returncode, proc.stderr)
        (_, props, body), = self.results(1)
        doc = json.loads(body)
        self.assertEqual(("job-pika", 0, {"sum": 190, "failed": 2}), (doc["job_id"], doc["task_id"], doc["result"]),
                         "(1+2+4+5+7)*10")
        self.assertEqual("job-pika:0", props.message_id)
        self.assertEqual(3, props.headers["x-generation"])
        self.assertEqual(4, len(f.requests), "7 outcomes in pages of 2")
        self.assertEqual([], get_all(self.prefix + "tasks.q"), "acked")


if __name__ == "__main__":
    unittest.main()


class ReduceEndToEndTest(WarrenTestCase):
    """Reduce tasks against a real `warren server`: its outcomes RPC, its store, the job's result."""

    queues = ("default", "maps")

    def setUp(self):
        self.client = Client(self.server.base, "")

    def test_a_python_reducer_is_the_jobs_fan_in(self):
        def double(payload, task):
            if payload % 7 == 0:
                raise Permanent("multiples of 7 fail")
            return 2 * payload

        def total(outcomes, job):
            last, s, failed = 0, 0, []
            for o in outcomes:
                self.assertGreater(o.task_id, last, "task id order")
                last = o.task_id
                if o.state == "completed":
                    s += o.result
                else:
                    failed.append(o.task_id)
                    self.assertIn("multiples of 7", o.error)
            return {"sum": s * job.payload["scale"], "failed": failed, "expected": job.expected_tasks}

        w = self.start_worker({"double": double})
        w.worker.add_reducer("total", total)
        n = 700
        job = self.client.submit("double", (i for i in range(1, n + 1)), tolerated_failure_percent=20,
                                 reduce={"task": "total", "payload": {"scale": 2}})
        closed = self.client.wait(job.id, timeout=120)
        self.assertEqual("completed", closed.state, closed.error)
        self.assertEqual("completed", closed.reduce_state)
        self.assertEqual({"task": "total", "queue": "default", "payload": {"scale": 2}}, closed.reduce)
        sevens = [i for i in range(1, n + 1) if i % 7 == 0]
        want = 2 * 2 * (n * (n + 1) // 2 - sum(sevens))
        self.assertEqual({"sum": want, "failed": sevens, "expected": n}, self.client.result(job.id))
        first = next(iter(self.client.tasks(job.id)))
        self.assertEqual((0, "completed"), (first.task_id, first.state), "the reduce task is task 0")

    def test_a_reducers_permanent_failure_fails_the_job(self):
        def broken(outcomes, job):
            raise Permanent("no ledger for %s" % job.job_id)

        w = self.start_worker({"double": lambda p, t: 2 * p})
        w.worker.add_reducer("broken", broken)
        job = self.client.submit("double", [1, 2, 3], reduce={"task": "broken"})
        closed = self.client.wait(job.id, timeout=60)
        self.assertEqual("failed", closed.state)
        self.assertEqual("failed", closed.reduce_state)
        self.assertIn("no ledger for " + job.id, closed.error)

    def test_the_plain_pika_reducer_against_the_server(self):
        """python/examples/pika_reducer.py serves the reduce task of a job whose map tasks run on queue maps."""
        self.start_worker({"double": lambda p, t: 2 * p}, queues=["maps"])
        job = self.client.submit("double", list(range(1, 101)), queue="maps",
                                 reduce={"task": "sum", "queue": "default", "payload": {"scale": 10}})
        env = dict(os.environ, WARREN_AMQP_URL=AMQP_URL, WARREN_PREFIX=self.prefix, PYTHONPATH="")
        proc = subprocess.run([sys.executable, os.path.join(PYTHON_DIR, "examples", "pika_reducer.py"), "--once"],
                              env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, proc.returncode, proc.stderr)
        closed = self.client.wait(job.id, timeout=60)
        self.assertEqual("completed", closed.state, closed.error)
        self.assertEqual({"sum": 2 * 10 * 5050, "failed": 0}, self.client.result(job.id))
