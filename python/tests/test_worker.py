"""The Python worker against a real warren server and RabbitMQ."""

import datetime
import json
import logging
import threading
import time

import pika

from .harness import TIERS, WarrenTestCase, Observer, get_all, admin_connection
from warren_worker import Permanent


def parse_time(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")


class WorkerTest(WarrenTestCase):
    queues = ("default", "py")

    def dead_letters(self, job_id, n):
        """Take the dead letters of job_id from tasks.dlq (the people's copy)."""
        got = [m for m in get_all(self.prefix + "tasks.dlq") if m[1].correlation_id == job_id]
        self.assertEqual(n, len(got), "dead letters of job %s" % job_id)
        return got

    def test_job_completes_with_results_in_task_order(self):
        def square(payload, task):
            self.assertEqual("%s:%d" % (task.job_id, task.task_id), task.idempotency_key)
            return {"n": payload["n"], "square": payload["n"] ** 2, "attempt": task.attempt}

        observer = Observer(self.prefix + "results.x", "result")
        self.addCleanup(observer.close)
        self.start_worker({"square": square}, name="py-order", concurrency=4)

        job_id = self.server.submit({"type": "square", "reduce": "collect", "batch_size": 1,
                                     "tasks": [{"n": i} for i in range(1, 21)]})
        job = self.server.wait_closed(job_id)
        # Results that complete together may share a result batch: every
        # task is answered once, in increasing task order within a message.
        answered = []
        for props, body in observer.take(20, timeout=2):
            doc = json.loads(body)
            ids = [r["task_id"] for r in doc["results"]] if "results" in doc else [doc["task_id"]]
            self.assertEqual(sorted(set(ids)), ids)
            want = "%s:%d+%d" % (job_id, ids[0], len(ids)) if "results" in doc else "%s:%d" % (job_id, ids[0])
            self.assertEqual(want, props.message_id)
            answered += ids
        self.assertEqual(list(range(1, 21)), sorted(answered))
        self.assertEqual("completed", job["state"])
        self.assertEqual([{"n": i, "square": i * i, "attempt": 1} for i in range(1, 21)], self.server.result(job_id))
        tasks = self.server.tasks(job_id)
        self.assertEqual(20, len(tasks))
        for t in tasks:
            self.assertEqual(("completed", 1, "py-order"), (t["state"], t["attempts"], t["worker"]))
            self.assertIsNotNone(t["started_at"])

    def test_permanent_failure_is_dead_lettered_with_its_headers(self):
        def strict(payload, task):
            raise Permanent("bad input: %s" % payload["key"])

        self.start_worker({"strict": strict}, name="py-permanent")

        job_id = self.server.submit({"type": "strict", "batch_size": 1, "max_retries": 3, "tasks": [{"key": "x.jpg"}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("failed", job["state"])
        (t,) = self.server.tasks(job_id)
        self.assertEqual(("failed", 1), (t["state"], t["attempts"]))
        self.assertIn("bad input: x.jpg", t["error"])
        ((method, props, body),) = self.dead_letters(job_id, 1)
        h = props.headers
        self.assertEqual("permanent", h["x-failure-reason"])
        self.assertEqual("bad input: x.jpg", h["x-error"])
        self.assertEqual("py-permanent", h["x-worker"])
        self.assertEqual(0, h["x-retry"])
        self.assertEqual(3, h["x-max-retries"])
        self.assertEqual(1, h["x-generation"])
        self.assertLessEqual(parse_time(h["x-started-at"]), parse_time(h["x-failed-at"]))
        self.assertEqual(job_id + ":1", props.message_id)
        self.assertEqual("strict", props.type)
        self.assertEqual(2, props.delivery_mode)
        self.assertEqual({"job_id": job_id, "task_id": 1, "payload": {"key": "x.jpg"}}, json.loads(body))
        self.assertEqual("task.failed", method.routing_key)

    def test_transient_failures_are_retried_through_the_tiers(self):
        seen = []

        def flaky(payload, task):
            seen.append((task.task_id, task.attempt, task.max_retries))
            if task.attempt <= payload["fail"]:
                raise ConnectionError("upstream down")
            return task.attempt

        w = self.start_worker({"flaky": flaky}, name="py-flaky")

        job_id = self.server.submit({"type": "flaky", "reduce": "collect", "batch_size": 1, "max_retries": 2,
                                     "tolerated_failures": 1, "tasks": [{"fail": 2}, {"fail": 3}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"], "one failure is tolerated")
        self.assertEqual([3, None], self.server.result(job_id))
        t1, t2 = self.server.tasks(job_id)
        self.assertEqual(("completed", 3), (t1["state"], t1["attempts"]))
        self.assertEqual(("failed", 3), (t2["state"], t2["attempts"]), "1 + max_retries runs")
        self.assertIn("ConnectionError: upstream down", t2["error"])
        self.assertEqual(sorted(seen), [(1, 1, 2), (1, 2, 2), (1, 3, 2), (2, 1, 2), (2, 2, 2), (2, 3, 2)])
        retried = [(e.task_id, e.attempt, e.delay) for e in w.kinds("retried")]
        self.assertEqual(sorted(retried), [(1, 1, 0.05), (1, 2, 0.1), (2, 1, 0.05), (2, 2, 0.1)],
                         "the nth retry waits in the nth tier (%s)" % TIERS)
        ((_, props, _),) = self.dead_letters(job_id, 1)
        self.assertEqual("retries_exhausted", props.headers["x-failure-reason"])
        self.assertEqual("ConnectionError: upstream down", props.headers["x-error"])
        self.assertEqual(2, props.headers["x-retry"])
        self.assertEqual("expired", props.headers["x-death"][0]["reason"], "it came back from a retry tier")
        self.assertIn("Traceback (most recent call last)", props.headers["x-traceback"])
        self.assertTrue(props.headers["x-traceback"].rstrip().endswith("ConnectionError: upstream down"))

        # Every run is kept as an attempt, the retried ones through their
        # attempt messages, each with its traceback.
        history = self.server.attempts(job_id, 2, 3)
        self.assertEqual([(1, "retried"), (2, "retried"), (3, "failed")], [(a["attempt"], a["outcome"]) for a in history])
        for a in history:
            self.assertEqual("py-flaky", a["worker"])
            self.assertIn("ConnectionError: upstream down", a["error"])
            self.assertIn('in flaky\n    raise ConnectionError("upstream down")', a["traceback"])
        history = self.server.attempts(job_id, 1, 3)
        self.assertEqual(["retried", "retried", "completed"], [a["outcome"] for a in history])
        self.assertEqual("", history[2]["traceback"])

    def test_a_handlers_traceback_is_logged_debug_on_retry_warning_on_dead_letter(self):
        records = []

        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)

        logger = logging.getLogger("warren_worker")
        keep, level = Keep(logging.DEBUG), logger.level
        logger.addHandler(keep)
        logger.setLevel(logging.DEBUG)
        self.addCleanup(logger.removeHandler, keep)
        self.addCleanup(logger.setLevel, level)

        def broken(payload, task):
            raise ValueError("bad input %d" % task.attempt)

        self.start_worker({"broken": broken}, name="py-broken")
        job_id = self.server.submit({"type": "broken", "max_retries": 1, "tasks": [{}]})
        self.assertEqual("failed", self.server.wait_closed(job_id)["state"])

        def logged(level, text):
            return [r for r in records if r.levelno == level and text in r.getMessage()
                    and getattr(r, "job_id", None) == job_id]

        (retried,) = logged(logging.DEBUG, "the retried run's traceback")
        self.assertIn("Traceback (most recent call last)", retried.getMessage())
        self.assertIn("ValueError: bad input 1", retried.getMessage())
        (dead,) = logged(logging.WARNING, "task dead-lettered")
        self.assertIn("Traceback (most recent call last)", dead.getMessage())
        self.assertIn("ValueError: bad input 2", dead.getMessage())
        self.assertEqual([], logged(logging.WARNING, "bad input 1"), "a retry is not a warning")

    def test_a_batch_message_gives_one_result_batch(self):
        observer = Observer(self.prefix + "results.x", "result")
        self.addCleanup(observer.close)
        calls = []

        def double(payload, task):
            calls.append(task.task_id)
            return payload * 2

        self.start_worker({"double": double}, name="py-batch")

        job_id = self.server.submit({"type": "double", "reduce": "collect", "batch_size": 5,
                                     "tasks": list(range(1, 11))})
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual([i * 2 for i in range(1, 11)], self.server.result(job_id))
        self.assertEqual(list(range(1, 11)), sorted(calls))
        msgs = sorted(observer.take(2), key=lambda m: m[0].message_id)
        self.assertEqual([job_id + ":1+5", job_id + ":6+5"], [p.message_id for p, _ in msgs])
        for (props, body), first in zip(msgs, (1, 6)):
            doc = json.loads(body)
            self.assertEqual(job_id, doc["job_id"])
            self.assertEqual(list(range(first, first + 5)), [r["task_id"] for r in doc["results"]])
            self.assertEqual([i * 2 for i in range(first, first + 5)], [r["result"] for r in doc["results"]])
            self.assertEqual(1, props.headers["x-generation"])
            self.assertEqual((2, job_id, "application/json"), (props.delivery_mode, props.correlation_id, props.content_type))

    def test_an_unknown_type_waits_then_is_dead_lettered_after_its_task_timeout(self):
        w = self.start_worker({"known": lambda p, t: p}, name="py-unknown")
        start = time.monotonic()
        job_id = self.server.submit({"type": "nobody-serves-this", "batch_size": 2, "task_timeout": 1, "tasks": [1, 2]})
        job = self.server.wait_closed(job_id)
        elapsed = time.monotonic() - start
        self.assertEqual("failed", job["state"])
        self.assertGreaterEqual(elapsed, 1.0, "it waited out its task timeout, not failed at once")
        self.assertLess(elapsed, 5.0)
        # 50 ms, 100 ms, then 100 ms until the end: a few a second, no hot loop.
        bounces = w.kinds("unserved")
        self.assertLessEqual(len(bounces), 2 * 15, "bounces of 2 tasks in %.1fs" % elapsed)
        self.assertGreaterEqual(len(bounces), 2)
        dls = self.dead_letters(job_id, 2)
        self.assertEqual({job_id + ":1", job_id + ":2"}, {p.message_id for _, p, _ in dls},
                         "each task of the batch is dead-lettered alone")
        for _, props, body in dls:
            self.assertEqual("unknown_type", props.headers["x-failure-reason"])
            self.assertIn('no live worker serves type "nobody-serves-this" on queue "default" (for 1s)', props.headers["x-error"])
            self.assertEqual(0, props.headers["x-retry"], "bounces are no retries")
            self.assertNotIn("x-started-at", props.headers, "it never ran")
            self.assertIn("task_id", json.loads(body))

    def test_an_unknown_type_waits_for_a_worker_that_serves_it(self):
        w = self.start_worker({"known": lambda p, t: p}, name="py-other")
        job_id = self.server.submit({"type": "late-comer", "reduce": "collect", "tasks": [1, 2, 3]})
        w.wait_for(lambda evs: any(e.kind == "unserved" for e in evs), what="a task put back")
        self.start_worker({"late-comer": lambda p, t: p * 10}, name="py-late")
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual([10, 20, 30], self.server.result(job_id))
        for t in self.server.tasks(job_id):
            self.assertEqual(("completed", 1, "py-late"), (t["state"], t["attempts"], t["worker"]))
        self.assertEqual([], [m for m in get_all(self.prefix + "tasks.dlq") if m[1].correlation_id == job_id])

    def test_malformed_and_too_large_messages_are_dead_lettered(self):
        w = self.start_worker({"echo": lambda p, t: p}, name="py-malformed", max_message_bytes=20000)
        conn = admin_connection()
        self.addCleanup(conn.close)
        ch = conn.channel()
        ch.confirm_delivery()
        cases = [
            ("garbage-1", b"not json", "malformed"),
            ("garbage-2", b'{"job_id": "garbage-2", "task_id": "one"}', "malformed"),
            ("garbage-3", b'{"job_id": "garbage-3", "task_id": 1, "payload": ' + b"[" * 62 + b"]" * 62 + b"}", "malformed"),
            ("garbage-4", json.dumps({"job_id": "garbage-4", "task_id": 1, "payload": "x" * 30000}).encode(), "too_large"),
        ]
        for job_id, body, _ in cases:
            ch.basic_publish(self.prefix + "jobs.x", "task", body, pika.BasicProperties(
                type="echo", correlation_id=job_id, message_id=job_id + ":1", delivery_mode=2, headers={"x-retry": 0}))
        w.wait_for(lambda evs: len([e for e in evs if e.kind == "dead_lettered"]) == len(cases), what="4 dead letters")
        got = {p.correlation_id: (p.headers["x-failure-reason"], p.headers["x-error"], body)
               for _, p, body in get_all(self.prefix + "tasks.dlq") if p.correlation_id.startswith("garbage-")}
        for job_id, body, reason in cases:
            self.assertEqual(reason, got[job_id][0], job_id)
            self.assertEqual(body, got[job_id][2], "dead-lettered whole, as it came")
        self.assertIn("nested 62 levels deep", got["garbage-3"][1])
        self.assertIn("over this worker's limit of 20000", got["garbage-4"][1])

    def test_cancelled_jobs_are_skipped(self):
        release = threading.Event()
        ran = []

        def slow(payload, task):
            ran.append(task.task_id)
            release.wait(30)
            return payload

        w = self.start_worker({"slow": slow}, name="py-cancel", concurrency=1)

        job_id = self.server.submit({"type": "slow", "batch_size": 1, "tasks": list(range(10))})
        w.wait_for(lambda evs: any(e.kind == "started" and e.job_id == job_id for e in evs), what="the first task")
        # Every task is in the queue before the cancel (the relay publishes
        # no more after it). Another process: poll.
        deadline = time.monotonic() + 20
        while any(t["state"] == "pending" for t in self.server.tasks(job_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        status, job = self.server.request("POST", "/v1/jobs/%s/cancel" % job_id)
        self.assertEqual((200, "cancelled"), (status, job["state"]))
        w.wait_for(lambda evs: any(e.kind == "cancel_seen" and e.job_id == job_id for e in evs), what="the cancel")
        release.set()
        w.wait_for(lambda evs: len([e for e in evs if e.kind == "skipped" and e.job_id == job_id]) == 9,
                   what="9 skipped tasks")
        self.assertEqual(1, len(ran), "only the task already running ran")

    def test_paused_jobs_are_held_until_resumed(self):
        release = threading.Event()
        ran = []

        def slow(payload, task):
            ran.append((task.task_id, task.attempt))
            release.wait(30)
            return payload

        w = self.start_worker({"slow": slow}, name="py-pause", concurrency=1)
        job_id = self.server.submit({"type": "slow", "reduce": "collect", "batch_size": 1, "tasks": list(range(5))})
        w.wait_for(lambda evs: any(e.kind == "started" and e.job_id == job_id for e in evs), what="the first task")
        deadline = time.monotonic() + 20
        while any(t["state"] == "pending" for t in self.server.tasks(job_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        status, job = self.server.request("POST", "/v1/jobs/%s/pause" % job_id)
        self.assertEqual((200, True), (status, job["paused"]))
        w.wait_for(lambda evs: any(e.kind == "pause_seen" and e.job_id == job_id for e in evs), what="the pause")
        release.set()
        # The four tasks in the broker go back, each at least twice, without running.
        w.wait_for(lambda evs: len([e for e in evs if e.kind == "held" and e.job_id == job_id]) >= 8, what="8 holds")
        self.assertEqual(1, len(ran), "only the task already running ran")
        status, job = self.server.request("POST", "/v1/jobs/%s/resume" % job_id)
        self.assertEqual((200, False), (status, job["paused"]))
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual(list(range(5)), self.server.result(job_id))
        self.assertEqual([1] * 5, [a for _, a in ran], "the holds spent no attempt")
        self.assertEqual(5, len(ran), "each task ran once")

    def test_a_redelivered_batch_is_split_into_single_tasks(self):
        job_id = self.server.submit({"type": "echo", "reduce": "collect", "batch_size": 3, "tasks": ["a", "b", "c"]})
        # Take the batch and give it back unsettled: it comes back redelivered.
        conn = admin_connection()
        ch = conn.channel()
        for method, props, body in ch.consume(self.prefix + "tasks.q", inactivity_timeout=30):
            self.assertIsNotNone(method, "the batch was published")
            self.assertEqual(job_id + ":1+3", props.message_id)
            ch.basic_nack(method.delivery_tag, requeue=True)
            break
        ch.cancel()
        conn.close()
        observer = Observer(self.prefix + "results.x", "result")
        self.addCleanup(observer.close)
        w = self.start_worker({"echo": lambda p, t: p.upper()}, name="py-split")
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual(["A", "B", "C"], self.server.result(job_id))
        self.assertEqual([1, 2, 3], sorted(e.task_id for e in w.kinds("split")))
        answered = []
        for props, body in observer.take(3, timeout=2):
            doc = json.loads(body)
            answered += [r["task_id"] for r in doc["results"]] if "results" in doc else [doc["task_id"]]
        self.assertEqual([1, 2, 3], sorted(answered), "each task answered once")

    def test_a_run_past_its_task_timeout_fails_with_reason_timeout(self):
        done = threading.Event()

        def late(payload, task):
            self.assertAlmostEqual(1.0, task.timeout)
            done.wait(task.time_left() + 0.2)  # outlive the deadline
            return "too late"

        self.start_worker({"late": late}, name="py-timeout")

        job_id = self.server.submit({"type": "late", "batch_size": 1, "max_retries": 0, "task_timeout": 1, "tasks": [1]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("failed", job["state"])
        ((_, props, _),) = self.dead_letters(job_id, 1)
        self.assertEqual("timeout", props.headers["x-failure-reason"])
        self.assertEqual("worker: task timeout of 1s exceeded", props.headers["x-error"])
        self.assertEqual(1000, props.headers["x-task-timeout"])

    def test_trace_context_is_carried_to_results(self):
        observer = Observer(self.prefix + "results.x", "result")
        self.addCleanup(observer.close)
        self.start_worker({"echo": lambda p, t: p}, name="py-trace")
        traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        job_id = self.server.submit({"type": "echo", "batch_size": 1, "tasks": [1]}, headers={"traceparent": traceparent})
        self.assertEqual("completed", self.server.wait_closed(job_id)["state"])
        ((props, body),) = observer.take(1)
        self.assertEqual(job_id + ":1", props.message_id)
        self.assertIn("4bf92f3577b34da6a3ce929d0e0e4736", props.headers.get("traceparent", ""),
                      "the result continues the job's trace")

    def test_the_worker_appears_in_the_servers_list_of_workers(self):
        w = self.start_worker({"echo": lambda p, t: p, "thumbnail": lambda p, t: p}, name="py-heartbeat", concurrency=3)
        # Another process: poll its list until the heartbeat is in.
        deadline = time.monotonic() + 20
        while True:
            workers = {x["name"]: x for x in self.server.request("GET", "/v1/workers")[1]["workers"]}
            if "py-heartbeat" in workers or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        me = workers["py-heartbeat"]
        self.assertEqual((["default"], ["echo", "thumbnail"], 3, True),
                         (me["queues"], me["types"], me["concurrency"], me["alive"]))
        self.assertTrue(me["version"].startswith("warren-worker-python/"))
        # Its goodbye, when it stops, takes it off the list at once.
        w.stop()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            names = [x["name"] for x in self.server.request("GET", "/v1/workers")[1]["workers"]]
            if "py-heartbeat" not in names:
                break
            time.sleep(0.05)
        self.assertNotIn("py-heartbeat", names)

    def test_a_job_on_its_own_queue_retries_through_that_queues_tiers(self):
        def once(payload, task):
            if task.attempt == 1:
                raise TimeoutError("first run fails")
            return {"queue": task.queue, "attempt": task.attempt}

        w = self.start_worker({"once": once}, name="py-queue", queues="py")
        job_id = self.server.submit({"type": "once", "queue": "py", "reduce": "collect", "batch_size": 1, "tasks": [1]})
        self.assertEqual("completed", self.server.wait_closed(job_id)["state"])
        self.assertEqual([{"queue": "py", "attempt": 2}], self.server.result(job_id))
        (retried,) = w.kinds("retried")
        self.assertEqual((job_id, 1, 0.05), (retried.job_id, retried.attempt, retried.delay))
