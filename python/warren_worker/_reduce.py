"""The outcomes RPC of a reduce task: the map tasks' outcomes, a page at a time.

A reduce run reads its job's outcomes from the warren servers over
RabbitMQ (docs/protocol.md, "Reduce tasks"): it consumes the direct
reply-to pseudo-queue with automatic acks, publishes each request to
outcomes.q with reply_to and a correlation id, and waits for the reply.
pika's BlockingConnection is not thread-safe, and the worker's two
connections belong to its consumer and publisher threads, so each run
opens a connection of its own, on the handler thread that runs it, at
its first page, and closes it when the run ends.
"""

import time
import uuid

import pika

from . import _wire
from ._task import OutcomesError, Stale

# How often a wait for a reply looks at the session (ended) and the deadline.
_POLL = 0.1


class Outcomes:
    """The outcomes a reducer iterates over: lazily, a page per request.

    Each iteration starts from the first outcome. The first failure to
    read a page is kept in ``error`` (the run fails, or, Stale, is
    dropped, whatever the reducer returns) and raised from the iteration.
    """

    def __init__(self, params, names, job_id, generation, timeout, deadline=None, ended=lambda: False):
        self._params = params
        self._names = names
        self._job_id = job_id
        self._generation = generation
        self._timeout = timeout
        self._deadline = deadline
        self._ended = ended
        self._conn = None
        self._ch = None
        self._reply = None
        self._prefix = uuid.uuid4().hex[:16] + "-"
        self._seq = 0
        self.error = None
        self.requests = 0

    def __iter__(self):
        after = 0
        while True:
            page, nxt = self._page(after)
            for o in page:
                yield o
            if nxt is None:
                return
            after = nxt

    def _page(self, after):
        try:
            return self._request(after)
        except OutcomesError as e:
            if self.error is None:
                self.error = e
            raise
        except Exception as e:  # a connection that fails: a transient failure of the run
            err = OutcomesError("outcomes RPC: %s: %s" % (type(e).__name__, e))
            if self.error is None:
                self.error = err
            raise err from e

    def _open(self):
        if self._ch is not None:
            return
        self._conn = pika.BlockingConnection(self._params)
        self._ch = self._conn.channel()
        # Direct reply-to: consume before the first publish, with automatic acks.
        self._ch.basic_consume(_wire.DIRECT_REPLY_TO, self._on_reply, auto_ack=True)

    def _on_reply(self, _ch, _method, props, body):
        if props.correlation_id == self._want:
            self._reply = body

    def _request(self, after):
        self._open()
        self._seq += 1
        self._want = self._prefix + str(self._seq)
        self._reply = None
        out = _wire.outcomes_request(self._names, self._job_id, self._generation, after, self._want)
        self._ch.basic_publish(out.exchange, out.routing_key, out.body, out.properties)
        self.requests += 1
        give_up = time.monotonic() + self._timeout
        while self._reply is None:
            now = time.monotonic()
            if self._ended():
                raise OutcomesError("outcomes RPC: the worker's session ended")
            if self._deadline is not None and now >= self._deadline:
                raise OutcomesError("outcomes RPC: the task's time limit passed while waiting for a reply")
            if now >= give_up:
                raise OutcomesError("outcomes RPC: no reply within %gs (is a warren server running?)" % self._timeout)
            self._conn.process_data_events(time_limit=min(_POLL, give_up - now))
        try:
            kind, a, b = _wire.decode_outcomes_reply(self._reply, after)
        except _wire.Malformed as e:
            raise OutcomesError("outcomes RPC: a reply that is not one: %s" % e) from None
        if kind == "error":
            cls = Stale if a == _wire.OUTCOMES_STALE else OutcomesError
            raise cls("outcomes RPC: %s: %s" % (a, b), code=a)
        return a, b

    def close(self):
        """Close the run's connection, if it opened one."""
        conn, self._conn, self._ch = self._conn, None, None
        if conn is not None:
            try:
                if conn.is_open:
                    conn.close()
            except Exception:
                pass
