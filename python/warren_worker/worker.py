"""The warren worker: consume task messages, run handlers, publish outcomes.

Threads:

* the thread that calls ``Worker.run`` owns the consumer connection: it
  declares the topology, consumes the work queues and the control queue,
  and does every ack and nack;
* a publisher thread owns a second connection, on which outcomes are
  published with publisher confirms and heartbeats are sent. RabbitMQ
  blocks a connection that publishes during a memory or disk alarm; the
  consumer connection, which never publishes, can still ack (as warren's
  Go worker does);
* ``concurrency`` handler threads run the handlers.

pika connections are not thread-safe, so work crosses threads only through
``add_callback_threadsafe`` of the connection that must do it: a handler
thread hands its outcomes to the publisher, the publisher hands the
confirmed (or failed) outcome back to the consumer thread, which acks (or
rejects with requeue) the task. A task is acked only once every message
that settles it is confirmed.
"""

import collections
import os
import queue
import random
import signal
import socket
import threading
import time
import uuid

import pika
import pika.exceptions

from . import _wire
from ._session import _Session
from ._task import Event, OutcomesError, Permanent, ReduceJob, Stale, Task, _go_duration, _now, log
from ._wire import Names, Outcome

__all__ = ["Worker", "Task", "Permanent", "Event", "ReduceJob", "Outcome", "OutcomesError", "Stale"]

DEFAULT_CONCURRENCY = 8
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_HEARTBEAT_INTERVAL = 5.0
DEFAULT_RECONNECT_BACKOFF_MAX = 10.0
DEFAULT_MAX_INFLIGHT_BYTES = 256 << 20
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"

# Cancelled jobs remembered (as the Go worker: 100,000 for 24 hours).
_MAX_CANCELLED = 100_000
_CANCELLED_TTL = 24 * 3600.0


def _env(name):
    v = os.environ.get(name, "")
    return v.strip() or None


class _CancelSet:
    """Cancelled job ids, bounded in number and age; used from the consumer thread only."""

    def __init__(self, limit=_MAX_CANCELLED, ttl=_CANCELLED_TTL):
        self.limit, self.ttl = limit, ttl
        self._ids = collections.OrderedDict()

    def add(self, job_id):
        now = time.monotonic()
        self._ids.pop(job_id, None)
        self._ids[job_id] = now
        while self._ids:
            oldest, at = next(iter(self._ids.items()))
            if len(self._ids) <= self.limit and now - at < self.ttl:
                break
            del self._ids[oldest]

    def __contains__(self, job_id):
        at = self._ids.get(job_id)
        return at is not None and time.monotonic() - at < self.ttl


class _PauseSet:
    """Paused jobs and queues, each until PAUSE_LEASE_S after its last pause message; consumer thread only."""

    def __init__(self, lease=_wire.PAUSE_LEASE_S, limit=_MAX_CANCELLED):
        self.lease, self.limit = lease, limit
        self._until = {}

    def pause(self, key):
        now = time.monotonic()
        if key not in self._until and len(self._until) >= self.limit:
            self._until = {k: u for k, u in self._until.items() if now < u}
            if len(self._until) >= self.limit:
                return
        self._until[key] = now + self.lease

    def resume(self, key):
        self._until.pop(key, None)

    def holds(self, job_id, queue):
        """Whether a task of job_id from work queue queue is to be held: its job or its queue is paused."""
        if not self._until:
            return False
        now = time.monotonic()
        for key in (("job", job_id), ("queue", queue)):
            until = self._until.get(key)
            if until is not None:
                if now < until:
                    return True
                del self._until[key]
        return False


class _Pool:
    """concurrency daemon threads running handler calls.

    Daemon threads rather than a ThreadPoolExecutor: a handler that ignores
    its deadline and the shutdown must not keep the process alive once
    run() returned (an executor's threads are joined at exit).
    """

    def __init__(self, n, name):
        self._q = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._loop, name="%s-%d" % (name, i), daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, fn, *args):
        self._q.put((fn, args))

    def _loop(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # a bug: the task goes back to the queue when its session ends
                log.exception("warren worker: unexpected error around a handler")

    def stop(self):
        for _ in self._threads:
            self._q.put(None)


class Worker:
    """A warren worker in Python: register handlers, then call run().

    >>> w = Worker(amqp_url="amqp://guest:guest@127.0.0.1:5672/", prefix="", concurrency=4)
    >>> @w.handler("thumbnail")
    ... def thumbnail(payload, task):
    ...     return {"url": "..."}
    >>> w.run()   # until SIGINT/SIGTERM, draining in-flight tasks

    Parameters left as None take the environment variables warren's Go
    worker reads (WARREN_AMQP_URL, WARREN_PREFIX, WARREN_RETRY_TIERS,
    WARREN_QUEUES, WARREN_MAX_MESSAGE_BYTES, WARREN_MAX_TASK_RESULT_BYTES,
    WARREN_QUORUM_REPLICAS), then warren's defaults. Errors name the
    parameter (ValueError).
    """

    def __init__(self, amqp_url=None, prefix=None, concurrency=DEFAULT_CONCURRENCY, *, queues=None, retry_tiers=None,
                 name=None, max_message_bytes=None, max_result_bytes=None, prefetch=None,
                 shutdown_timeout=DEFAULT_SHUTDOWN_TIMEOUT, heartbeat_interval=DEFAULT_HEARTBEAT_INTERVAL,
                 delivery_limit=_wire.DEFAULT_DELIVERY_LIMIT, quorum_replicas=None,
                 reconnect_backoff_max=DEFAULT_RECONNECT_BACKOFF_MAX, logger=None, on_event=None):
        self.amqp_urls = self._urls(amqp_url if amqp_url is not None else (_env("WARREN_AMQP_URL") or DEFAULT_AMQP_URL))
        self.prefix = prefix if prefix is not None else (os.environ.get("WARREN_PREFIX") or "")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError("Worker: concurrency must be an integer >= 1, got %r" % (concurrency,))
        self.concurrency = concurrency
        self.queues = self._queues(queues)
        self.retry_tiers_ms = self._tiers(retry_tiers)
        self.name = name or "%s:%d" % (socket.gethostname() or "worker", os.getpid())
        self.max_message_bytes = self._int_param("max_message_bytes", max_message_bytes, "WARREN_MAX_MESSAGE_BYTES",
                                                 _wire.DEFAULT_MAX_MESSAGE_BYTES)
        if not _wire.ENVELOPE_BYTES < self.max_message_bytes <= _wire.MAX_INT32:
            raise ValueError("Worker: max_message_bytes must be more than %d and at most %d, got %d"
                             % (_wire.ENVELOPE_BYTES, _wire.MAX_INT32, self.max_message_bytes))
        room = self.max_message_bytes - _wire.ENVELOPE_BYTES
        self.max_result_bytes = self._int_param("max_result_bytes", max_result_bytes, "WARREN_MAX_TASK_RESULT_BYTES",
                                                min(_wire.DEFAULT_MAX_RESULT_BYTES, room))
        if not 1 <= self.max_result_bytes <= room:
            raise ValueError("Worker: max_result_bytes must be between 1 and max_message_bytes less %d (%d), got %d"
                             % (_wire.ENVELOPE_BYTES, room, self.max_result_bytes))
        if prefetch is None:
            inflight = max(DEFAULT_MAX_INFLIGHT_BYTES, concurrency * self.max_message_bytes)
            prefetch = min(2 * concurrency, max(1, inflight // self.max_message_bytes))
        if not isinstance(prefetch, int) or not concurrency <= prefetch <= 65535:
            raise ValueError("Worker: prefetch must be between concurrency (%d) and 65535, got %r" % (concurrency, prefetch))
        self.prefetch = prefetch
        if shutdown_timeout is None or shutdown_timeout < 0:
            raise ValueError("Worker: shutdown_timeout must be >= 0 seconds, got %r" % (shutdown_timeout,))
        self.shutdown_timeout = float(shutdown_timeout)
        if heartbeat_interval is not None and heartbeat_interval <= 0.001:
            raise ValueError("Worker: heartbeat_interval must be more than 1 ms, or None for no heartbeats, got %r"
                             % (heartbeat_interval,))
        self.heartbeat_interval = heartbeat_interval
        if not isinstance(delivery_limit, int) or delivery_limit < 1:
            raise ValueError("Worker: delivery_limit must be an integer >= 1, got %r" % (delivery_limit,))
        self.delivery_limit = delivery_limit
        self.quorum_replicas = self._int_param("quorum_replicas", quorum_replicas, "WARREN_QUORUM_REPLICAS", 0, minimum=0)
        if reconnect_backoff_max is None or reconnect_backoff_max < 0:
            raise ValueError("Worker: reconnect_backoff_max must be >= 0 seconds, got %r" % (reconnect_backoff_max,))
        self.reconnect_backoff_max = float(reconnect_backoff_max)
        self.log = logger or log
        self.on_event = on_event
        self.names = Names(self.prefix)
        self._handlers = {}
        self._reducers = {}
        self._outcomes_timeout = _wire.OUTCOMES_TIMEOUT  # seconds per reply; tests shorten it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._running = False
        self._cancelled = _CancelSet()
        self._paused = _PauseSet()
        self._run_id = ""
        self._started_at = None
        self._held = 0  # tasks held now (prefetched or running), for heartbeats

    # -- configuration -----------------------------------------------------

    @staticmethod
    def _urls(raw):
        if not isinstance(raw, str):
            raise ValueError("Worker: amqp_url must be a string")
        urls = [u.strip() for u in raw.split(",") if u.strip()]
        if not urls:
            raise ValueError("Worker: amqp_url is empty")
        for i, u in enumerate(urls):
            if not (u.startswith("amqp://") or u.startswith("amqps://")):
                raise ValueError("Worker: amqp_url: URL %d is not amqp:// or amqps:// (the URL is not shown: it may hold a password)" % (i + 1))
            try:
                pika.URLParameters(u)
            except Exception as e:
                raise ValueError("Worker: amqp_url: URL %d does not parse: %s" % (i + 1, type(e).__name__)) from None
        return urls

    @staticmethod
    def _queues(queues):
        source = "queues"
        if queues is None:
            env = _env("WARREN_QUEUES")
            source = "WARREN_QUEUES"
            queues = env.split(",") if env else []
        elif isinstance(queues, str):
            queues = queues.split(",")
        out = []
        for q in queues:
            q = q.strip()
            if not q:
                continue
            try:
                _wire.check_queue_name(q)
            except ValueError as e:
                raise ValueError("Worker: %s: %s" % (source, e)) from None
            if q not in out:
                out.append(q)
        return out or [_wire.DEFAULT_QUEUE]

    @staticmethod
    def _tiers(tiers):
        source = "retry_tiers"
        if tiers is None:
            env = _env("WARREN_RETRY_TIERS")
            if env is None:
                return list(_wire.DEFAULT_RETRY_TIERS_MS)
            source, tiers = "WARREN_RETRY_TIERS", env
        if isinstance(tiers, str):
            tiers = [t for t in tiers.split(",") if t.strip()]
        try:
            out = [_wire.tier_ms(t) for t in tiers]
        except ValueError as e:
            raise ValueError("Worker: %s: %s" % (source, e)) from None
        if not out:
            raise ValueError("Worker: %s: give at least one tier" % source)
        for a, b in zip(out, out[1:]):
            if b <= a:
                raise ValueError("Worker: %s: tiers must increase, got %s after %s" % (source, _go_duration(b), _go_duration(a)))
        return out

    @staticmethod
    def _int_param(param, value, env, default, minimum=1):
        source = param
        if value is None:
            raw = _env(env)
            if raw is None:
                return default
            source = env
            try:
                value = int(raw, 10)
            except ValueError:
                raise ValueError("Worker: %s: %r is not a whole number" % (env, raw)) from None
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError("Worker: %s must be an integer >= %d, got %r" % (source, minimum, value))
        return value

    # -- handlers ----------------------------------------------------------

    def handler(self, task_type):
        """Decorator: register fn(payload, task) as the handler of task_type."""
        def register(fn):
            self.add_handler(task_type, fn)
            return fn
        return register

    def add_handler(self, task_type, fn):
        """Register fn(payload, task) as the handler of tasks of task_type.

        fn returns the task's result (any JSON value), raises Permanent to
        fail the task at once with a dead letter, or raises anything else
        to have it retried through the retry tiers while the job's
        max_retries allow, then dead-lettered.
        """
        if not isinstance(task_type, str) or not task_type:
            raise ValueError("Worker.add_handler: the task type must be a non-empty string")
        if not callable(fn):
            raise ValueError("Worker.add_handler: the handler of %r is not callable" % task_type)
        with self._lock:
            self._handlers[task_type] = fn

    def _handler(self, task_type):
        with self._lock:
            return self._handlers.get(task_type)

    def reducer(self, task_type):
        """Decorator: register fn(outcomes, job) as the reducer of task_type."""
        def register(fn):
            self.add_reducer(task_type, fn)
            return fn
        return register

    def add_reducer(self, task_type, fn):
        """Register fn(outcomes, job) as the reducer of the reduce tasks of task_type.

        When every map task of a job whose reduce names task_type is
        accounted for, warren sends one reduce task, and fn's return value
        (any JSON value) is the job's result. ``outcomes`` iterates over
        the map tasks' outcomes (Outcome: task_id, state, result, error)
        in task id order, read from the server a page at a time as fn
        iterates; iterating again starts again from the first. ``job`` is a
        ReduceJob (job_id, payload, expected_tasks, ...). Raise Permanent to
        fail the job at once; anything else is retried through the retry
        tiers. When the outcomes cannot be read the iteration raises
        OutcomesError, and the run is retried whatever fn returns; when the
        job no longer reduces (cancelled, closed, reduced by a newer run)
        it raises Stale, and the reduce task is acked with nothing
        published. A type may have both a handler and a reducer.
        """
        if not isinstance(task_type, str) or not task_type:
            raise ValueError("Worker.add_reducer: the task type must be a non-empty string")
        if not callable(fn):
            raise ValueError("Worker.add_reducer: the reducer of %r is not callable" % task_type)
        with self._lock:
            self._reducers[task_type] = fn

    def _reducer(self, task_type):
        with self._lock:
            return self._reducers.get(task_type)

    def types(self):
        """The task types with a handler or a reducer, sorted."""
        with self._lock:
            return sorted(set(self._handlers) | set(self._reducers))

    # -- running -----------------------------------------------------------

    def stop(self):
        """Ask run() to stop: it stops taking tasks and drains those in flight. Safe from any thread."""
        self._stop.set()

    def run(self, stop_after=None):
        """Consume and run tasks until SIGINT/SIGTERM, stop(), or stop_after seconds.

        Then stop taking tasks, give back those not started, let those
        running finish (up to shutdown_timeout) and publish their outcomes,
        and return. A lost connection is reconnected to, with backoff; its
        unacked tasks go back to the queue by themselves. Signals are
        handled only when run() is called from the main thread; a second
        signal (more than a second after the first) stops waiting for
        running handlers, whose tasks go back to the queue.

        Raises RuntimeError without handlers or when already running, and
        the connection error when the first connection fails or the broker
        refuses the topology (a queue declared with other arguments).
        """
        if not self.types():
            raise RuntimeError("Worker.run: no handlers registered; register one with @worker.handler(type) "
                               "(or @worker.reducer(type)) first")
        with self._lock:
            if self._running:
                raise RuntimeError("Worker.run is already running on this Worker")
            self._running = True
        self._stop.clear()
        self._hurry.clear()
        self._run_id, self._started_at = str(uuid.uuid4()), _now()
        stop_at = None if stop_after is None else time.monotonic() + stop_after
        restore = self._install_signals()
        pool = _Pool(self.concurrency, "warren-handler")
        try:
            self._loop(pool, stop_at)
        finally:
            pool.stop()
            restore()
            with self._lock:
                self._running = False

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        first = []

        def on_signal(signum, _frame):
            now = time.monotonic()
            if not first:
                first.append(now)
                self.log.info("warren worker: signal %d: draining in-flight tasks (send it again to stop waiting)", signum)
                self._stop.set()
            elif now - first[0] > 1.0:
                # A supervisor often signals the process and its group at
                # once: a second signal within a second is the same one.
                self.log.warning("warren worker: second signal: running tasks go back to the queue")
                self._hurry.set()

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)

        def restore():
            for sig, h in previous.items():
                signal.signal(sig, h)
        return restore

    def _stopping(self, stop_at):
        if stop_at is not None and time.monotonic() >= stop_at:
            self._stop.set()
        return self._stop.is_set()

    def _loop(self, pool, stop_at):
        failed = 0
        first = True
        while True:
            s = _Session(self, pool)
            try:
                s.connect()
            except Exception as e:
                s.close()
                if first or _fatal(e):
                    if self._stopping(stop_at):
                        return
                    if _fatal(e):
                        self.log.error("warren worker: the broker refused the worker's set-up (a queue that exists with other "
                                       "arguments: the same prefix with another delivery limit or replica count? delete it, "
                                       "or use another WARREN_PREFIX); not retrying: %s", e)
                    raise
                failed += 1
                delay = self._backoff(failed)
                self.log.debug("warren worker: reconnect failed (attempt %d): %s; next in %.1fs", failed, e, delay)
                if self._wait(delay, stop_at):
                    self.log.info("warren worker: stopped while reconnecting")
                    return
                continue
            if first:
                self.log.info("warren worker: consuming queues=%s concurrency=%d prefetch=%d name=%s",
                              ",".join(self.queues), self.concurrency, self.prefetch, self.name)
                self._emit(Event("connected"))
            else:
                self.log.info("warren worker: reconnected to RabbitMQ after %d attempts", failed)
                self._emit(Event("reconnected"))
            first = False
            connected_at = time.monotonic()
            self._session = s  # the session serving now (tests)
            lost = s.serve(stop_at)
            if lost is None:
                self.log.info("warren worker: stopped")
                return
            if time.monotonic() - connected_at >= self.reconnect_backoff_max:
                failed = 0
            self.log.warning("warren worker: lost the connection to RabbitMQ; its unfinished tasks go back to the queue; "
                             "reconnecting: %s", lost)
            self._emit(Event("connection_lost", error=lost))
            failed += 1
            if self._wait(self._backoff(failed), stop_at):
                self.log.info("warren worker: stopped while reconnecting")
                return

    def _wait(self, delay, stop_at):
        """Wait delay seconds, cut short by a stop; True when stopped."""
        if stop_at is not None:
            delay = min(delay, max(0.0, stop_at - time.monotonic()))
        self._stop.wait(delay)
        return self._stopping(stop_at)

    def _backoff(self, attempt):
        d = min(self.reconnect_backoff_max, 0.1 * 2 ** min(attempt - 1, 30))
        return d * random.uniform(0.8, 1.2)

    def _emit(self, ev):
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:
                self.log.exception("warren worker: on_event raised")

    def _heartbeat(self, state):
        interval_ms = int(round(self.heartbeat_interval * 1000))
        return {
            "id": self._run_id, "name": self.name[:256], "state": state, "queues": self.queues,
            "types": self.types(), "concurrency": self.concurrency, "in_flight": max(0, self._held),
            "started_at": _wire.format_time(self._started_at), "interval_ms": interval_ms,
            "version": "warren-worker-python/" + _version(),
        }


def _version():
    from . import __version__
    return __version__


def _fatal(e):
    """A refusal no retry can fix: the topology exists with other arguments, or access is refused."""
    if isinstance(e, pika.exceptions.ChannelClosedByBroker):
        return e.reply_code in (403, 406, 530)
    if isinstance(e, pika.exceptions.ConnectionClosedByBroker):
        return e.reply_code in (403, 530)
    return False
