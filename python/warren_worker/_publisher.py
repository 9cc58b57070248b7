"""The publisher connection: outcomes with publisher confirms, and heartbeats."""

import collections
import threading
import time

import pika
import pika.exceptions

from . import _wire

# How often an I/O loop looks at its stop flag when nothing happens.
POLL = 0.2


def _user_of(conn):
    """The user name conn authenticated with (PLAIN), or None (EXTERNAL)."""
    params = getattr(getattr(conn, "_impl", None), "params", None)
    return getattr(getattr(params, "credentials", None), "username", None)


class _Publisher:
    """The publisher connection, owned by its own thread."""

    def __init__(self, worker, params):
        self.w = worker
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.hb = None
        # The heartbeats' user_id, which RabbitMQ checks against the
        # connection's user: servers then know who published a heartbeat.
        # None for a connection that authenticated without a user name.
        self.user_id = _user_of(self.conn)
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
                self.ch.basic_publish(o.exchange, o.routing_key, o.body, o.properties, mandatory=not o.optional)
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
                expiration=str(3 * interval_ms), timestamp=int(time.time()), user_id=self.user_id))
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
                self.conn.process_data_events(time_limit=POLL)
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
