"""One connected period of a worker: its connections, consumers and deliveries."""

import collections
import functools
import json
import logging
import random
import secrets
import time
import traceback
import uuid

import pika
import pika.exceptions

from . import _wire
from ._publisher import POLL, _Publisher
from ._reduce import Outcomes
from ._task import Event, Permanent, ReduceJob, Stale, Task, _go_duration, _now, _task_log

# Bounds of the pause before a task whose outcome was not confirmed goes
# back to the queue: long enough not to spin, short enough not to hold it.
_MIN_PUBLISH_BACKOFF = 0.2
_MAX_PUBLISH_BACKOFF = 1.0
_CONTROL_PREFETCH = 100


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
                if exchange:  # the default exchange binds every queue by its name
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
                if self.lost is None:
                    self.lost = self.pub.lost or self._closed_channel()
                if self.lost is not None:
                    break
                self.conn.process_data_events(time_limit=POLL)
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

    def _closed_channel(self):
        """An error when the broker closed the consuming or the control
        channel (a consumer timeout, say), else None: pika 1.2 and 1.3
        raise nothing for it, so the loops ask."""
        for ch in (self.ch, self.control_ch):
            if ch is not None and ch.is_closed:
                return ConnectionError("the broker closed a channel of the worker")
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
            lost = self.pub.lost or self._closed_channel()
            if lost is not None:
                raise lost
            self.conn.process_data_events(time_limit=min(POLL, max(0.0, deadline - time.monotonic())))
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
            kind, job_id, queue = _wire.decode_control(body)
        except _wire.Malformed as e:
            self.w.log.warning("warren worker: ignoring a malformed control message: %s", e)
        else:
            if kind in ("pause", "resume"):
                key = ("job", job_id) if job_id else ("queue", queue)
                if kind == "pause":
                    self.w._paused.pause(key)
                else:
                    self.w._paused.resume(key)
                self.w.log.debug("warren worker: %s heard job_id=%s queue=%s", kind, job_id, queue)
                self.w._emit(Event(kind + "_seen", job_id=job_id))
            elif not job_id:
                self.w.log.warning("warren worker: ignoring a %s control message without a job_id", kind)
            elif kind == "cancel":
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
        elif w._paused.holds(m.job_id, m.queue):
            self._hold(d)
        elif m.reduce:
            fn = w._reducer(m.type)
            if fn is None:
                if m.type:
                    self._unserved(d, "worker: no reducer for task type %r on this queue" % m.type)
                else:
                    self._dead_letter_all(d, _wire.REASON_UNKNOWN_TYPE,
                                          "worker: the reduce task message has no type property, and reducers are chosen by type")
            else:
                self.pool.submit(self._run, d, fn, self._run_reduce)
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
                if m.type:
                    self._unserved(d, "worker: no handler for task type %r on this queue" % m.type)
                else:
                    self._dead_letter_all(d, _wire.REASON_UNKNOWN_TYPE,
                                          "worker: the task message has no type property, and handlers are chosen by type")
            else:
                self.pool.submit(self._run, d, fn, self._run_tasks)

    def _hold(self, d):
        """Put back the tasks of d, whose job or work queue is paused, without running them.

        Each goes through a retry tier (the nth hold the nth tier, none
        past the second), confirmed before d is acked, with x-retry kept:
        no attempt is spent (docs/protocol.md, "What a worker does with a
        task", step 2).
        """
        w, m = self.w, d.msg
        delay_ms = _wire.held_delay_ms(w.retry_tiers_ms, m.holds + 1)
        _task_log(d.tasks[0], "warren worker: the task's job or queue is paused; it goes back until the resume "
                  "holds=%d delay_ms=%d", m.holds + 1, delay_ms, level=logging.DEBUG, logger=w.log)
        outs = [m.held(w.names, t, delay_ms) for t in m.tasks]
        self._publish(d, outs, [self._event("held", t, delay=delay_ms / 1000.0) for t in d.tasks])

    def _unserved(self, d, error):
        """Put back the tasks of d, whose type this worker does not serve, for a worker that does.

        Each goes through a retry tier (a wait that grows with the bounces,
        no requeue on the spot: that would spin, and count against the
        delivery limit), confirmed before d is acked. Once they have gone
        unserved for longer than their task timeout (an hour without
        x-task-timeout), they are dead-lettered unknown_type instead: the
        clear end (docs/protocol.md, "What a worker does with a task").
        """
        w, m = self.w, d.msg
        now = _now()
        limit_ms = m.timeout_ms or _wire.DEFAULT_TASK_TIMEOUT_MS
        first = m.first_unserved_at
        if first is None or first > now:
            first = now  # a clock ahead of ours must not postpone the end
        waited_ms = (now - first).total_seconds() * 1000
        if m.bounces > 0 and waited_ms >= limit_ms:
            what = "has a reducer for type" if m.reduce else "serves type"
            self._dead_letter_all(d, _wire.REASON_UNKNOWN_TYPE, "no live worker %s %s on queue %s (for %s)" % (
                what, _go_quote(m.type), _go_quote(m.queue), _go_duration(limit_ms)))
            return
        delay_ms = _wire.unserved_delay_ms(w.retry_tiers_ms, m.bounces + 1, limit_ms - waited_ms)
        _task_log(d.tasks[0], "warren worker: no handler for the task's type; it goes back for a worker that serves it "
                  "error=%s bounces=%d delay_ms=%d", error, m.bounces + 1, delay_ms, level=logging.INFO, logger=w.log)
        outs = [m.unserved(w.names, t, delay_ms, now) for t in m.tasks]
        self._publish(d, outs, [self._event("unserved", t, error=error, delay=delay_ms / 1000.0) for t in d.tasks])

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

    def _run(self, d, fn, run):
        try:
            run(d, fn)
        except Exception as e:  # a bug around the handler: the task goes back to the queue, never left unsettled
            _task_log(d.tasks[0], "warren worker: unexpected error around a handler; the task goes back to the queue: %s",
                      e, level=logging.ERROR, logger=self.w.log)
            self._threadsafe(self._requeue, d, "requeued", e)

    def _run_tasks(self, d, fn):
        w, m = self.w, d.msg
        outs, results, evs = [], [], []
        for (task_id, payload), t in zip(m.tasks, d.tasks):
            if self.ended or d.settled:
                return  # the session ended: the broker has the task back
            started = _now()
            t0 = time.monotonic()
            t.started_at = started
            t.deadline = t0 + t.timeout if t.timeout else None
            t._spawn_limit = _wire.MAX_SPAWN_BYTES
            value, err = None, None
            try:
                value = fn(payload, t)
            except BaseException as e:  # noqa: BLE001 - every failure of a handler is an outcome, sys.exit too
                err = e
            t._spawn_ended = True
            elapsed = time.monotonic() - t0
            finished = _now()
            self._decide(d, t, payload, value, err, elapsed, started, finished, outs, results, evs)
        if self.ended or d.settled:
            return
        if results and not m.batch and not outs:
            # A single task message that completed: its result may share a
            # result batch with others that complete at the same time (not
            # one whose spawn goes in parts: they are in outs).
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

    def _run_reduce(self, d, fn):
        """Run a reduce task through its reducer over the outcomes RPC, and settle it."""
        w, m = self.w, d.msg
        t = d.tasks[0]
        payload = m.tasks[0][1]
        started = _now()
        t0 = time.monotonic()
        t.started_at = started
        t.deadline = t0 + t.timeout if t.timeout else None
        job = ReduceJob(m.job_id, m.type, payload, m.expected_tasks, t.attempt, t.max_retries, m.generation,
                        t.timeout, t.deadline, started)
        outcomes = Outcomes(self._params("reduce"), w.names, m.job_id, m.generation, w._outcomes_timeout,
                            deadline=t.deadline, ended=lambda: self.ended or d.settled)
        value, err = None, None
        try:
            value = fn(outcomes, job)
        except BaseException as e:  # noqa: BLE001 - every failure of a reducer is an outcome
            err = e
        finally:
            outcomes.close()
        elapsed = time.monotonic() - t0
        finished = _now()
        if self.ended or d.settled:
            return
        if outcomes.error is not None:
            if isinstance(outcomes.error, Stale):
                _task_log(t, "warren worker: reduce task dropped; its job no longer reduces: %s", outcomes.error,
                          level=logging.INFO, logger=w.log)
                self._publish(d, [], [self._event("skipped", t)])
                return
            value, err = None, outcomes.error  # the outcomes were not all read
        outs, results, evs = [], [], []
        self._decide(d, t, payload, value, err, elapsed, started, finished, outs, results, evs)
        try:
            if results:
                # A single result message, never a result batch: task 0 is no map task.
                outs = outs + m.results(w.names, results, w.max_message_bytes)
        except Exception as e:  # only a bug gets here: the result was checked
            w.log.error("warren worker: cannot encode the reduce result; the task goes back to the queue: %s", e)
            self._threadsafe(self._failed, d, e, evs)
            return
        self._publish(d, outs, evs)

    def _decide(self, d, t, payload, value, err, elapsed, started, finished, outs, results, evs):
        """The outcome of one run, as the Go worker's outcome.Of decides it."""
        w, m = self.w, d.msg
        task = (t.task_id, payload)
        permanent, reason, text, tb = False, "", "", ""
        if isinstance(err, BaseException):
            tb = _traceback(err)
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
                room = w.max_message_bytes - _wire.ENVELOPE_BYTES
                spawn = t._spawn
                parts = None
                if spawn and len(raw) + t._spawn_bytes > room:
                    parts = _wire.spawn_parts(spawn, t._spawn_sizes, room - len(raw) - _wire.SPAWN_PART_OVERHEAD)
                if len(raw) > w.max_result_bytes:
                    permanent, reason = True, _wire.REASON_RESULT_TOO_LARGE
                    text = ("worker: the result is %d bytes of JSON, over this worker's limit of %d (max_result_bytes); "
                            "return a reference to large data instead, or raise the limit" % (len(raw), w.max_result_bytes))
                elif spawn and len(raw) + t._spawn_bytes > room and \
                        max(t._spawn_sizes) > room - len(raw) - _wire.SPAWN_PART_OVERHEAD:
                    permanent, reason = True, _wire.REASON_RESULT_TOO_LARGE
                    text = ("worker: a spawned task with the result is %d bytes of JSON, over the %d one result message "
                            "carries (max_message_bytes less 16 KiB); spawn smaller tasks, or return a smaller result"
                            % (len(raw) + max(t._spawn_sizes) + _wire.SPAWN_PART_OVERHEAD, room))
                elif parts is not None and len(parts) > _wire.MAX_SPAWN_PARTS:
                    permanent, reason = True, _wire.REASON_RESULT_TOO_LARGE
                    text = ("worker: the spawned tasks take %d messages, more than the %d one run may spawn in"
                            % (len(parts), _wire.MAX_SPAWN_PARTS))
                else:
                    r = {"task_id": t.task_id, "result": value, "status": "completed", "worker": w.name,
                         "attempt": t.attempt, "started_at": _wire.format_time(started),
                         "finished_at": _wire.format_time(finished)}
                    if parts is not None:
                        # In parts: each but the last in a message of its
                        # own, published with the rest before the ack.
                        run = secrets.token_hex(8)
                        for k, part in enumerate(parts[:-1]):
                            p = {"task_id": t.task_id, "result": None, "status": "completed", "worker": w.name,
                                 "attempt": t.attempt, "spawn": part, "spawn_run": run, "spawn_part": k + 1,
                                 "spawn_parts": len(parts)}
                            outs.extend(m.results(w.names, [p], w.max_message_bytes, batch=False))
                        r.update(spawn=parts[-1], spawn_run=run, spawn_part=len(parts), spawn_parts=len(parts))
                    elif spawn:
                        r["spawn"] = spawn
                    results.append(r)
                    _task_log(t, "warren worker: task completed duration=%.3fs", elapsed, logger=w.log)
                    evs.append(self._event("completed", t))
                    return
        if not permanent and t.attempt <= t.max_retries:
            tiers = w.retry_tiers_ms
            delay = tiers[_wire.retry_tier(t.attempt, len(tiers))]
            _task_log(t, "warren worker: task failed; retrying in %s error=%s", _go_duration(delay), text, logger=w.log)
            if tb:
                _task_log(t, "warren worker: the retried run's traceback:\n%s", tb, logger=w.log)
            outs.append(m.retry(w.names, task, delay))
            # The server keeps the failed run as an attempt of the task;
            # confirmed with the retry, before the ack.
            outs.append(m.retried_attempt(w.names, {
                "task_id": t.task_id, "result": None, "error": text, "traceback": tb, "worker": w.name,
                "attempt": t.attempt, "started_at": _wire.format_time(started), "finished_at": _wire.format_time(finished)}))
            evs.append(self._event("retried", t, error=text, delay=delay / 1000.0))
            return
        if tb:
            _task_log(t, "warren worker: task dead-lettered reason=%s error=%s\n%s", reason, text, tb,
                      level=logging.WARNING, logger=w.log)
        else:
            _task_log(t, "warren worker: task dead-lettered reason=%s error=%s", reason, text,
                      level=logging.WARNING, logger=w.log)
        outs.append(m.dead_letter(w.names, task, reason, text, w.name, started, _now(), traceback=tb))
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


def _traceback(err):
    """err's traceback as Python prints it, its last MAX_TRACEBACK_BYTES (the exception is at the end)."""
    try:
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    except Exception:  # noqa: BLE001 - a traceback that cannot be formatted is left out, never a failure
        return ""
    return _wire.tail_utf8(text, _wire.MAX_TRACEBACK_BYTES)


def _go_quote(s):
    """s as Go's %q writes a plain string: in double quotes, JSON-escaped."""
    return json.dumps(s, ensure_ascii=False)
