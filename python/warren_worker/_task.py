"""The task, its failure and the worker's events, as handlers and on_event see them."""

import collections
import datetime
import logging
import time

from . import _wire

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

    ``spawn(payloads)`` adds tasks to the task's job (see its doc).
    """

    __slots__ = ("job_id", "task_id", "type", "attempt", "max_retries", "queue", "generation",
                 "timeout", "deadline", "started_at", "_spawn", "_spawn_sizes", "_spawn_bytes", "_spawn_limit", "_spawn_ended")

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
        self._spawn = []
        self._spawn_sizes = []  # each payload's bytes of JSON, with a comma
        self._spawn_bytes = 0
        self._spawn_limit = 0  # the worker sets it: the most one run may spawn
        self._spawn_ended = False

    def spawn(self, payloads):
        """Add tasks to the task's job, one per JSON value of the list payloads.

        May be called several times in one run; the tasks go with the run's
        result and exist only if it is recorded completed: a run that
        raises, times out or is retried spawns nothing, and a task that ran
        before, or whose result is delivered twice, spawns once. They get
        the job's next task ids in order, and its expected_tasks grows by as
        many. A spawn that does not fit in one result message with the
        result goes in several (spawn parts), recorded together. Raises
        TypeError or ValueError, adding none of them, when a payload is not
        JSON or the run's spawn would be over 64 MiB of JSON, and
        RuntimeError after the run returned; a payload that cannot fit in
        one message with the result fails the run (``result_too_large``). The server fails the task instead when the
        spawn would take its job over its --max-job-tasks, or a payload is
        over its --max-task-bytes.
        """
        if isinstance(payloads, (str, bytes, dict)):
            raise TypeError("spawn takes a list of payloads, got %s" % type(payloads).__name__)
        if self._spawn_ended:
            raise RuntimeError("spawn after the task's run returned; spawn before returning")
        payloads = list(payloads)
        sizes = []
        for i, p in enumerate(payloads):
            try:
                sizes.append(len(_wire.encode_json(p)) + 1)
            except (TypeError, ValueError) as e:
                raise type(e)("spawn payload %d is not JSON: %s" % (i, e)) from e
        size = sum(sizes)
        if self._spawn_limit and self._spawn_bytes + size > self._spawn_limit:
            raise ValueError("the spawned tasks are %d bytes of JSON, over the %d one run may spawn; "
                             "spawn fewer tasks per run, and let them spawn the rest"
                             % (self._spawn_bytes + size, self._spawn_limit))
        self._spawn.extend(payloads)
        self._spawn_sizes.extend(sizes)
        self._spawn_bytes += size

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


class ReduceJob:
    """A job's reduce task as its reducer sees it.

    Attributes: ``job_id``, ``type`` (the reducer's name), ``payload`` (the
    payload of the job's reduce, None when it has none),
    ``expected_tasks`` (the number of the job's map tasks), ``attempt``,
    ``max_retries``, ``generation``, ``timeout`` (seconds, or None),
    ``deadline`` (``time.monotonic()`` value, or None) and
    ``idempotency_key`` (``<job_id>:0``).
    """

    __slots__ = ("job_id", "type", "payload", "expected_tasks", "attempt", "max_retries", "generation",
                 "timeout", "deadline", "started_at")

    def __init__(self, job_id, type, payload, expected_tasks, attempt, max_retries, generation, timeout, deadline, started_at):
        self.job_id = job_id
        self.type = type
        self.payload = payload
        self.expected_tasks = expected_tasks
        self.attempt = attempt
        self.max_retries = max_retries
        self.generation = generation
        self.timeout = timeout
        self.deadline = deadline
        self.started_at = started_at

    @property
    def idempotency_key(self):
        """``<job_id>:0``, the reduce task message's id."""
        return _wire.message_id(self.job_id, _wire.REDUCE_TASK_ID)

    def time_left(self):
        """Seconds left before the run's deadline, or None when it has no time limit."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def __repr__(self):
        return "ReduceJob(job_id=%r, type=%r, attempt=%r)" % (self.job_id, self.type, self.attempt)


class OutcomesError(Exception):
    """The outcomes of a reduce task could not be read: the run fails and is retried.

    ``code`` is the server's error code (``unavailable``, ``bad_request``),
    or "" when there was no reply in time or the reply was not one.
    """

    def __init__(self, message, code=""):
        super().__init__(message)
        self.code = code


class Stale(OutcomesError):
    """The server says the job no longer reduces at this generation.

    The reduce task is acked and nothing is published, whatever the
    reducer returns.
    """


Event = collections.namedtuple("Event", "kind job_id task_id type attempt error reason delay")
Event.__doc__ = """What happened to a task, for Worker(on_event=...).

kind is one of: started, completed, retried, dead_lettered, skipped,
split, requeued, unserved, held (its job or queue paused), publish_failed
(per task); cancel_seen (job_id only); pause_seen, resume_seen (job_id,
or "" for a queue's); connected, reconnected, connection_lost, draining
(no task).
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


def _task_log(t, msg, *args, level=logging.DEBUG, logger=None):
    (logger or log).log(level, msg + " job_id=%s task_id=%s type=%s attempt=%d",
                        *(args + (t.job_id, t.task_id, t.type, t.attempt)),
                        extra={"job_id": t.job_id, "task_id": t.task_id, "task_type": t.type, "attempt": t.attempt})
