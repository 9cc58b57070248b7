"""Workers that are signalled, killed, or lose their connection."""

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from .harness import AMQP_URL, TIERS, WarrenTestCase, admin_connection

HERE = os.path.dirname(os.path.abspath(__file__))


class Proc:
    """A worker_proc.py process whose output lines can be waited for."""

    def __init__(self, test, name):
        env = dict(os.environ, WARREN_AMQP_URL=AMQP_URL, WARREN_PREFIX=test.prefix, WARREN_RETRY_TIERS=TIERS)
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"), name], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()
        test.addCleanup(self.kill)

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, prefix, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no line %r in %ss; output: %s" % (prefix, timeout, "\n".join(self.seen)))
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.p.stdout.close()


class ProcessTest(WarrenTestCase):

    def test_sigterm_drains_the_task_in_flight(self):
        w = Proc(self, "py-drain")
        w.wait_line("event connected")
        job_id = self.server.submit({"type": "sleepy", "batch_size": 1, "tasks": [{"seconds": 1}]})
        w.wait_line("started " + job_id)
        w.p.send_signal(signal.SIGTERM)
        w.wait_line("event draining")
        w.wait_line("event completed " + job_id)
        w.wait_line("exited")
        self.assertEqual(0, w.p.wait(30))
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        (t,) = self.server.tasks(job_id)
        self.assertEqual(("completed", "py-drain"), (t["state"], t["worker"]))
        self.assertEqual({"slept": 1, "by": "py-drain"}, t["result"])

    def test_a_killed_worker_loses_nothing(self):
        a = Proc(self, "py-killed")
        a.wait_line("event connected")
        job_id = self.server.submit({"type": "sleepy", "batch_size": 1, "tasks": [{"seconds": 60}]})
        a.wait_line("started " + job_id)
        a.p.send_signal(signal.SIGKILL)
        a.p.wait()
        ran = []

        def sleepy(payload, task):
            ran.append((task.task_id, task.attempt))
            return {"slept": 0, "by": "py-survivor"}

        self.start_worker({"sleepy": sleepy}, name="py-survivor")
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual((1, 1, 0), (job["expected_tasks"], job["completed_tasks"], job["failed_tasks"]),
                         "the task is counted once")
        (t,) = self.server.tasks(job_id)
        self.assertEqual(("completed", "py-survivor"), (t["state"], t["worker"]))
        self.assertEqual([(1, 1)], ran, "redelivered once to the other worker; a crash is not a retry")

    @unittest.skipUnless(shutil.which("rabbitmqctl"), "needs rabbitmqctl to close the worker's connection")
    def test_a_lost_connection_is_reconnected(self):
        w = self.start_worker({"echo": lambda p, t: p}, name="py-reconnect-%d" % os.getpid())
        out = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if out.returncode != 0:
            self.skipTest("rabbitmqctl cannot list connections: " + out.stdout)
        mine = [line.split("\t")[0] for line in out.stdout.splitlines()
                if "warren worker %s (consumer" % w.worker.name in line]
        self.assertEqual(1, len(mine), out.stdout)
        subprocess.run(["rabbitmqctl", "-q", "close_connection", mine[0], "test: connection lost"], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        w.wait_for(lambda evs: any(e.kind == "reconnected" for e in evs), what="a reconnect")
        job_id = self.server.submit({"type": "echo", "reduce": "collect", "tasks": [1, 2, 3]})
        self.assertEqual("completed", self.server.wait_closed(job_id)["state"])
        self.assertEqual([1, 2, 3], self.server.result(job_id))

    def test_a_channel_the_broker_closes_is_a_lost_connection(self):
        # pika raises nothing when the broker closes a channel (a consumer
        # timeout, say): the worker must notice, or it takes no more tasks
        # while its heartbeats say it is alive. Closing the channel from
        # the client looks the same to the worker's loop.
        w = self.start_worker({"echo": lambda p, t: p}, name="py-channel-%d" % os.getpid())
        w.wait_for(lambda evs: any(e.kind == "connected" for e in evs), what="the first connection")
        s = w.worker._session
        s.conn.add_callback_threadsafe(s.ch.close)
        w.wait_for(lambda evs: any(e.kind == "reconnected" for e in evs), what="a reconnect")
        job_id = self.server.submit({"type": "echo", "reduce": "collect", "tasks": [1, 2, 3]})
        self.assertEqual("completed", self.server.wait_closed(job_id)["state"])
        self.assertEqual([1, 2, 3], self.server.result(job_id))

    def test_an_unconfirmed_result_sends_the_task_back(self):
        # Unbind results.q: a result is then returned unroutable, not
        # confirmed, and the worker must not ack its task.
        admin = admin_connection()
        self.addCleanup(admin.close)
        ch = admin.channel()
        results_q, results_x = self.prefix + "results.q", self.prefix + "results.x"
        runs = []

        def echo(payload, task):
            runs.append(task.task_id)
            return payload

        w = self.start_worker({"echo": echo}, name="py-refused")  # it binds results.q: unbind after
        ch.queue_unbind(results_q, results_x, routing_key="result")
        self.addCleanup(ch.queue_bind, results_q, results_x, routing_key="result")
        job_id = self.server.submit({"type": "echo", "batch_size": 1, "tasks": ["x"]})
        w.wait_for(lambda evs: any(e.kind == "publish_failed" and e.job_id == job_id for e in evs), what="a refused result")
        self.assertEqual([], w.kinds("completed"), "a task whose result was refused is not acked")
        ch.queue_bind(results_q, results_x, routing_key="result")
        job = self.server.wait_closed(job_id)
        self.assertEqual(("completed", 1), (job["state"], job["completed_tasks"]))
        self.assertGreaterEqual(len(runs), 2, "the task ran again after its result was refused")
        self.assertEqual(1, len(w.kinds("completed")))


class TopologyTest(unittest.TestCase):
    """The topology a worker declares, without a server."""

    def test_a_queue_with_other_arguments_stops_run_with_the_brokers_reason(self):
        import pika
        from warren_worker import Worker
        from .harness import delete_topology, new_prefix
        prefix = new_prefix("conflict")
        self.addCleanup(delete_topology, prefix)
        admin = admin_connection()
        self.addCleanup(admin.close)
        admin.channel().queue_declare(prefix + "tasks.q", durable=True,
                                      arguments={"x-queue-type": "quorum", "x-delivery-limit": 5})
        w = Worker(amqp_url=AMQP_URL, prefix=prefix, heartbeat_interval=None)
        w.add_handler("echo", lambda p, t: p)
        with self.assertLogs("warren_worker", "ERROR") as logs, self.assertRaises(pika.exceptions.ChannelClosedByBroker) as cm:
            w.run()
        self.assertEqual(406, cm.exception.reply_code)
        self.assertIn("use another WARREN_PREFIX", logs.output[0])
