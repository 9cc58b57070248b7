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
import datetime
import functools
import logging
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
from ._wire import Names

__all__ = ["Worker", "Task", "Permanent", "Event"]

DEFAULT_CONCURRENCY = 8
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_HEARTBEAT_INTERVAL = 5.0
DEFAULT_RECONNECT_BACKOFF_MAX = 10.0
DEFAULT_MAX_INFLIGHT_BYTES = 256 << 20
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"

# How often the I/O loops look at their stop flags when nothing happens.
_POLL = 0.2
# Bounds of the pause before a task whose outcome was not confirmed goes
# back to the queue: long enough not to spin, short enough not to hold it.
_MIN_PUBLISH_BACKOFF = 0.2
_MAX_PUBLISH_BACKOFF = 1.0
# Cancelled jobs remembered (as the Go worker: 100,000 for 24 hours).
_MAX_CANCELLED = 100_000
_CANCELLED_TTL = 24 * 3600.0
_CONTROL_PREFETCH = 100

log = logging.getLogger("warren_worker")


class Permanent(Exception):
    """Raise from a handler to fail its task at once, without a retry.

    The task is dead-lettered with reason ``permanent`` and the text of the
    exception, so that people find it in ``tasks.dlq`` (and may replay it).
    """


class Task:
    """One task as its handler sees it.

    Attributes: ``job_id``, ``task_id`` (1..N in its job), ``type``,
    ``attempt`` (1 on the first run), ``max_retries`` (the job's retry
    budget), ``idempotency_key`` (``<job_id>:<task_id>``: pass it to
    external systems), ``queue`` (the work queue it came from),
    ``generation``, ``timeout`` (seconds each run may take, or None) and
    ``deadline`` (``time.monotonic()`` value the run must end by, or None).
    """

    __slots__ = ("job_id", "task_id", "type", "attempt", "max_retries", "queue", "generation",
                 "timeout", "deadline", "started_at")

    def __init__(self, job_id, task_id, type, attempt, max_retries, queue, generation, timeout, deadline, started_at):
        self.job_id = job_id
        self.task_id = task_id
        self.type = type
        self.attempt = attempt
        self.max_retries = max_retries
        self.queue = queue
        self.generation = generation
        self.timeout = timeout
        self.deadline = deadline
        self.started_at = started_at

    @property
    def idempotency_key(self):
        """``<job_id>:<task_id>``, the task message's id: the same on every run of the task."""
        return _wire.message_id(self.job_id, self.task_id)

    def time_left(self):
        """Seconds left before the run's deadline, or None when the task has no time limit.

        A run that ends at or after its deadline is a transient failure
        whatever the handler returns: check this in long loops.
        """
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def __repr__(self):
        return "Task(job_id=%r, task_id=%r, type=%r, attempt=%r)" % (self.job_id, self.task_id, self.type, self.attempt)


Event = collections.namedtuple("Event", "kind job_id task_id type attempt error reason delay")
Event.__doc__ = """What happened to a task, for Worker(on_event=...).

kind is one of: started, completed, retried, dead_lettered, skipped,
split, requeued, publish_failed (per task); cancel_seen (job_id only);
connected, reconnected, connection_lost, draining (no task).
"""
Event.__new__.__defaults__ = ("", 0, "", 0, None, "", 0.0)


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _go_duration(ms):
    """A duration in milliseconds as Go prints it (5s, 1m30s, 1.5s, 250ms)."""
    if ms < 1000:
        return "%dms" % ms
    h, rest = divmod(ms, 3600_000)
    m, rest = divmod(rest, 60_000)
    s = ("%d.%03d" % divmod(rest, 1000)).rstrip("0").rstrip(".") + "s"
    if h:
        return "%dh%dm%s" % (h, m, s)
    if m:
        return "%dm%s" % (m, s)
    return s


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
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._running = False
        self._cancelled = _CancelSet()
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

    def types(self):
        """The task types with a handler, sorted."""
        with self._lock:
            return sorted(self._handlers)

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
            raise RuntimeError("Worker.run: no handlers registered; register one with @worker.handler(type) first")
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


def _task_log(t, msg, *args, level=logging.DEBUG, logger=None):
    (logger or log).log(level, msg + " job_id=%s task_id=%s type=%s attempt=%d",
                        *(args + (t.job_id, t.task_id, t.type, t.attempt)),
                        extra={"job_id": t.job_id, "task_id": t.task_id, "task_type": t.type, "attempt": t.attempt})


class _Delivery:
    """A task delivery as the session received it; settled at most once."""

    __slots__ = ("msg", "tag", "session", "settled", "tasks", "events")

    def __init__(self, msg, session):
        self.msg = msg
        self.tag = msg.method.delivery_tag
        self.session = session
        self.settled = False
        self.events = []
        m = msg
        self.tasks = [Task(m.job_id, tid, m.type, m.attempt, m.max_retries, m.queue, m.generation,
                           m.timeout_ms / 1000.0 if m.timeout_ms else None, None, None) for tid, _ in m.tasks]
        if not self.tasks:
            self.tasks = [Task(m.job_id, 0, m.type, m.attempt, m.max_retries, m.queue, m.generation, None, None, None)]


class _Publisher:
    """The publisher connection, owned by its own thread."""

    def __init__(self, worker, params):
        self.w = worker
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.hb = None
        self.lost = None
        self._closing = False
        self._queue = collections.deque()  # (outs, done, result): appended by any thread
        self._thread = threading.Thread(target=self._loop, name="warren-publisher", daemon=True)

    def start(self):
        if self.w.heartbeat_interval is not None:
            try:
                self.hb = self.conn.channel()
            except pika.exceptions.AMQPError as e:
                self.w.log.warning("warren worker: cannot open the heartbeat channel; this worker will not appear in "
                                   "the servers' list of workers: %s", e)
        self._thread.start()
        if self.hb is not None:
            self.submit_call(self._beat)

    def submit(self, outs, done, result=None):
        """Publish outs with confirms on the publisher thread, then call done(error or None) there.

        result, instead of outs, is (delivery message, result) of a single
        task message that completed: results of one job and generation
        that wait together go out in one result batch (group commit: a
        round takes what arrived while the previous one waited for its
        confirms).
        """
        self._queue.append((outs, done, result))
        try:
            self.conn.add_callback_threadsafe(self._flush)
        except Exception as e:  # the connection is closed: the session is lost
            done(e)

    def _flush(self):
        items = []
        while self._queue:
            items.append(self._queue.popleft())
        groups = collections.OrderedDict()
        for outs, done, result in items:
            if result is None:
                self._publish(outs, [done])
            else:
                m, r = result
                groups.setdefault((m.job_id, m.generation), []).append((m, r, done))
        for group in groups.values():
            group.sort(key=lambda x: x[1]["task_id"])
            parts = []
            for item in group:
                # Task ids of a batch strictly increase: a task delivered
                # twice at once has its second result in another part.
                for part in parts:
                    if len(part) < _wire.MAX_BATCH_SIZE and part[-1][1]["task_id"] < item[1]["task_id"]:
                        part.append(item)
                        break
                else:
                    parts.append([item])
            for part in parts:
                m = part[0][0]
                try:
                    outs = m.results(self.w.names, [r for _, r, _ in part], self.w.max_message_bytes, batch=len(part) > 1)
                except Exception as e:  # only a bug gets here
                    for _, _, done in part:
                        done(e)
                    continue
                self._publish(outs, [done for _, _, done in part])

    def _publish(self, outs, dones):
        err = None
        try:
            for o in outs:
                self.ch.basic_publish(o.exchange, o.routing_key, o.body, o.properties, mandatory=True)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as e:
            err = e
        except Exception as e:
            err = e
            if self.lost is None:
                self.lost = e
        for done in dones:
            done(err)

    def submit_call(self, fn):
        try:
            self.conn.add_callback_threadsafe(fn)
        except Exception:
            pass

    def _beat(self, state="running"):
        if self.hb is None or not self.hb.is_open:
            return
        body = _wire.encode_json(self.w._heartbeat(state))
        interval_ms = int(round(self.w.heartbeat_interval * 1000))
        try:
            self.hb.basic_publish(self.w.names.heartbeat_exchange, "", body, pika.BasicProperties(
                content_type=_wire.CONTENT_TYPE, delivery_mode=1, type="heartbeat",
                expiration=str(3 * interval_ms), timestamp=int(time.time())))
        except pika.exceptions.AMQPChannelError as e:
            self.w.log.warning("warren worker: the heartbeat channel closed; no heartbeats until the next reconnect: %s", e)
            self.hb = None
            return
        except Exception as e:
            self.w.log.debug("warren worker: heartbeat not published: %s", e)
            return
        if state == "running":
            self.conn.call_later(self.w.heartbeat_interval, self._beat)

    def _loop(self):
        while not self._closing:
            try:
                self.conn.process_data_events(time_limit=_POLL)
            except Exception as e:
                if self.lost is None:
                    self.lost = e
                return
        try:
            self.conn.close()
        except Exception:
            pass

    def close(self, goodbye=False):
        """Stop the thread (after a goodbye heartbeat if asked) and close the connection."""
        def finish():
            if goodbye and self.hb is not None:
                self._beat("stopping")
            self._closing = True
        if self._thread.is_alive():
            self.submit_call(finish)
            self._thread.join(5.0)
            self._closing = True
        elif not self._thread.ident:  # never started
            try:
                self.conn.close()
            except Exception:
                pass


class _Session:
    """One connected period of run(): its connections, consumers and deliveries."""

    def __init__(self, worker, pool):
        self.w = worker
        self.pool = pool
        self.conn = None
        self.pub = None
        self.ch = None
        self.control_ch = None
        self.tags = {}  # consumer tag -> work queue
        self.pending = collections.deque()  # received, not started
        self.inflight = set()  # started, not settled
        self.busy = 0
        self.lost = None
        self.ended = False
        self.draining = False
        self.publish_failures = 0

    # -- set-up ------------------------------------------------------------

    def _params(self, role):
        urls = list(self.w.amqp_urls)
        start = random.randrange(len(urls))
        urls = urls[start:] + urls[:start]
        out = []
        for u in urls:
            p = pika.URLParameters(u)
            p.client_properties = {"connection_name": "warren worker %s (%s, python)" % (self.w.name, role)}
            if role == "publisher":
                p.blocked_connection_timeout = 30
            out.append(p)
        return out

    def connect(self):
        w = self.w
        self.conn = pika.BlockingConnection(self._params("consumer"))
        self._declare()
        self.pub = _Publisher(w, self._params("publisher"))
        self.pub.start()
        # Cancels are heard before the first task is taken.
        self.control_ch = self.conn.channel()
        q = self.control_ch.queue_declare("", exclusive=True, auto_delete=True, arguments={"x-queue-type": "classic"})
        cq = q.method.queue
        self.control_ch.queue_bind(cq, w.names.control_exchange)
        self.control_ch.basic_qos(prefetch_count=_CONTROL_PREFETCH)
        tag = "warren-worker %s %s" % (w.name, uuid.uuid4().hex[:8])
        self.control_ch.basic_consume(cq, self._on_control, consumer_tag=tag + " control")
        self.control_ch.add_on_cancel_callback(self._on_cancelled)
        self.ch = self.conn.channel()
        each = -(-w.prefetch // len(w.queues))
        self.ch.basic_qos(prefetch_count=each)
        self.ch.add_on_cancel_callback(self._on_cancelled)
        for qn in w.queues:
            t = tag + " " + qn
            self.tags[t] = qn
            self.ch.basic_consume(w.names.work_queue(qn), functools.partial(self._on_task, qn), consumer_tag=t)

    def _declare(self):
        """Declare the topology as broker.DeclareTopology does, and the worker's other work queues."""
        w, n = self.w, self.w.names
        ch = self.conn.channel()
        try:
            for name, kind in n.exchanges():
                ch.exchange_declare(name, exchange_type=kind, durable=True)
            specs = _wire.topology_specs(n, w.retry_tiers_ms, w.delivery_limit, w.quorum_replicas)
            for qn in w.queues:
                if qn != _wire.DEFAULT_QUEUE:
                    specs += [s + (None,) for s in _wire.work_queue_specs(n, qn, w.retry_tiers_ms, w.delivery_limit, w.quorum_replicas)]
            for name, exchange, key, args, legacy in specs:
                try:
                    ch.queue_declare(name, durable=True, arguments=args)
                except pika.exceptions.ChannelClosedByBroker as e:
                    if legacy is None or e.reply_code != 406:
                        raise
                    # An earlier warren declared this dead-letter queue
                    # as a bare quorum queue: use it as it is.
                    ch = self.conn.channel()
                    ch.queue_declare(name, durable=True, arguments=legacy)
                    w.log.warning("warren worker: dead-letter queue %s was declared by an earlier warren, without a delivery "
                                  "limit of its own; migrate it as docs/operations.md says (Dead-letter queues)", name)
                ch.queue_bind(name, exchange, routing_key=key)
        finally:
            if ch.is_open:
                ch.close()

    # -- serving -----------------------------------------------------------

    def serve(self, stop_at):
        """Run until stopped (drain; None) or the connection is lost (the reason)."""
        w = self.w
        try:
            while not w._stopping(stop_at):
                if self.lost is None and self.pub.lost is not None:
                    self.lost = self.pub.lost
                if self.lost is not None:
                    break
                self.conn.process_data_events(time_limit=_POLL)
        except Exception as e:
            self.lost = self.lost or e
        if self.lost is not None:
            self.close()
            return self.lost
        try:
            self._drain()
        except Exception as e:
            w.log.warning("warren worker: the connection closed while draining; unsettled tasks go back to the queue: %s", e)
        self.close(goodbye=True)
        return None

    def _drain(self):
        w = self.w
        self.draining = True
        for t in list(self.tags):
            self.ch.basic_cancel(t)  # pika nacks what it had not dispatched yet
        while self.pending:
            self._requeue(self.pending.popleft(), "requeued")
        w._emit(Event("draining"))
        deadline = time.monotonic() + w.shutdown_timeout
        while self.busy > 0 and time.monotonic() < deadline and not w._hurry.is_set():
            if self.pub.lost is not None:
                raise self.pub.lost
            self.conn.process_data_events(time_limit=min(_POLL, max(0.0, deadline - time.monotonic())))
        if self.inflight:
            w.log.warning("warren worker: %d task message(s) still running after the shutdown timeout; they go back to "
                          "the queue", len(self.inflight))
            for d in list(self.inflight):
                self._requeue(d, "requeued")

    def close(self, goodbye=False):
        self.ended = True
        if self.pub is not None:
            self.pub.close(goodbye=goodbye and self.lost is None)
        if self.conn is not None:
            try:
                if self.conn.is_open:
                    self.conn.close()
            except Exception:
                pass
        self.w._held -= sum(len(d.tasks) for d in list(self.pending) + list(self.inflight))
        self.pending.clear()
        self.inflight.clear()

    def _on_cancelled(self, _frame):
        # The broker cancelled a consumer: its queue was deleted.
        if self.lost is None:
            self.lost = ConnectionError("the broker cancelled a consumer (its queue was deleted?)")

    def _on_control(self, ch, method, props, body):
        try:
            kind, job_id = _wire.decode_control(body)
        except _wire.Malformed as e:
            self.w.log.warning("warren worker: ignoring a malformed control message: %s", e)
        else:
            if kind == "cancel":
                self.w._cancelled.add(job_id)
                self.w.log.info("warren worker: job cancelled; its queued tasks will be skipped job_id=%s", job_id,
                                extra={"job_id": job_id})
                self.w._emit(Event("cancel_seen", job_id=job_id))
            else:
                self.w.log.warning("warren worker: ignoring a control message of unknown type %r job_id=%s", kind, job_id)
        ch.basic_ack(method.delivery_tag)

    def _on_task(self, work_queue, ch, method, props, body):
        msg = _wire.TaskDelivery(method, props, body, work_queue, self.w.max_message_bytes)
        d = _Delivery(msg, self)
        self.w._held += len(d.tasks)
        self.pending.append(d)
        self._start_pending()

    def _start_pending(self):
        while self.pending and self.busy < self.w.concurrency and not self.ended and not self.draining:
            d = self.pending.popleft()
            self.busy += 1
            self.inflight.add(d)
            for t in d.tasks:
                self.w._emit(self._event("started", t))
            self._dispatch(d)

    def _dispatch(self, d):
        w, m = self.w, d.msg
        if m.malformed is not None:
            reason = _wire.REASON_TOO_LARGE if isinstance(m.malformed, _wire.TooLarge) else _wire.REASON_MALFORMED
            self._dead_letter_all(d, reason, str(m.malformed), whole=True)
        elif m.job_id in w._cancelled:
            self._settle(d, None, [self._event("skipped", t) for t in d.tasks])
            _task_log(d.tasks[0], "warren worker: task skipped; its job is cancelled", logger=w.log)
        elif m.batch and m.redelivered:
            # Its worker crashed, lost its connection or shut down mid-batch:
            # one of the tasks may be what crashes workers. Alone, each task
            # meets the delivery limit on its own.
            _task_log(d.tasks[0], "warren worker: a redelivered task batch is split into %d single tasks",
                      len(d.tasks), level=logging.INFO, logger=w.log)
            outs = [m.split(t) for t in m.tasks]
            self._publish(d, outs, [self._event("split", t) for t in d.tasks])
        else:
            fn = w._handler(m.type)
            if fn is None:
                err = ("worker: no handler for task type %r on this queue" % m.type) if m.type else \
                    "worker: the task message has no type property, and handlers are chosen by type"
                self._dead_letter_all(d, _wire.REASON_UNKNOWN_TYPE, err)
            else:
                self.pool.submit(self._run, d, fn)

    def _dead_letter_all(self, d, reason, error, whole=False):
        w, m = self.w, d.msg
        now = _now()
        tasks = [None] if whole else m.tasks
        outs = [m.dead_letter(w.names, t, reason, error, w.name, None, now) for t in tasks]
        evs = []
        for t in d.tasks:
            _task_log(t, "warren worker: task dead-lettered reason=%s error=%s", reason, error, level=logging.WARNING, logger=w.log)
            evs.append(self._event("dead_lettered", t, error=error, reason=reason))
        self._publish(d, outs, evs)

    # -- running handlers (on a handler thread) -----------------------------

    def _run(self, d, fn):
        w, m = self.w, d.msg
        outs, results, evs = [], [], []
        for (task_id, payload), t in zip(m.tasks, d.tasks):
            if self.ended or d.settled:
                return  # the session ended: the broker has the task back
            started = _now()
            t0 = time.monotonic()
            t.started_at = started
            t.deadline = t0 + t.timeout if t.timeout else None
            value, err = None, None
            try:
                value = fn(payload, t)
            except BaseException as e:  # noqa: BLE001 - every failure of a handler is an outcome, sys.exit too
                err = e
            elapsed = time.monotonic() - t0
            finished = _now()
            self._decide(d, t, payload, value, err, elapsed, started, finished, outs, results, evs)
        if self.ended or d.settled:
            return
        if results and not m.batch:
            # A single task message that completed: its result may share a
            # result batch with others that complete at the same time.
            self._publish(d, [], evs, result=(m, results[0]))
            return
        try:
            if results:
                outs = outs + m.results(w.names, results, w.max_message_bytes)
        except Exception as e:  # only a bug gets here: the results were checked
            w.log.error("warren worker: cannot encode results; the task goes back to the queue: %s", e)
            self._threadsafe(self._failed, d, e, evs)
            return
        self._publish(d, outs, evs)

    def _decide(self, d, t, payload, value, err, elapsed, started, finished, outs, results, evs):
        """The outcome of one run, as the Go worker's outcome.Of decides it."""
        w, m = self.w, d.msg
        task = (t.task_id, payload)
        permanent, reason, text = False, "", ""
        if t.timeout and elapsed >= t.timeout:
            text = "worker: task timeout of %s exceeded" % _go_duration(m.timeout_ms)
            reason = _wire.REASON_TIMEOUT
        elif err is not None:
            if isinstance(err, Permanent):
                permanent, reason = True, _wire.REASON_PERMANENT
                text = str(err) or "permanent error"
            else:
                reason = _wire.REASON_RETRIES_EXHAUSTED
                text = "%s: %s" % (type(err).__name__, err) if str(err) else type(err).__name__
        else:
            try:
                raw = _wire.encode_json(value)
            except (TypeError, ValueError) as e:
                permanent, reason = True, _wire.REASON_PERMANENT
                text = "worker: the handler's result of type %s is not JSON: %s" % (type(value).__name__, e)
            else:
                if len(raw) > w.max_result_bytes:
                    permanent, reason = True, _wire.REASON_RESULT_TOO_LARGE
                    text = ("worker: the result is %d bytes of JSON, over this worker's limit of %d (max_result_bytes); "
                            "return a reference to large data instead, or raise the limit" % (len(raw), w.max_result_bytes))
                else:
                    results.append({"task_id": t.task_id, "result": value, "status": "completed", "worker": w.name,
                                    "attempt": t.attempt, "started_at": _wire.format_time(started),
                                    "finished_at": _wire.format_time(finished)})
                    _task_log(t, "warren worker: task completed duration=%.3fs", elapsed, logger=w.log)
                    evs.append(self._event("completed", t))
                    return
        if not permanent and t.attempt <= t.max_retries:
            tiers = w.retry_tiers_ms
            delay = tiers[_wire.retry_tier(t.attempt, len(tiers))]
            _task_log(t, "warren worker: task failed; retrying in %s error=%s", _go_duration(delay), text, logger=w.log)
            outs.append(m.retry(w.names, task, delay))
            evs.append(self._event("retried", t, error=text, delay=delay / 1000.0))
            return
        _task_log(t, "warren worker: task dead-lettered reason=%s error=%s", reason, text, level=logging.WARNING, logger=w.log)
        outs.append(m.dead_letter(w.names, task, reason, text, w.name, started, _now()))
        evs.append(self._event("dead_lettered", t, error=text, reason=reason))

    # -- settling ----------------------------------------------------------

    def _publish(self, d, outs, evs, result=None):
        """Publish outs (or result: see _Publisher.submit) with confirms, then ack d (any thread)."""
        def done(err):  # on the publisher thread
            self._threadsafe(self._settle, d, err, evs)
        if not outs and result is None:
            self._threadsafe(self._settle, d, None, evs)
            return
        self.pub.submit(outs, done, result)

    def _threadsafe(self, fn, *args):
        if self.ended:
            return
        try:
            self.conn.add_callback_threadsafe(functools.partial(fn, *args))
        except Exception:
            pass  # the connection is gone: the broker gives the task back

    def _settle(self, d, err, evs):
        """Ack d once its outcomes are confirmed, or give it back (consumer thread)."""
        if err is not None:
            self._failed(d, err, evs)
            return
        if self.ended or d.settled:
            return
        self.publish_failures = 0
        d.settled = True
        try:
            self.ch.basic_ack(d.tag)
        except Exception as e:
            self.w.log.warning("warren worker: ack after a confirmed publish failed; the task will be redelivered: %s", e)
            self.lost = self.lost or e
        else:
            for ev in evs:
                self.w._emit(ev)
        self._release(d)

    def _failed(self, d, err, evs):
        if self.ended or d.settled:
            return
        if self.pub.lost is not None:
            self.lost = self.lost or self.pub.lost
            return  # the broker redelivers d when the connection closes
        self.publish_failures += 1
        _task_log(d.tasks[0], "warren worker: outcome not confirmed by the broker; the task goes back to the queue: %s",
                  err, level=logging.WARNING, logger=self.w.log)
        pause = min(_MAX_PUBLISH_BACKOFF, _MIN_PUBLISH_BACKOFF * 2 ** min(self.publish_failures - 1, 10))

        def nack():
            if not self.ended and not d.settled:
                self._requeue(d, "publish_failed", err)
        self.conn.call_later(pause * random.uniform(0.8, 1.2), nack)

    def _requeue(self, d, kind, err=None):
        if d.settled:
            return
        d.settled = True
        try:
            self.ch.basic_nack(d.tag, requeue=True)
        except Exception as e:
            self.lost = self.lost or e
        else:
            for t in d.tasks:
                self.w._emit(self._event(kind, t, error=err))
        self._release(d)

    def _release(self, d):
        if d in self.inflight:
            self.inflight.discard(d)
            self.busy -= 1
        self.w._held -= len(d.tasks)
        self._start_pending()

    def _event(self, kind, t, error=None, reason="", delay=0.0):
        return Event(kind, t.job_id, t.task_id, t.type, t.attempt, error, reason, delay)
