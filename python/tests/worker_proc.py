"""A worker process for the tests that kill or signal one (not a test module).

Usage: python3 worker_proc.py NAME; WARREN_AMQP_URL, WARREN_PREFIX and
WARREN_RETRY_TIERS come from the environment. It prints one line per
event and "started JOB TASK" when a handler starts.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from warren_worker import Worker  # noqa: E402


def main():
    w = Worker(name=sys.argv[1], concurrency=2, heartbeat_interval=None,
               on_event=lambda ev: print("event", ev.kind, ev.job_id, ev.task_id, flush=True))

    @w.handler("sleepy")
    def sleepy(payload, task):
        print("started", task.job_id, task.task_id, flush=True)
        time.sleep(payload["seconds"])
        return {"slept": payload["seconds"], "by": w.name}

    w.run()
    print("exited", flush=True)


if __name__ == "__main__":
    main()
