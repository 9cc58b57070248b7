"""A warren reduce worker on plain pika, written from docs/protocol.md alone.

It serves reduce tasks of type "sum" from the default work queue: it reads
the job's map task outcomes over the outcomes RPC, a page at a time, adds
up the completed results (times the reduce payload's "scale", default 1),
and publishes {"sum": ..., "failed": ...} as the job's result. It does not
use warren_worker; it shows what a worker in any language does.

    WARREN_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ WARREN_PREFIX= python3 pika_reducer.py [--once]

--once stops after the first reduce task.
"""

import json
import os
import sys
import time
import uuid

import pika
import pika.exceptions

URL = os.environ.get("WARREN_AMQP_URL") or "amqp://guest:guest@127.0.0.1:5672/"
PREFIX = os.environ.get("WARREN_PREFIX", "")
REDUCE_TYPE = "sum"
OUTCOMES_TIMEOUT = 60.0  # seconds to wait for each reply


class Stale(Exception):
    """The job no longer reduces at this generation: ack, publish nothing."""


class Permanent(Exception):
    """A failure no retry fixes: dead-letter with reason permanent."""


def outcomes(conn, job_id, generation):
    """The job's outcomes, in task id order, one request per page, as the caller iterates."""
    ch = conn.channel()
    replies = {}
    # Direct reply-to: consume the pseudo-queue with auto-ack before publishing.
    ch.basic_consume("amq.rabbitmq.reply-to", lambda c, m, p, b: replies.__setitem__(p.correlation_id, b), auto_ack=True)
    after = 0
    try:
        while True:
            cid = uuid.uuid4().hex
            ch.basic_publish("", PREFIX + "outcomes.q",
                             json.dumps({"job_id": job_id, "generation": generation, "after": after}).encode(),
                             pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id=cid,
                                                  content_type="application/json", expiration="60000", delivery_mode=1))
            deadline = time.monotonic() + OUTCOMES_TIMEOUT
            while cid not in replies:
                if time.monotonic() >= deadline:
                    raise RuntimeError("no reply from the outcomes RPC in %ss" % OUTCOMES_TIMEOUT)
                conn.process_data_events(time_limit=0.1)
            reply = json.loads(replies.pop(cid))
            if "error" in reply and reply["error"]:
                if reply["error"]["code"] == "stale":
                    raise Stale(reply["error"].get("message", ""))
                raise RuntimeError("outcomes RPC: %s: %s" % (reply["error"]["code"], reply["error"].get("message", "")))
            for o in reply["outcomes"]:
                yield o
            if reply.get("next") is None:
                return
            after = reply["next"]
    finally:
        ch.close()


def reduce_sum(outs, payload):
    scale = (payload or {}).get("scale", 1)
    if not isinstance(scale, int):
        raise Permanent("scale must be an integer")
    total = failed = 0
    for o in outs:
        if o["state"] == "completed":
            total += o["result"] * scale
        else:
            failed += 1
    return {"sum": total, "failed": failed}


def header_int(headers, key, default):
    v = (headers or {}).get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2147483647 else default


def copy_props(props, **headers):
    """The task message's properties, persistent, with headers added."""
    h = dict(props.headers or {})
    h.update(headers)
    return pika.BasicProperties(content_type=props.content_type, delivery_mode=2, message_id=props.message_id,
                                correlation_id=props.correlation_id, type=props.type, headers=h)


def handle(conn, props, body):
    """Settle one task message: return the message to publish (exchange, key, body, props), or None."""
    try:
        task = json.loads(body)
    except ValueError:
        task = None
    if not isinstance(task, dict) or not task.get("job_id"):
        return PREFIX + "dlx.x", "task.failed", body, copy_props(props, **failure("malformed", "not a task message"))
    if props.type != REDUCE_TYPE or not task.get("reduce"):
        return PREFIX + "dlx.x", "task.failed", body, copy_props(props, **failure("unknown_type", "this worker only reduces %r" % REDUCE_TYPE))
    job_id = task["job_id"]
    generation = header_int(props.headers, "x-generation", 0)
    retries = header_int(props.headers, "x-retry", 0)
    max_retries = header_int(props.headers, "x-max-retries", 3)
    try:
        result = reduce_sum(outcomes(conn, job_id, generation), task.get("payload"))
    except Stale:
        return None  # ack and publish nothing
    except Permanent as e:
        return PREFIX + "dlx.x", "task.failed", body, copy_props(props, **failure("permanent", str(e)))
    except Exception as e:  # transient: retry through the first tier, or dead-letter once retries are spent
        if retries < max_retries:
            # The nth retry waits in the nth tier; this example uses warren's first tier (1s) for each.
            return PREFIX + "retry.x", "1s", body, copy_props(props, **{"x-retry": retries + 1})
        return PREFIX + "dlx.x", "task.failed", body, copy_props(props, **failure("retries_exhausted", str(e)))
    res = {"job_id": job_id, "task_id": 0, "result": result, "attempt": retries + 1}
    rprops = pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id="%s:0" % job_id,
                                  correlation_id=job_id, headers={"x-generation": generation} if generation else {})
    return PREFIX + "results.x", "result", json.dumps(res).encode(), rprops


def failure(reason, error):
    return {"x-failure-reason": reason, "x-error": error[:4096], "x-worker": "pika-reducer",
            "x-failed-at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main():
    once = "--once" in sys.argv[1:]
    conn = pika.BlockingConnection(pika.URLParameters(URL))  # tasks and acks
    rpc = pika.BlockingConnection(pika.URLParameters(URL))  # the outcomes RPC
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    pub = conn.channel()
    pub.confirm_delivery()  # publish outcomes with confirms, ack the task only after
    try:
        for method, props, body in ch.consume(PREFIX + "tasks.q"):
            out = handle(rpc, props, body)
            if out is not None:
                exchange, key, obody, oprops = out
                try:
                    pub.basic_publish(exchange, key, obody, oprops, mandatory=True)
                except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
                    time.sleep(0.5)
                    ch.basic_nack(method.delivery_tag, requeue=True)
                    continue
            ch.basic_ack(method.delivery_tag)
            if once and props.type == REDUCE_TYPE:
                break
    finally:
        rpc.close()
        conn.close()


if __name__ == "__main__":
    main()
