"""Warren's wire protocol (docs/protocol.md) for the Python worker.

This module is the one place that reads a task delivery and builds the
messages that settle it: results, result batches, retries, dead letters and
the single task messages of a split batch. Names, headers and bodies are
those of docs/protocol.md byte for byte; the Go reference is
internal/wire and protocol/ in the warren repository.
"""

import datetime
import json
import math
import re
from collections import namedtuple

import pika

CONTENT_TYPE = "application/json"

# Headers (docs/protocol.md, "Task messages" and "Dead-lettering a task").
HEADER_RETRY = "x-retry"
HEADER_MAX_RETRIES = "x-max-retries"
HEADER_GENERATION = "x-generation"
HEADER_TASK_TIMEOUT = "x-task-timeout"
HEADER_QUEUE = "x-queue"
HEADER_REASON = "x-failure-reason"
HEADER_ERROR = "x-error"
HEADER_WORKER = "x-worker"
HEADER_FAILED_AT = "x-failed-at"
HEADER_STARTED_AT = "x-started-at"
HEADER_TRACEBACK = "x-traceback"
HEADER_DELIVERY_COUNT = "x-delivery-count"
HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
HEADER_REDUCE = "x-reduce"
# A task no handler here serves goes back through a retry tier with these
# (docs/protocol.md, "What a worker does with a task", step 3).
HEADER_UNSERVED = "x-unserved"
HEADER_FIRST_UNSERVED_AT = "x-first-unserved-at"
DEFAULT_TASK_TIMEOUT_MS = 3600_000  # warren.DefaultTaskTimeout: the clear end of a message without x-task-timeout
MAX_UNSERVED_TIER = 3  # the nth bounce waits the nth tier, none past the third
HEADER_HELD = "x-held"  # times put back because the task's job or queue was paused
MAX_HELD_TIER = 2  # the nth hold waits the nth tier, none past the second
# A pause lasts this long after the last pause message heard of it
# (protocol.PauseLease): servers send it again every 10 s.
PAUSE_LEASE_S = 35.0

# Reduce tasks and the outcomes RPC (docs/protocol.md, "Reduce tasks").
REDUCE_TASK_ID = 0
DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
OUTCOMES_TIMEOUT = 60.0  # seconds a worker waits for each reply
OUTCOMES_EXPIRATION = "60000"
OUTCOMES_STALE = "stale"
OUTCOMES_UNAVAILABLE = "unavailable"
OUTCOMES_BAD_REQUEST = "bad_request"

# Dead-letter reasons (x-failure-reason).
REASON_PERMANENT = "permanent"
REASON_RETRIES_EXHAUSTED = "retries_exhausted"
REASON_TIMEOUT = "timeout"
REASON_UNKNOWN_TYPE = "unknown_type"
REASON_MALFORMED = "malformed"
REASON_TOO_LARGE = "too_large"
REASON_RESULT_TOO_LARGE = "result_too_large"

ROUTING_KEY_TASK = "task"
ROUTING_KEY_RESULT = "result"
ROUTING_KEY_TASK_FAILED = "task.failed"
ROUTING_KEY_RESULT_INVALID = "result.invalid"
# Attempt messages: a retried run's failure, for a server that records
# attempts (docs/protocol.md, "Attempt messages"); until one binds the key
# the broker drops them, which is no error (Outbound.optional).
ROUTING_KEY_ATTEMPT = "attempt"

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRIES = 3  # warren.DefaultMaxRetries: a task message without x-max-retries
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20
DEFAULT_MAX_RESULT_BYTES = 1 << 20
ENVELOPE_BYTES = 16 << 10

# The most bytes of JSON one run may spawn, and the room a spawn part's
# own fields take in its message (docs/protocol.md, "Spawned tasks").
MAX_SPAWN_BYTES = 64 << 20
SPAWN_PART_OVERHEAD = 160
MAX_SPAWN_PARTS = 10000


def spawn_parts(payloads, sizes, room):
    """Cut payloads (of sizes bytes of JSON each, with a comma) in order into parts of at most room bytes."""
    parts, part, used = [], [], 0
    for p, n in zip(payloads, sizes):
        if part and used + n > room:
            parts.append(part)
            part, used = [], 0
        part.append(p)
        used += n
    parts.append(part)
    return parts
MAX_BATCH_SIZE = 1000
MAX_PAYLOAD_DEPTH = 61
MAX_INT32 = 2147483647
MAX_INT64 = 9223372036854775807
DEFAULT_DELIVERY_LIMIT = 20
DEAD_LETTER_DELIVERY_LIMIT = MAX_INT32
# The header keeps the first 4096 bytes of an error: headers must fit in one frame.
MAX_HEADER_ERROR = 4096
# The most of a handler's traceback a failure carries (its last bytes,
# where the exception is): protocol.MaxTracebackBytes.
MAX_TRACEBACK_BYTES = 16 << 10

# Retry tiers, in milliseconds: protocol.DefaultRetryTiers.
DEFAULT_RETRY_TIERS_MS = (1000, 5000, 30000, 120000, 600000)

_QUEUE_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")


class Names:
    """The exchange and queue names of one installation (protocol.NamesFor)."""

    def __init__(self, prefix=""):
        self.prefix = prefix
        self.jobs_exchange = prefix + "jobs.x"
        self.tasks_queue = prefix + "tasks.q"
        self.results_exchange = prefix + "results.x"
        self.results_queue = prefix + "results.q"
        self.dead_letter_exchange = prefix + "dlx.x"
        self.tasks_dlq = prefix + "tasks.dlq"
        self.dead_queue = prefix + "dead.q"
        self.results_dlq = prefix + "results.dlq"
        self.retry_exchange = prefix + "retry.x"
        self.control_exchange = prefix + "control.x"
        self.heartbeat_exchange = prefix + "heartbeat.x"
        self.outcomes_queue = prefix + "outcomes.q"

    def work_queue(self, q):
        """Work queue q: tasks.q for the default queue, tasks.<q>.q else."""
        if q in ("", DEFAULT_QUEUE):
            return self.tasks_queue
        return self.prefix + "tasks." + q + ".q"

    def retry_queue(self, q, tier):
        """The delay queue named tier of work queue q."""
        if q in ("", DEFAULT_QUEUE):
            return self.prefix + "retry." + tier + ".q"
        return self.prefix + "retry." + q + "." + tier + ".q"

    def exchanges(self):
        """Every exchange, with its kind."""
        return [
            (self.jobs_exchange, "direct"),
            (self.results_exchange, "direct"),
            (self.dead_letter_exchange, "direct"),
            (self.retry_exchange, "direct"),
            (self.control_exchange, "fanout"),
            (self.heartbeat_exchange, "fanout"),
        ]


def check_queue_name(q):
    """Raise ValueError unless q can name a work queue."""
    if not isinstance(q, str) or not _QUEUE_NAME.match(q):
        raise ValueError("a queue name must be 1 to 64 lowercase letters, digits, '-' and '_', got %r" % (q,))


def task_routing_key(q):
    """The routing key of work queue q on the jobs exchange."""
    if q in ("", DEFAULT_QUEUE):
        return ROUTING_KEY_TASK
    return ROUTING_KEY_TASK + "." + q


def retry_routing_key(q, tier):
    """The routing key of tier of work queue q on the retry exchange."""
    if q in ("", DEFAULT_QUEUE):
        return tier
    return q + "." + tier


def tier_name(ms):
    """Name a retry tier by its delay in milliseconds, as Go does.

    Whole seconds are written as Go writes durations, without trailing zero
    units (1s, 30s, 2m, 1m30s, 1h, 1h30m); anything else in milliseconds.
    """
    if ms % 1000:
        return "%dms" % ms
    secs = ms // 1000
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    if h:
        name = "%dh%dm%ds" % (h, m, s)
    elif m:
        name = "%dm%ds" % (m, s)
    else:
        name = "%ds" % s
    if name.endswith("m0s"):
        name = name[:-2]
    if name.endswith("h0m"):
        name = name[:-2]
    return name


def retry_tier(retry, n):
    """The index of the tier that retry number retry (1 for the first) waits in."""
    return min(max(retry, 1), n) - 1


def unserved_delay_ms(tiers_ms, n, left_ms):
    """The wait of a task's nth bounce for want of a handler, as the Go worker's.

    The nth tier, none past MAX_UNSERVED_TIER, and the longest within
    left_ms (the time before its clear end) when that one is longer; the
    first tier at least.
    """
    i = retry_tier(n, min(len(tiers_ms), MAX_UNSERVED_TIER))
    while i > 0 and tiers_ms[i] > left_ms:
        i -= 1
    return tiers_ms[i]


_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_time(s):
    """An RFC 3339 time (as Go's RFC3339Nano writes it), in UTC; None when s is not one."""
    m = _TIME.match(s or "")
    if not m:
        return None
    y, mo, d, h, mi, sec, frac, zone = m.groups()
    try:
        tz = datetime.timezone.utc
        if zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        t = datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), int((frac or "0").ljust(6, "0")[:6]), tz)
    except ValueError:
        return None
    return t.astimezone(datetime.timezone.utc)


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "μs": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def parse_duration_ms(text):
    """Parse a Go duration such as 250ms, 5s, 1m30s or 1.5s into milliseconds.

    The result must be a positive whole number of milliseconds, as retry
    tiers must; anything else raises ValueError.
    """
    s = text.strip()
    if not s:
        raise ValueError("an empty duration")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError("%r is not a duration (like 500ms, 5s, 2m)" % text)
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    return _whole_ms(total, text)


def _whole_ms(total, what):
    rounded = round(total)
    if rounded <= 0 or abs(total - rounded) > 1e-6:
        raise ValueError("retry tier %r must be a positive whole number of milliseconds" % (what,))
    return int(rounded)


def tier_ms(value):
    """Milliseconds of one retry tier: seconds (int or float), a timedelta, or a Go duration string."""
    if isinstance(value, bool):
        raise ValueError("retry tier %r is not a duration" % (value,))
    if isinstance(value, str):
        return parse_duration_ms(value)
    if isinstance(value, datetime.timedelta):
        return _whole_ms(value.total_seconds() * 1000.0, value)
    if isinstance(value, (int, float)):
        return _whole_ms(float(value) * 1000.0, value)
    raise ValueError("retry tier %r is not a duration" % (value,))


def header_int(headers, key):
    """A non-negative integer header (at most 2147483647), or None.

    Accepts any AMQP integer, an integral float or a decimal string, as
    the Go code does (internal/wire, lookupInt).
    """
    v = (headers or {}).get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        if v != v or v < 0 or v > MAX_INT32 or v != math.floor(v):
            return None
        return int(v)
    if isinstance(v, (str, bytes)):
        try:
            v = int(v.decode() if isinstance(v, bytes) else v, 10)
        except (ValueError, UnicodeDecodeError):
            return None
    if not isinstance(v, int) or v < 0 or v > MAX_INT32:
        return None
    return v


def header_str(headers, key):
    """A string header, or ""."""
    v = (headers or {}).get(key)
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return ""
    return v if isinstance(v, str) else ""


def json_depth(value):
    """The deepest nesting of lists and dicts in a decoded JSON value (0 for a scalar)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            d += 1
            stack.extend((x, d) for x in v.values())
        elif isinstance(v, list):
            d += 1
            stack.extend((x, d) for x in v)
        else:
            continue
        if d > deepest:
            deepest = d
    return deepest


class Malformed(Exception):
    """The body is not a task message: dead-letter it whole."""


class TooLarge(Malformed):
    """The body is over the worker's maximum message size: dead-letter it unread."""


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _check_task_id(v):
    if not _is_int(v) or v < 1 or v > MAX_INT64:
        raise Malformed("malformed message: task_id must be a positive integer, got %s" % json.dumps(v)[:64])
    return v


def _check_payload(task_id, payload):
    d = json_depth(payload)
    if d > MAX_PAYLOAD_DEPTH:
        raise Malformed("malformed message: task %d: the payload is nested %d levels deep, more than the protocol's %d" % (task_id, d, MAX_PAYLOAD_DEPTH))


def decode_tasks(body):
    """Decode a task message body: (job_id, [(task_id, payload)], batch).

    Raises Malformed with the reason when it is not a task message, as
    protocol.DecodeTasks does.
    """
    job_id, tasks, batch, _, _ = decode_task_message(body)
    return job_id, tasks, batch


def decode_task_message(body):
    """decode_tasks, and whether it is a reduce task with its expected_tasks.

    A task_id of 0 is valid only with "reduce": true, on a single task
    message: the job's reduce task.
    """
    try:
        m = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise Malformed("malformed message: %s" % e) from None
    if not isinstance(m, dict):
        raise Malformed("malformed message: body is not a JSON object")
    job_id = m.get("job_id")
    if job_id is None:
        job_id = ""
    if not isinstance(job_id, str):
        raise Malformed("malformed message: job_id is not a string")
    tasks = m.get("tasks")
    reduce = m.get("reduce", False)
    if reduce is None:
        reduce = False
    if not isinstance(reduce, bool):
        raise Malformed("malformed message: reduce is not a boolean")
    if tasks is None:
        if not job_id:
            raise Malformed("malformed message: job_id is missing")
        payload = m.get("payload")
        if reduce:
            task_id = m.get("task_id", 0)
            if not _is_int(task_id) or task_id != REDUCE_TASK_ID:
                raise Malformed("malformed message: a reduce task's task_id must be 0, got %s" % json.dumps(task_id)[:64])
            expected = m.get("expected_tasks", 0)
            if expected is None:
                expected = 0
            if not _is_int(expected) or expected < 0:
                raise Malformed("malformed message: expected_tasks must be a non-negative integer")
            _check_payload(task_id, payload)
            return job_id, [(task_id, payload)], False, True, expected
        task_id = m.get("task_id", 0)
        if _is_int(task_id) and task_id == 0 and "task_id" in m:
            raise Malformed('malformed message: task_id 0 is only valid with "reduce": true')
        task_id = _check_task_id(task_id)
        _check_payload(task_id, payload)
        return job_id, [(task_id, payload)], False, False, 0
    if reduce:
        raise Malformed("malformed message: a reduce task is never batched")
    if m.get("task_id") not in (None, 0) or not isinstance(tasks, list):
        raise Malformed("malformed message: a batch has tasks, not a task_id")
    if not job_id:
        raise Malformed("malformed message: job_id is missing")
    if not 1 <= len(tasks) <= MAX_BATCH_SIZE:
        raise Malformed("malformed message: a batch must hold 1 to %d tasks, got %d" % (MAX_BATCH_SIZE, len(tasks)))
    out, prev = [], 0
    for t in tasks:
        if not isinstance(t, dict):
            raise Malformed("malformed message: a batch's tasks must be objects")
        task_id = _check_task_id(t.get("task_id", 0))
        if task_id <= prev:
            raise Malformed("malformed message: a batch's task ids must increase, got %d after %d" % (task_id, prev))
        prev = task_id
        _check_payload(task_id, t.get("payload"))
        out.append((task_id, t.get("payload")))
    return job_id, out, True, False, 0


def message_id(job_id, task_id):
    """The message id of a task and of its result, also its idempotency key."""
    return "%s:%d" % (job_id, task_id)


def batch_message_id(job_id, first, count):
    """The message id of a task batch and of a result batch."""
    return "%s:%d+%d" % (job_id, first, count)


def format_time(t):
    """An RFC 3339 time in UTC, as precise as the clock."""
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode_json(value):
    """A value as compact JSON bytes; raises ValueError or TypeError when it is not JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def truncate_utf8(s, n):
    """s cut to at most n bytes of UTF-8, on a character boundary."""
    b = s.encode("utf-8", "replace")
    if len(b) <= n:
        return s
    return b[:n].decode("utf-8", "ignore")


def tail_utf8(s, n):
    """The last n bytes of s's UTF-8 at most, on a character boundary."""
    b = s.encode("utf-8", "replace")
    if len(b) <= n:
        return s
    return b[len(b) - n:].decode("utf-8", "ignore")


# optional: the message may go unrouted (published without mandatory), as
# an attempt message before any server records attempts.
Outbound = namedtuple("Outbound", "exchange routing_key properties body optional", defaults=(False,))


class TaskDelivery:
    """A delivery of a work queue, read once where it is received.

    It holds the message's tasks and what its properties and headers say,
    and builds the copies that settle them (retry, dead_letter, split,
    results), from the delivery as it came.
    """

    def __init__(self, method, props, body, queue, max_bytes):
        self.method = method
        self.props = props
        self.body = body
        self.queue = queue  # the work queue it was consumed from
        headers = props.headers or {}
        self.type = props.type or ""
        self.retries = header_int(headers, HEADER_RETRY) or 0
        mr = header_int(headers, HEADER_MAX_RETRIES)
        self.max_retries = DEFAULT_MAX_RETRIES if mr is None else mr
        self.generation = header_int(headers, HEADER_GENERATION) or 0
        self.timeout_ms = header_int(headers, HEADER_TASK_TIMEOUT) or 0
        self.redelivered = bool(method.redelivered)
        self.bounces = header_int(headers, HEADER_UNSERVED) or 0
        self.first_unserved_at = parse_time(header_str(headers, HEADER_FIRST_UNSERVED_AT))
        self.holds = header_int(headers, HEADER_HELD) or 0
        self.job_id, self.tasks, self.batch = "", [], False
        self.reduce, self.expected_tasks = False, 0
        self.malformed = None
        if len(body) > max_bytes:
            self.malformed = TooLarge(
                "message too large: the task message is %d bytes, over this worker's limit of %d "
                "(max_message_bytes; keep it equal to the server's --max-message-bytes)" % (len(body), max_bytes))
            return
        try:
            self.job_id, self.tasks, self.batch, self.reduce, self.expected_tasks = decode_task_message(body)
        except Malformed as e:
            self.malformed = e

    @property
    def attempt(self):
        """The run this delivery is for: x-retry + 1."""
        return self.retries + 1

    def trace_headers(self):
        """The W3C trace context headers the task message carries, to carry on."""
        headers = self.props.headers or {}
        out = {}
        for k in (HEADER_TRACEPARENT, HEADER_TRACESTATE):
            v = header_str(headers, k)
            if v:
                out[k] = v
        return out

    def _copy(self, task=None):
        """A persistent copy of the message, or of one task of a batch as a single task message."""
        p = self.props
        headers = dict(p.headers or {})
        mid = p.message_id
        body = self.body
        if self.batch and task is not None:
            task_id, payload = task
            body = encode_json({"job_id": self.job_id, "task_id": task_id, "payload": payload})
            mid = message_id(self.job_id, task_id)
        elif not mid:
            if task is not None:
                mid = message_id(self.job_id, task[0])
            else:
                mid = "malformed:%s:%d" % (self.method.consumer_tag, self.method.delivery_tag)
        # user_id is left out: the broker closes the channel of a publish
        # whose user_id is not the connection's user.
        props = pika.BasicProperties(
            content_type=p.content_type, content_encoding=p.content_encoding, headers=headers,
            delivery_mode=2, priority=p.priority, correlation_id=p.correlation_id, reply_to=p.reply_to,
            expiration=p.expiration, message_id=mid, timestamp=p.timestamp, type=p.type, app_id=p.app_id)
        return props, body

    def retry(self, names, task, delay_ms):
        """The copy of task that runs it again after delay_ms, through its queue's tier."""
        props, body = self._copy(task)
        props.headers[HEADER_RETRY] = self.retries + 1
        props.expiration = None  # a per-message TTL would cut the tier's delay short
        return Outbound(names.retry_exchange, retry_routing_key(self.queue, tier_name(delay_ms)), props, body)

    def unserved(self, names, task, delay_ms, now):
        """The copy of task that a worker without its handler puts back after delay_ms.

        As retry, through the queue's tier, but with x-retry kept (it did
        not run), x-unserved incremented, x-first-unserved-at set to now
        unless it is set already, and without x-delivery-count (a new
        message: the delivery limit never counts the bounces).
        """
        props, body = self._copy(task)
        props.expiration = None
        h = props.headers
        h.pop(HEADER_DELIVERY_COUNT, None)
        h[HEADER_UNSERVED] = self.bounces + 1
        h[HEADER_FIRST_UNSERVED_AT] = format_time(self.first_unserved_at or now)
        return Outbound(names.retry_exchange, retry_routing_key(self.queue, tier_name(delay_ms)), props, body)

    def held(self, names, task, delay_ms):
        """The copy of task that puts it back after delay_ms because its job or queue is paused.

        As unserved, through the queue's tier with x-retry kept (it did
        not run) and without x-delivery-count, but with x-held incremented
        and the unserved headers left as they are: a hold is not a bounce.
        """
        props, body = self._copy(task)
        props.expiration = None
        h = props.headers
        h.pop(HEADER_DELIVERY_COUNT, None)
        h[HEADER_HELD] = self.holds + 1
        return Outbound(names.retry_exchange, retry_routing_key(self.queue, tier_name(delay_ms)), props, body)

    def dead_letter(self, names, task, reason, error, worker, started_at, failed_at, traceback=""):
        """The copy of task (None: the whole message) for the dead-letter exchange."""
        props, body = self._copy(task)
        h = props.headers
        props.expiration = None
        h[HEADER_ERROR] = truncate_utf8(error, MAX_HEADER_ERROR)
        if traceback:
            h[HEADER_TRACEBACK] = tail_utf8(traceback, MAX_TRACEBACK_BYTES)
        else:
            h.pop(HEADER_TRACEBACK, None)
        h[HEADER_REASON] = reason
        h[HEADER_WORKER] = worker
        h[HEADER_FAILED_AT] = format_time(failed_at)
        if started_at is None:
            h.pop(HEADER_STARTED_AT, None)
        else:
            h[HEADER_STARTED_AT] = format_time(started_at)
        h[HEADER_RETRY] = self.retries
        return Outbound(names.dead_letter_exchange, ROUTING_KEY_TASK_FAILED, props, body)

    def retried_attempt(self, names, result):
        """The attempt message of a run that failed and is retried (a result dict, status "retried").

        A single result for the results exchange with ROUTING_KEY_ATTEMPT,
        its traceback cut to its last MAX_TRACEBACK_BYTES; optional.
        """
        r = dict(result, status="retried")
        if r.get("traceback"):
            r["traceback"] = tail_utf8(r["traceback"], MAX_TRACEBACK_BYTES)
        body, mid = self._result_body([r], False)
        return Outbound(names.results_exchange, ROUTING_KEY_ATTEMPT, self._result_props(mid), body, True)

    def split(self, task):
        """Task of a batch as a single task message, for where the batch came from."""
        props, body = self._copy(task)
        props.headers.pop(HEADER_DELIVERY_COUNT, None)
        return Outbound(self.method.exchange, self.method.routing_key, props, body)

    def results(self, names, results, max_bytes, batch=None):
        """The result messages of completed tasks (dicts with task_id, result, ...).

        A single task message gets a single result message; a batch gets
        result batches, cut in halves until each fits max_bytes.
        """
        batch = self.batch if batch is None else batch
        body, mid = self._result_body(results, batch)
        if len(body) <= max_bytes or not batch or len(results) == 1:
            return [Outbound(names.results_exchange, ROUTING_KEY_RESULT, self._result_props(mid), body)]
        half = len(results) // 2
        return (self.results(names, results[:half], max_bytes, batch)
                + self.results(names, results[half:], max_bytes, batch))

    def _result_body(self, results, batch):
        if batch:
            first = results[0]["task_id"]
            return (encode_json({"job_id": self.job_id, "results": results}),
                    batch_message_id(self.job_id, first, len(results)))
        r = dict(results[0])
        body = {"job_id": self.job_id}
        body.update(r)
        return encode_json(body), message_id(self.job_id, r["task_id"])

    def _result_props(self, mid):
        headers = self.trace_headers()
        if self.generation > 0:
            headers[HEADER_GENERATION] = self.generation
        return pika.BasicProperties(
            content_type=CONTENT_TYPE, delivery_mode=2, message_id=mid, correlation_id=self.job_id,
            timestamp=int(datetime.datetime.now(datetime.timezone.utc).timestamp()), headers=headers)


Outcome = namedtuple("Outcome", "task_id state result error")
Outcome.__doc__ = """One map task's outcome, as a reducer reads it: task_id, state
("completed" or "failed"), result (when completed) and error (when failed)."""


def outcomes_request(names, job_id, generation, after, correlation_id):
    """The outcomes RPC request for job_id's outcomes after task after: an Outbound."""
    body = encode_json({"job_id": job_id, "generation": generation, "after": after})
    props = pika.BasicProperties(content_type=CONTENT_TYPE, delivery_mode=1, reply_to=DIRECT_REPLY_TO,
                                 correlation_id=correlation_id, expiration=OUTCOMES_EXPIRATION)
    return Outbound("", names.outcomes_queue, props, body)


def decode_outcomes_reply(body, after):
    """Read a reply of the outcomes RPC to a request for the outcomes after task after.

    Returns ("page", [Outcome], next), next None on the last page, or
    ("error", code, message); raises Malformed when the body is neither,
    as protocol.DecodeOutcomesReply does.
    """
    try:
        m = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise Malformed("malformed outcomes reply: %s" % e) from None
    if not isinstance(m, dict):
        raise Malformed("malformed outcomes reply: not a JSON object")
    err = m.get("error")
    if err is not None:
        if not isinstance(err, dict) or not isinstance(err.get("code"), str) or not err.get("code"):
            raise Malformed("malformed outcomes reply: an error needs a code")
        msg = err.get("message")
        return "error", err["code"], msg if isinstance(msg, str) else ""
    items = m.get("outcomes")
    if not isinstance(items, list) or not items:
        raise Malformed("malformed outcomes reply: a page holds at least one outcome")
    out, prev = [], after
    for o in items:
        if not isinstance(o, dict):
            raise Malformed("malformed outcomes reply: outcomes must be objects")
        tid, state = o.get("task_id"), o.get("state")
        if not _is_int(tid) or tid <= prev:
            raise Malformed("malformed outcomes reply: task ids must increase from after %d" % after)
        if state not in ("completed", "failed"):
            raise Malformed("malformed outcomes reply: task %d: unknown state %r" % (tid, state))
        error = o.get("error")
        out.append(Outcome(tid, state, o.get("result"), error if isinstance(error, str) else ""))
        prev = tid
    nxt = m.get("next")
    if nxt is not None and (not _is_int(nxt) or nxt < prev):
        raise Malformed("malformed outcomes reply: next must be an integer at or above the page's last task id")
    return "page", out, nxt


def decode_control(body):
    """Decode a control message: (type, job_id, queue), one of job_id and queue "", or raise Malformed."""
    try:
        m = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise Malformed("malformed control message: %s" % e) from None
    if not isinstance(m, dict):
        raise Malformed("malformed control message: not a JSON object")
    kind, job_id, queue = m.get("type"), m.get("job_id", ""), m.get("queue", "")
    if not isinstance(kind, str) or not kind or not isinstance(job_id, str) or not isinstance(queue, str) \
            or bool(job_id) == bool(queue):
        raise Malformed("malformed control message: needs a string type and a non-empty job_id or queue (not both)")
    return kind, job_id, queue


def held_delay_ms(tiers_ms, n):
    """The wait of a task's nth hold (its job or queue paused): the nth tier, none past MAX_HELD_TIER."""
    return tiers_ms[retry_tier(n, min(len(tiers_ms), MAX_HELD_TIER))]


def _quorum(replicas):
    args = {"x-queue-type": "quorum"}
    if replicas > 0:
        args["x-quorum-initial-group-size"] = replicas
    return args


def _at_least_once(replicas, exchange, key):
    args = _quorum(replicas)
    args.update({
        "x-dead-letter-exchange": exchange,
        "x-dead-letter-routing-key": key,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    })
    return args


def _dead_lettering(replicas, exchange, key, limit):
    args = _at_least_once(replicas, exchange, key)
    args["x-delivery-limit"] = limit
    return args


def _parking(replicas):
    args = _quorum(replicas)
    args["x-delivery-limit"] = DEAD_LETTER_DELIVERY_LIMIT
    return args


def work_queue_specs(names, q, tiers_ms, delivery_limit, replicas):
    """(queue, exchange, routing key, arguments) of work queue q and its retry tiers."""
    specs = [(names.work_queue(q), names.jobs_exchange, task_routing_key(q),
              _dead_lettering(replicas, names.dead_letter_exchange, ROUTING_KEY_TASK_FAILED, delivery_limit))]
    for ms in tiers_ms:
        tier = tier_name(ms)
        args = _at_least_once(replicas, names.jobs_exchange, task_routing_key(q))
        args["x-message-ttl"] = ms
        specs.append((names.retry_queue(q, tier), names.retry_exchange, retry_routing_key(q, tier), args))
    return specs


def topology_specs(names, tiers_ms, delivery_limit, replicas):
    """The queues of the topology every warren process declares (broker.DeclareTopology).

    Each is (queue, exchange, routing key, arguments, legacy arguments or
    None): a dead-letter queue for people that an earlier warren declared
    as a bare quorum queue is used as it is.
    """
    specs = [s + (None,) for s in work_queue_specs(names, DEFAULT_QUEUE, [], delivery_limit, replicas)]
    specs += [
        (names.results_queue, names.results_exchange, ROUTING_KEY_RESULT,
         _dead_lettering(replicas, names.dead_letter_exchange, ROUTING_KEY_RESULT_INVALID, delivery_limit), None),
        (names.dead_queue, names.dead_letter_exchange, ROUTING_KEY_TASK_FAILED,
         _dead_lettering(replicas, names.dead_letter_exchange, ROUTING_KEY_RESULT_INVALID, delivery_limit), None),
        (names.tasks_dlq, names.dead_letter_exchange, ROUTING_KEY_TASK_FAILED, _parking(replicas), _quorum(0)),
        (names.results_dlq, names.dead_letter_exchange, ROUTING_KEY_RESULT_INVALID, _parking(replicas), _quorum(0)),
        # The outcomes RPC's requests: through the default exchange (no binding), never dead-lettered.
        (names.outcomes_queue, "", "", _quorum(replicas), None),
    ]
    specs += [s + (None,) for s in work_queue_specs(names, DEFAULT_QUEUE, tiers_ms, delivery_limit, replicas)[1:]]
    return specs
