"""Submit a job from a generator, wait for it to close, and print its result.

Needs a warren server and a worker serving "echo" tasks: from the root of
the repository,

    go build -o warren ./cmd/warren
    ./warren server &
    ./warren worker &                 # built-in handlers, echo among them
    python3 python/examples/client_submit_wait.py 100000

The job's tasks are the numbers 1..N; echo returns each, and the built-in
"sum" reducer adds them up, so the result is N(N+1)/2. The client finds the
server as the warren command does (WARREN_SERVER, WARREN_TOKEN).
"""

import os
import sys
import time

# Run from a checkout without installing the distribution.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from warren_client import Client, WarrenError  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    client = Client()
    start = time.monotonic()
    # A generator: the tasks stream to the server as they are made.
    job = client.submit("echo", (i for i in range(1, n + 1)), reduce="sum", metadata={"example": "client_submit_wait"})
    print("submitted job %s (%d tasks) in %.2f s" % (job.id, n, time.monotonic() - start))

    def progress(j):
        print("  %-9s %d/%d completed, %d failed" % (j.state, j.completed_tasks, j.expected_tasks, j.failed_tasks))

    done = client.wait(job.id, timeout=600, on_progress=progress)
    if done.state != "completed":
        print("job %s %s: %s" % (done.id, done.state, done.error), file=sys.stderr)
        return 1
    result = client.result(job.id)
    print("result: %s (expected %d)" % (result, n * (n + 1) // 2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except WarrenError as e:
        print("client_submit_wait: %s" % e, file=sys.stderr)
        sys.exit(1)
