#!/usr/bin/python3
"""bench/reduce.py: a reduce task written in Python, measured (docs/performance.md, "Reduce tasks").

Runs, against the local RabbitMQ, a `warren server` (a temporary SQLite
store) and a Go `warren worker` (echo) for the map tasks, and a Python
worker (warren_worker) whose reducer sums the results on a queue of its
own. Submits a job of N tasks (payloads 1..N, streamed with
warren_client) whose reduce is that Python reducer, waits for it, checks
the sum, and reports the time from the reduce task's start to the job's
close, the reduce task's own run, and the peak RSS of the server and of
the Python worker. With --compare, each round first runs the same job
with the built-in reducer `sum`, and both jobs' time from their last map
result to their close is measured: the overhead of a reduce task.

    bench/reduce.py [--tasks 1000000] [--compare] [--rounds R] [--warren PATH]

Needs /usr/bin/python3 with pika (python/test.sh installs it) and Go.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

from warren_client import Client  # noqa: E402

AMQP = os.environ.get("WARREN_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

REDUCER = r'''
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
from warren_worker import Worker

w = Worker(concurrency=1, queues=["reduce"])

@w.reducer("sum_py")
def sum_py(outcomes, job):
    total = failed = 0
    for o in outcomes:
        if o.state == "completed":
            total += o.result
        else:
            failed += 1
    return {"sum": total, "failed": failed}

w.run()
'''


def peak_rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ts(s):
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def last_result_to_close(client, job_id, closed):
    """Seconds from the job's last map task result to its close (every task read, page by page)."""
    last = max(ts(t.finished_at) for t in client.tasks(job_id) if t.task_id > 0 and t.finished_at)
    return ts(closed.finished_at) - last


def run_job(client, n, reduce):
    t0 = time.time()
    job = client.submit("echo", (i for i in range(1, n + 1)), reduce=reduce)
    closed = client.wait(job.id, timeout=3600)
    wall = time.time() - t0
    if closed.state != "completed":
        raise SystemExit("job %s is %s: %s" % (job.id, closed.state, closed.error))
    result = client.result(job.id)
    return job.id, closed, result, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000000)
    ap.add_argument("--compare", action="store_true",
                    help="before each reduce-task job, run the same job with the built-in reducer sum, and measure both jobs' "
                         "time from their last map result to their close (reads every task)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (built-in, reduce task) interleaved; medians reported")
    ap.add_argument("--warren", default="", help="a warren binary (default: go build ./cmd/warren)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="warren-reduce-bench-")
    binary = args.warren
    if not binary:
        binary = os.path.join(tmp, "warren")
        subprocess.run(["go", "build", "-o", binary, "./cmd/warren"], cwd=REPO, check=True)
    prefix = "rbench-%d." % os.getpid()
    base = "127.0.0.1:%d" % free_port()
    env = dict(os.environ, WARREN_AMQP_URL=AMQP, WARREN_PREFIX=prefix, WARREN_LOG_LEVEL="warn",
               WARREN_DATABASE_URL="sqlite://" + os.path.join(tmp, "warren.db"), WARREN_LISTEN=base,
               WARREN_MAX_BODY=str(256 << 20))
    procs = []
    try:
        server = subprocess.Popen([binary, "server"], env=env)
        procs.append(server)
        client = Client("http://" + base, "")
        for _ in range(300):
            try:
                urllib.request.urlopen("http://%s/readyz" % base, timeout=1).read()
                break
            except Exception:
                time.sleep(0.1)
        mapper = subprocess.Popen([binary, "worker", "--types", "echo", "--concurrency", "32"], env=env)
        reducer = subprocess.Popen(["/usr/bin/python3", "-c", REDUCER, REPO], env=env)
        procs += [mapper, reducer]
        n = args.tasks
        want = n * (n + 1) // 2
        out = {"tasks": n, "rounds": args.rounds}
        builtin, reduced = [], []
        for _ in range(args.rounds):
            if args.compare:
                job_id, closed, result, wall = run_job(client, n, "sum")
                if result != want:
                    raise SystemExit("built-in sum: got %r, want %d" % (result, want))
                builtin.append((wall, last_result_to_close(client, job_id, closed)))
            job_id, closed, result, wall = run_job(client, n, {"task": "sum_py", "queue": "reduce"})
            if result != {"sum": want, "failed": 0}:
                raise SystemExit("reduce task: got %r, want sum %d" % (result, want))
            task0 = next(iter(client.tasks(job_id)))
            reduced.append((wall, last_result_to_close(client, job_id, closed) if args.compare else None,
                            ts(closed.finished_at) - ts(task0.queued_at), ts(task0.finished_at) - ts(task0.started_at)))
        med = lambda xs: round(statistics.median(xs), 3)
        out.update({
            "reduce_wall_s": med([r[0] for r in reduced]),
            "reduce_task_queued_to_close_s": med([r[2] for r in reduced]),
            "reduce_task_run_s": med([r[3] for r in reduced]),
            "server_peak_rss_mb": round(peak_rss_mb(server.pid), 1),
            "python_worker_peak_rss_mb": round(peak_rss_mb(reducer.pid), 1),
        })
        if args.compare:
            out.update({
                "builtin_wall_s": med([b[0] for b in builtin]),
                "builtin_last_result_to_close_s": med([b[1] for b in builtin]),
                "reduce_last_result_to_close_s": med([r[1] for r in reduced]),
            })
        print(json.dumps(out))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        delete_topology(prefix)
        shutil.rmtree(tmp, ignore_errors=True)


def delete_topology(prefix):
    """Delete every queue and exchange of the run (the default tiers, queues default and reduce)."""
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    try:
        ch = conn.channel()
        tiers = ["1s", "5s", "30s", "2m", "10m"]
        queues = ["tasks.q", "tasks.reduce.q", "results.q", "tasks.dlq", "dead.q", "results.dlq", "outcomes.q"]
        queues += ["retry.%s.q" % t for t in tiers] + ["retry.reduce.%s.q" % t for t in tiers]
        for q in queues:
            ch.queue_delete(prefix + q)
        for x in ["jobs.x", "results.x", "dlx.x", "retry.x", "control.x", "heartbeat.x"]:
            ch.exchange_delete(prefix + x)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
