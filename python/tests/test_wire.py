"""The protocol mapping and the configuration, without a broker."""

import json
import os
import unittest
from unittest import mock

from .harness import PYTHON_DIR  # noqa: F401 - puts warren_worker on the path
from warren_worker import Worker, _wire


class TierNameTest(unittest.TestCase):

    def test_names_as_go_writes_durations(self):
        cases = {1000: "1s", 5000: "5s", 30000: "30s", 120000: "2m", 600000: "10m", 90000: "1m30s",
                 3600000: "1h", 5400000: "1h30m", 3601000: "1h0m1s", 250: "250ms", 1500: "1500ms", 50: "50ms"}
        for ms, name in cases.items():
            self.assertEqual(name, _wire.tier_name(ms), ms)

    def test_go_durations_parse_to_whole_milliseconds(self):
        for text, ms in {"1s": 1000, "250ms": 250, "1m30s": 90000, "1.5s": 1500, "2h": 7200000, "1000us": 1}.items():
            self.assertEqual(ms, _wire.parse_duration_ms(text), text)
        for bad in ("", "5", "1.5ms", "0s", "-1s", "5 s", "1d"):
            with self.assertRaises(ValueError, msg=bad):
                _wire.parse_duration_ms(bad)

    def test_the_nth_retry_waits_in_the_nth_tier_then_the_last(self):
        self.assertEqual([0, 0, 1, 2, 2], [_wire.retry_tier(r, 3) for r in (0, 1, 2, 3, 9)])


class DecodeTest(unittest.TestCase):

    def test_single_and_batch_bodies(self):
        self.assertEqual(("j", [(7, {"k": 1})], False), _wire.decode_tasks(b'{"job_id":"j","task_id":7,"payload":{"k":1}}'))
        self.assertEqual(("j", [(3, None)], False), _wire.decode_tasks(b'{"job_id":"j","task_id":3}'))
        body = b'{"job_id":"j","tasks":[{"task_id":2,"payload":"a"},{"task_id":5,"payload":"b"}]}'
        self.assertEqual(("j", [(2, "a"), (5, "b")], True), _wire.decode_tasks(body))

    def test_what_is_malformed(self):
        deep = "[" * 62 + "]" * 62
        for body in ["[]", "nope", '{"task_id":1}', '{"job_id":"","task_id":1}', '{"job_id":1,"task_id":1}',
                     '{"job_id":"j","task_id":0}', '{"job_id":"j","task_id":1.0}', '{"job_id":"j","task_id":true}',
                     '{"job_id":"j","task_id":"1"}', '{"job_id":"j","task_id":1,"payload":%s}' % deep,
                     '{"job_id":"j","tasks":[]}', '{"job_id":"j","task_id":1,"tasks":[{"task_id":1}]}',
                     '{"job_id":"j","tasks":[{"task_id":2},{"task_id":2}]}', '{"job_id":"j","tasks":[1]}',
                     '{"job_id":"j","tasks":[{"task_id":1,"payload":%s}]}' % deep,
                     '{"job_id":"j","tasks":[%s]}' % ",".join('{"task_id":%d}' % i for i in range(1, 1002)),
                     "[" * 100000 + "]" * 100000]:
            with self.assertRaises(_wire.Malformed, msg=body[:80]):
                _wire.decode_tasks(body.encode())
        ok = '{"job_id":"j","task_id":1,"payload":%s}' % ("[" * 61 + "]" * 61)
        self.assertEqual(61, _wire.json_depth(_wire.decode_tasks(ok.encode())[1][0][1]))

    def test_header_ints_of_any_width(self):
        h = {"a": 3, "b": 3.0, "c": "3", "d": 3.5, "e": -1, "f": True, "g": 2 ** 31, "h": b"4"}
        self.assertEqual([3, 3, 3, None, None, None, None, 4, None],
                         [_wire.header_int(h, k) for k in "abcdefghz"])

    def test_error_headers_are_cut_on_a_character_boundary(self):
        self.assertEqual("é" * 2, _wire.truncate_utf8("é" * 3, 5))


class ConfigTest(unittest.TestCase):

    def test_environment_fallbacks(self):
        env = {"WARREN_AMQP_URL": "amqp://u:p@h1:5672/,amqp://u:p@h2:5672/", "WARREN_PREFIX": "p.",
               "WARREN_RETRY_TIERS": "250ms, 2s", "WARREN_QUEUES": "gpu,default,gpu"}
        with mock.patch.dict(os.environ, env):
            w = Worker()
        self.assertEqual((2, "p.", [250, 2000], ["gpu", "default"]), (len(w.amqp_urls), w.prefix, w.retry_tiers_ms, w.queues))
        with mock.patch.dict(os.environ, env):
            w = Worker(amqp_url="amqp://localhost/", prefix="", retry_tiers=[0.5, "1m"], queues=["a"])
        self.assertEqual((["amqp://localhost/"], "", [500, 60000], ["a"]), (w.amqp_urls, w.prefix, w.retry_tiers_ms, w.queues))

    def test_defaults(self):
        with mock.patch.dict(os.environ, {k: "" for k in ("WARREN_AMQP_URL", "WARREN_PREFIX", "WARREN_RETRY_TIERS", "WARREN_QUEUES")}):
            w = Worker(concurrency=4)
        self.assertEqual(([1000, 5000, 30000, 120000, 600000], ["default"], 8, 4 << 20, 1 << 20),
                         (w.retry_tiers_ms, w.queues, w.prefetch, w.max_message_bytes, w.max_result_bytes))

    def test_errors_name_the_parameter(self):
        cases = [({"concurrency": 0}, "concurrency"), ({"retry_tiers": "5s,1s"}, "must increase"),
                 ({"retry_tiers": "1.5ms"}, "retry_tiers"), ({"queues": ["GPU"]}, "queues"),
                 ({"amqp_url": "http://secret@x"}, "amqp_url"), ({"max_message_bytes": 100}, "max_message_bytes"),
                 ({"prefetch": 1, "concurrency": 2}, "prefetch"), ({"heartbeat_interval": 0}, "heartbeat_interval")]
        for kw, want in cases:
            with self.assertRaises(ValueError, msg=kw) as cm:
                Worker(**kw)
            self.assertIn(want, str(cm.exception))
            self.assertNotIn("secret", str(cm.exception))
        with mock.patch.dict(os.environ, {"WARREN_RETRY_TIERS": "soon"}):
            with self.assertRaisesRegex(ValueError, "WARREN_RETRY_TIERS"):
                Worker()

    def test_run_needs_a_handler(self):
        with self.assertRaisesRegex(RuntimeError, "no handlers"):
            Worker().run()


class MessagesTest(unittest.TestCase):
    """The copies a delivery is settled with keep its properties and headers."""

    def delivery(self, body, headers=None, batch_queue="default"):
        import pika
        method = pika.spec.Basic.Deliver(consumer_tag="c", delivery_tag=7, redelivered=False, exchange="p.jobs.x", routing_key="task")
        props = pika.BasicProperties(type="echo", message_id="j:1+2", correlation_id="j", content_type="application/json",
                                     headers=dict({"x-retry": 1, "x-max-retries": 3, "x-generation": 2,
                                                   "x-delivery-count": 4, "traceparent": "00-t"}, **(headers or {})),
                                     expiration="60000", user_id="guest")
        return _wire.TaskDelivery(method, props, json.dumps(body).encode(), batch_queue, 1 << 20)

    def test_unserved_copy_keeps_the_retries_and_the_first_time(self):
        import datetime
        names = _wire.Names("p.")
        d = self.delivery({"job_id": "j", "tasks": [{"task_id": 1, "payload": "a"}, {"task_id": 2, "payload": "b"}]}, batch_queue="gpu")
        self.assertEqual((0, None), (d.bounces, d.first_unserved_at))
        now = datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, datetime.timezone.utc)
        u = d.unserved(names, (2, "b"), 1000, now)
        h = u.properties.headers
        self.assertEqual(("p.retry.x", "gpu.1s"), (u.exchange, u.routing_key))
        self.assertEqual((1, 1, "2026-01-02T03:04:05.123456Z"), (h["x-retry"], h["x-unserved"], h["x-first-unserved-at"]))
        self.assertNotIn("x-delivery-count", h)
        self.assertIsNone(u.properties.expiration)
        self.assertEqual({"job_id": "j", "task_id": 2, "payload": "b"}, json.loads(u.body))
        # As the Go worker writes the time (nanoseconds), read back and kept.
        again = self.delivery({"job_id": "j", "task_id": 2, "payload": "b"},
                              headers={"x-unserved": 1, "x-first-unserved-at": "2026-01-02T03:04:05.123456789Z"})
        self.assertEqual((1, now), (again.bounces, again.first_unserved_at))
        u = again.unserved(names, (2, "b"), 5000, now + datetime.timedelta(minutes=1))
        self.assertEqual((2, "2026-01-02T03:04:05.123456Z"), (u.properties.headers["x-unserved"], u.properties.headers["x-first-unserved-at"]))
        self.assertIsNone(_wire.parse_time("yesterday"))

    def test_unserved_delay_grows_to_the_third_tier_within_the_time_left(self):
        tiers = [1000, 5000, 30000, 120000]
        self.assertEqual([1000, 5000, 30000, 30000], [_wire.unserved_delay_ms(tiers, n, 3600_000) for n in (1, 2, 3, 9)])
        self.assertEqual([5000, 1000, 1000], [_wire.unserved_delay_ms(tiers, 3, left) for left in (29000, 4000, 10)])

    def test_retry_split_and_dead_letter_of_a_batch_task(self):
        names = _wire.Names("p.")
        d = self.delivery({"job_id": "j", "tasks": [{"task_id": 1, "payload": "a"}, {"task_id": 2, "payload": "b"}]}, batch_queue="gpu")
        r = d.retry(names, (2, "b"), 5000)
        self.assertEqual(("p.retry.x", "gpu.5s"), (r.exchange, r.routing_key))
        self.assertEqual((2, 2, "j:2", None, None), (r.properties.headers["x-retry"], r.properties.headers["x-generation"],
                                                    r.properties.message_id, r.properties.expiration, r.properties.user_id))
        self.assertEqual({"job_id": "j", "task_id": 2, "payload": "b"}, json.loads(r.body))
        s = d.split((1, "a"))
        self.assertEqual(("p.jobs.x", "task", "j:1"), (s.exchange, s.routing_key, s.properties.message_id))
        self.assertNotIn("x-delivery-count", s.properties.headers)
        self.assertEqual("00-t", s.properties.headers["traceparent"])
        import datetime
        at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
        dl = d.dead_letter(names, (1, "a"), "permanent", "x" * 5000, "w1", None, at)
        h = dl.properties.headers
        self.assertEqual(("p.dlx.x", "task.failed"), (dl.exchange, dl.routing_key))
        self.assertEqual(("permanent", 4096, "w1", "2026-01-02T03:04:05.678000Z", 1),
                         (h["x-failure-reason"], len(h["x-error"]), h["x-worker"], h["x-failed-at"], h["x-retry"]))
        self.assertNotIn("x-started-at", h)

    def test_attempt_message_and_traceback_header(self):
        names = _wire.Names("p.")
        d = self.delivery({"job_id": "j", "tasks": [{"task_id": 1, "payload": "a"}, {"task_id": 2, "payload": "b"}]})
        tb = "Traceback (most recent call last):\n" + "é" * _wire.MAX_TRACEBACK_BYTES + "\nValueError: no\n"
        a = d.retried_attempt(names, {"task_id": 2, "result": None, "error": "ValueError: no", "traceback": tb, "attempt": 2})
        self.assertEqual(("p.results.x", "attempt", "j:2", True), (a.exchange, a.routing_key, a.properties.message_id, a.optional))
        self.assertEqual(2, a.properties.headers["x-generation"])
        body = json.loads(a.body)
        self.assertEqual(("j", 2, "retried", 2), (body["job_id"], body["task_id"], body["status"], body["attempt"]))
        self.assertLessEqual(len(body["traceback"].encode()), _wire.MAX_TRACEBACK_BYTES)
        self.assertTrue(body["traceback"].endswith("ValueError: no\n"), "the end, where the exception is, is kept")
        self.assertFalse(d.retry(names, (2, "b"), 5000).optional, "a retry must be routed")
        dl = d.dead_letter(names, (1, "a"), "retries_exhausted", "ValueError: no", "w1", None, _wire.parse_time("2026-01-02T03:04:05Z"), traceback=tb)
        self.assertEqual(body["traceback"], dl.properties.headers["x-traceback"])
        dl = d.dead_letter(names, (1, "a"), "permanent", "no", "w1", None, _wire.parse_time("2026-01-02T03:04:05Z"))
        self.assertNotIn("x-traceback", dl.properties.headers)

    def test_result_batches_are_cut_to_fit(self):
        names = _wire.Names("")
        d = self.delivery({"job_id": "j", "tasks": [{"task_id": i} for i in range(1, 5)]})
        results = [{"task_id": i, "result": "x" * 300} for i in range(1, 5)]
        outs = d.results(names, results, 700)
        self.assertEqual(["j:1+2", "j:3+2"], [o.properties.message_id for o in outs])
        self.assertTrue(all(len(o.body) <= 700 for o in outs))
        self.assertEqual({"x-generation": 2, "traceparent": "00-t"}, outs[0].properties.headers)
        single = self.delivery({"job_id": "j", "task_id": 9})
        (out,) = single.results(names, [{"task_id": 9, "result": 1}], 700)
        self.assertEqual(("results.x", "result", "j:9"), (out.exchange, out.routing_key, out.properties.message_id))
        self.assertEqual({"job_id": "j", "task_id": 9, "result": 1}, json.loads(out.body))


class ReduceWireTest(unittest.TestCase):
    def test_task_id_zero_only_with_reduce(self):
        self.assertEqual(("j", [(0, {"k": 1})], False, True, 9),
                         _wire.decode_task_message(b'{"job_id":"j","task_id":0,"reduce":true,"payload":{"k":1},"expected_tasks":9}'))
        for body in (b'{"job_id":"j","task_id":0}', b'{"job_id":"j","task_id":0,"reduce":false}',
                     b'{"job_id":"j","task_id":2,"reduce":true}', b'{"job_id":"j","task_id":0,"reduce":1}',
                     b'{"job_id":"j","reduce":true,"tasks":[{"task_id":1}]}'):
            with self.assertRaises(_wire.Malformed, msg=body):
                _wire.decode_task_message(body)

    def test_outcomes_reply(self):
        kind, page, nxt = _wire.decode_outcomes_reply(
            b'{"outcomes":[{"task_id":1,"state":"completed","result":2},{"task_id":2,"state":"failed","error":"x"}],"next":2}', 0)
        self.assertEqual(("page", 2), (kind, nxt))
        self.assertEqual([_wire.Outcome(1, "completed", 2, ""), _wire.Outcome(2, "failed", None, "x")], page)
        self.assertEqual(("error", "stale", "m"), _wire.decode_outcomes_reply(b'{"error":{"code":"stale","message":"m"}}', 0))
        for body in (b'{}', b'{"outcomes":[]}', b'{"outcomes":[{"task_id":1,"state":"pending"}]}', b'{"error":{}}'):
            with self.assertRaises(_wire.Malformed, msg=body):
                _wire.decode_outcomes_reply(body, 0)

