"""Spawned tasks from the Python worker, against a real warren server and RabbitMQ."""

import threading

from .harness import WarrenTestCase


class SpawnTest(WarrenTestCase):
    server_env = {"WARREN_MAX_JOB_TASKS": "50"}

    def test_a_crawl_spawns_its_tree_once(self):
        def crawl(page, task):
            if page["depth"] < 2:
                links = [{"path": "%s.%d" % (page["path"], i), "depth": page["depth"] + 1} for i in range(3)]
                task.spawn(links[:1])  # more than once in one run
                task.spawn(links[1:])
            return page["path"]

        self.start_worker({"crawl": crawl}, name="py-crawl", concurrency=4)
        job_id = self.server.submit({"type": "crawl", "reduce": "collect",
                                     "tasks": [{"path": "r", "depth": 0}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual(13, job["expected_tasks"])
        self.assertEqual(12, job["spawned_tasks"], "every page but the root was spawned")
        paths = self.server.result(job_id)
        self.assertEqual(13, len(paths))
        self.assertEqual(13, len(set(paths)))
        self.assertEqual("r", paths[0])
        depths = [p.count(".") for p in paths]
        self.assertEqual(sorted(depths), depths, "children get task ids after their parents")

    def test_a_failed_run_spawns_nothing_and_a_retry_spawns_once(self):
        lock = threading.Lock()
        tries = {}

        def flaky(payload, task):
            task.spawn([{"child": payload["n"]}] if "n" in payload else [])
            with lock:
                tries[payload.get("n")] = tries.get(payload.get("n"), 0) + 1
                if "n" in payload and tries[payload["n"]] < 2:
                    raise RuntimeError("transient")
            return "ok"

        self.start_worker({"flaky": flaky}, name="py-flaky", concurrency=2)
        job_id = self.server.submit({"type": "flaky", "max_retries": 3, "tasks": [{"n": 1}, {"n": 2}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual(4, job["expected_tasks"], "each parent's spawn once, from the run that completed")

    def test_a_spawn_over_the_job_limit_fails_its_task(self):
        def greedy(payload, task):
            task.spawn([{}] * 60)
            return "ok"

        def bad(payload, task):
            try:
                task.spawn("not a list")
            except TypeError:
                return "refused"
            return "accepted"

        self.start_worker({"greedy": greedy, "bad": bad}, name="py-greedy")
        job_id = self.server.submit({"type": "greedy", "tasks": [{}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("failed", job["state"])
        self.assertEqual(1, job["expected_tasks"])
        self.assertIn("over the limit of 50 tasks per job", self.server.tasks(job_id)[0]["error"])

        job_id = self.server.submit({"type": "bad", "reduce": "collect", "tasks": [{}]})
        self.server.wait_closed(job_id)
        self.assertEqual(["refused"], self.server.result(job_id))


class SpawnPartsTest(WarrenTestCase):
    def test_a_spawn_over_one_message_goes_in_parts(self):
        def fan(payload, task):
            if payload["n"] == 0:
                task.spawn([{"n": i, "pad": "p" * 1024} for i in range(1, 201)])
            return payload["n"]

        # 200 KiB of spawn in messages of 64 KiB.
        self.start_worker({"fan": fan}, name="py-fan", max_message_bytes=64 << 10, max_result_bytes=16 << 10)
        job_id = self.server.submit({"type": "fan", "reduce": "collect", "tasks": [{"n": 0}]})
        job = self.server.wait_closed(job_id)
        self.assertEqual("completed", job["state"])
        self.assertEqual(201, job["expected_tasks"])
        self.assertEqual(list(range(0, 201)), self.server.result(job_id), "every child once, in spawn order")
