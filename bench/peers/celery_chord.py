#!/usr/bin/python3
"""The many-small-jobs benchmark on Celery: chords of no-op tasks.

    /usr/bin/python3 bench/peers/celery_chord.py [--clients C] [--jobs J]
        [--job-tasks T] [--workers W] [--concurrency N] [--alone-jobs A] [--json]

The same measurement as `warren bench --small-jobs`: C client threads share
J jobs; each job is a Celery chord, a header of T no-op tasks and a callback
that collects their results, submitted with chord(header)(callback) and
waited for with AsyncResult.get() on the callback's result. Before that, one
client alone runs A jobs (alone_p50_ms, alone_p99_ms). W worker processes
(`celery worker --pool threads --concurrency N`) run the tasks.

Broker: the local RabbitMQ (--broker), one queue and exchange named
peers-celery-<random> for the run, deleted at the end. Results: Redis
(--backend, database 13 by default); every key the run created is deleted
at the end and all of them expire after an hour anyway. Needs Debian's
python3-celery and python3-redis (bench/peers/celery-deps.sh installs them).

With --json, one JSON object on stdout: jobs_per_s, tasks_per_s, p50_ms,
p95_ms, p99_ms (submit to the callback's result), alone_p50_ms,
alone_p99_ms, and the configuration. Progress goes to stderr. Errors are
one line on stderr (celery_chord: ...), exit status 1 (2 for bad flags, 130
when interrupted).
"""

import argparse
import json
import math
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

# The worker processes import this module (celery -A celery_chord), so the
# app's settings come from the environment the parent sets for them.
ENV_BROKER = "PEERS_CELERY_BROKER"
ENV_BACKEND = "PEERS_CELERY_BACKEND"
ENV_QUEUE = "PEERS_CELERY_QUEUE"
ENV_READY_DIR = "PEERS_CELERY_READY_DIR"

DEFAULT_BROKER = "amqp://guest:guest@127.0.0.1:5672//"
DEFAULT_BACKEND = "redis://127.0.0.1:6379/13"

try:
    from celery import Celery, chord
    from celery.signals import worker_ready
except ImportError:  # reported by main, not at import in a worker
    Celery = None


def make_app():
    """The Celery app of one run, configured from the environment."""
    queue = os.environ.get(ENV_QUEUE, "peers-celery")
    app = Celery(
        "peers_celery_chord",
        broker=os.environ.get(ENV_BROKER, DEFAULT_BROKER),
        backend=os.environ.get(ENV_BACKEND, DEFAULT_BACKEND),
    )
    app.conf.update(
        # One queue of the run's own (its exchange takes the same name).
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        # A chord needs its header's results (Celery's docs: tasks in a
        # chord must not ignore their results); they expire after an hour
        # even if the run is killed before its cleanup.
        task_ignore_result=False,
        result_expires=3600,
        # No remote control (no pidbox queue/exchange per worker) and no
        # events: nothing the benchmark does uses them.
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    return app


if Celery is not None:
    app = make_app()

    @app.task(name="peers.noop")
    def noop(i):
        """A no-op task: returns its argument."""
        return i

    @app.task(name="peers.collect")
    def collect(results):
        """The chord's callback: gets the header's results, returns how many."""
        return len(results)

    @worker_ready.connect
    def _ready(sender=None, **_):
        ready_dir = os.environ.get(ENV_READY_DIR)
        if ready_dir:
            name = getattr(sender, "hostname", None) or str(os.getpid())
            with open(os.path.join(ready_dir, name), "w") as fh:
                fh.write("ready\n")


class Usage(Exception):
    """A command-line error."""


def fail(msg, code=1):
    print("celery_chord: " + " ".join(str(msg).split()), file=sys.stderr)
    sys.exit(code)


def progress(msg):
    print("peers celery: " + msg, file=sys.stderr, flush=True)


def percentile(sorted_ms, p):
    """Nearest-rank percentile of a sorted list (the smallest value with at
    least p% of the values at or below it)."""
    if not sorted_ms:
        return 0.0
    k = max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)
    return sorted_ms[k]


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="celery_chord.py",
        description="Many small jobs on Celery: C client threads submit J chords of T no-op tasks and wait for each.",
    )
    ap.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--jobs", type=int, default=400, help="chords in all, shared by the clients (default 400)")
    ap.add_argument("--job-tasks", type=int, default=10, help="no-op tasks in each chord's header (default 10)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--concurrency", type=int, default=16, help="threads of each worker's pool (default 16)")
    ap.add_argument("--alone-jobs", type=int, default=100, help="chords run by one client alone first (default 100; 0: skip)")
    ap.add_argument("--broker", default=DEFAULT_BROKER, help="broker URL (default the local RabbitMQ)")
    ap.add_argument("--backend", default=DEFAULT_BACKEND, help="result backend URL (default Redis database 13)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before the run gives up (default 600)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        if e.code == 0:
            raise
        sys.exit(2)
    for name in ("clients", "jobs", "job_tasks", "workers", "concurrency"):
        if getattr(args, name) < 1:
            raise Usage("--%s must be >= 1, got %d" % (name.replace("_", "-"), getattr(args, name)))
    if args.alone_jobs < 0:
        raise Usage("--alone-jobs must be >= 0, got %d" % args.alone_jobs)
    if args.timeout <= 0:
        raise Usage("--timeout must be > 0")
    return args


class Run:
    """One benchmark run: its workers, its queue, the keys it created."""

    def __init__(self, args):
        self.args = args
        self.tag = secrets.token_hex(4)
        self.queue = "peers-celery-" + self.tag
        self.workers = []
        self.keys = []  # result keys to delete at the end
        self.keys_lock = threading.Lock()
        self.ready_dir = tempfile.mkdtemp(prefix="peers-celery-")
        self.deadline = time.monotonic() + args.timeout

    def remaining(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("not finished after --timeout %gs" % self.args.timeout)
        return left

    def start_workers(self):
        env = dict(os.environ)
        env.update({ENV_BROKER: self.args.broker, ENV_BACKEND: self.args.backend,
                    ENV_QUEUE: self.queue, ENV_READY_DIR: self.ready_dir})
        here = os.path.dirname(os.path.abspath(__file__))
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        for i in range(self.args.workers):
            # -W ignore: Celery warns when a worker runs as root (as here).
            cmd = [sys.executable, "-W", "ignore", "-m", "celery", "-A", "celery_chord", "--quiet", "--no-color", "worker",
                   "--pool", "threads", "--concurrency", str(self.args.concurrency),
                   "--queues", self.queue, "--hostname", "peers%d-%s@%%h" % (i, self.tag),
                   "--without-gossip", "--without-mingle", "--without-heartbeat",
                   "--loglevel", "WARNING"]
            self.workers.append(subprocess.Popen(cmd, cwd=here, env=env, stdin=subprocess.DEVNULL,
                                                 stdout=sys.stderr, stderr=sys.stderr))
        while len(os.listdir(self.ready_dir)) < self.args.workers:
            for w in self.workers:
                if w.poll() is not None:
                    raise RuntimeError("a celery worker exited with status %d before it was ready" % w.returncode)
            self.remaining()
            time.sleep(0.05)

    def stop_workers(self):
        """Warm shutdown (SIGTERM), then cold (SIGQUIT), then SIGKILL: an
        idle worker's warm or cold shutdown takes about 10 s here, and every
        chord has been waited for by then, so nothing is lost."""
        for sig, wait in ((signal.SIGTERM, 2), (signal.SIGQUIT, 1), (signal.SIGKILL, 10)):
            for w in self.workers:
                if w.poll() is None:
                    w.send_signal(sig)
            deadline = time.monotonic() + wait
            for w in self.workers:
                try:
                    w.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    pass
            if all(w.poll() is not None for w in self.workers):
                break
        self.workers = []

    def one_job(self):
        """Submits one chord and waits for its callback; returns seconds."""
        t = self.args.job_tasks
        t0 = time.perf_counter()
        res = chord(noop.s(i) for i in range(t))(collect.s())
        got = res.get(timeout=self.remaining())
        elapsed = time.perf_counter() - t0
        backend = app.backend
        keys = [backend.get_key_for_task(res.id)]
        header = res.parent
        if header is not None:
            keys += [backend.get_key_for_task(r.id) for r in header.results]
            keys += [backend.get_key_for_group(header.id, s) for s in ("", ".j", ".t", ".s")]
        with self.keys_lock:
            self.keys.extend(keys)
        if got != t:
            raise RuntimeError("a chord's callback collected %r results, want %d" % (got, t))
        return elapsed

    def pass_(self, clients, jobs):
        """C threads share the jobs; returns (latencies in ms, seconds)."""
        lats, errors = [], []
        lock = threading.Lock()
        left = [jobs]

        def client():
            try:
                while True:
                    with lock:
                        if left[0] == 0 or errors:
                            return
                        left[0] -= 1
                    s = self.one_job()
                    with lock:
                        lats.append(s * 1000)
            except Exception as e:  # noqa: BLE001 - reported by the caller
                with lock:
                    errors.append(e)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=max(self.deadline - time.monotonic(), 0) + 1)
            if th.is_alive():
                raise TimeoutError("not finished after --timeout %gs" % self.args.timeout)
        total = time.perf_counter() - t0
        if errors:
            raise errors[0]
        lats.sort()
        return lats, total

    def cleanup(self):
        """Deletes the run's result keys, queue and exchange."""
        problems = []
        try:
            client = app.backend.client
            keys = self.keys
            for off in range(0, len(keys), 1000):
                client.delete(*keys[off:off + 1000])
            progress("deleted %d result keys" % len(keys))
        except Exception as e:  # noqa: BLE001
            problems.append("deleting result keys: %s" % e)
        try:
            with app.connection_for_write() as conn:
                ch = conn.default_channel
                ch.queue_delete(self.queue)
                ch.exchange_delete(self.queue)
            progress("deleted queue and exchange %s" % self.queue)
        except Exception as e:  # noqa: BLE001
            problems.append("deleting queue %s: %s" % (self.queue, e))
        try:
            for name in os.listdir(self.ready_dir):
                os.remove(os.path.join(self.ready_dir, name))
            os.rmdir(self.ready_dir)
        except OSError:
            pass
        return problems


def run(args):
    r = Run(args)
    # The app was made at import from the environment; the run's settings
    # replace those before anything connects.
    app.conf.update(broker_url=args.broker, result_backend=args.backend,
                    task_default_queue=r.queue, task_default_exchange=r.queue,
                    task_default_routing_key=r.queue)
    rep = {"system": "celery", "config": "chord,threads,rabbitmq,redis-results" if args.broker.startswith("amqp") else "chord,threads",
           "clients": args.clients, "jobs": args.jobs, "job_tasks": args.job_tasks,
           "workers": args.workers, "concurrency": args.concurrency, "alone_jobs": args.alone_jobs}
    # Fail in seconds, not at --timeout, when the broker or Redis is down.
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError("broker %s: %s" % (conn.as_uri(), e)) from None
    try:
        app.backend.client.ping()
    except Exception as e:  # noqa: BLE001
        raise RuntimeError("result backend %s: %s" % (args.backend, e)) from None
    cleanup_problems = []
    try:
        progress("starting %d workers (threads pool x %d), queue %s" % (args.workers, args.concurrency, r.queue))
        r.start_workers()
        # Warm-up, not timed: one chord per client, all at once (connections,
        # the workers' first tasks).
        r.pass_(args.clients, args.clients)
        if args.alone_jobs:
            lats, _ = r.pass_(1, args.alone_jobs)
            rep["alone_p50_ms"] = round(percentile(lats, 50), 2)
            rep["alone_p99_ms"] = round(percentile(lats, 99), 2)
            progress("one client: %d jobs, p50 %.1f ms, p99 %.1f ms" % (args.alone_jobs, rep["alone_p50_ms"], rep["alone_p99_ms"]))
        lats, total = r.pass_(args.clients, args.jobs)
        rep.update({
            "total_s": round(total, 3),
            "jobs_per_s": round(args.jobs / total, 1),
            "tasks_per_s": round(args.jobs * args.job_tasks / total, 1),
            "p50_ms": round(percentile(lats, 50), 2),
            "p95_ms": round(percentile(lats, 95), 2),
            "p99_ms": round(percentile(lats, 99), 2),
        })
        progress("%d clients: %d jobs in %.3f s, %.1f jobs/s, p50 %.1f ms, p99 %.1f ms" % (
            args.clients, args.jobs, total, rep["jobs_per_s"], rep["p50_ms"], rep["p99_ms"]))
    finally:
        r.stop_workers()
        cleanup_problems = r.cleanup()
    if cleanup_problems:
        raise RuntimeError("; ".join(cleanup_problems))
    # The client process's own peak RSS (the workers are other processes).
    rep["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return rep


def _interrupt(signum, frame):
    raise KeyboardInterrupt()


def main(argv):
    try:
        args = parse_args(argv)
    except Usage as e:
        fail(e, 2)
    if Celery is None:
        fail("/usr/bin/python3 cannot import celery and redis: run bench/peers/celery-deps.sh "
             "(Debian: apt-get install python3-celery python3-redis)")
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        rep = run(args)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as e:  # noqa: BLE001 - one line, as the other peers
        fail(e)
    if args.json:
        print(json.dumps(rep))
    else:
        print("celery (%s): %d clients, %d jobs of %d tasks, %d workers x %d threads" % (
            rep["config"], args.clients, args.jobs, args.job_tasks, args.workers, args.concurrency))
        print("  %.1f jobs/s, %.1f tasks/s, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms" % (
            rep["jobs_per_s"], rep["tasks_per_s"], rep["p50_ms"], rep["p95_ms"], rep["p99_ms"]))
        if "alone_p50_ms" in rep:
            print("  one client alone: p50 %.1f ms, p99 %.1f ms" % (rep["alone_p50_ms"], rep["alone_p99_ms"]))


if __name__ == "__main__":
    main(sys.argv[1:])
