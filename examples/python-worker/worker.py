"""A complete warren worker in Python: word counts, and a thumbnail-like task.

Run it against a `warren server` (see README.md here):

    python3 worker.py

It reads WARREN_AMQP_URL, WARREN_PREFIX, WARREN_RETRY_TIERS and
WARREN_QUEUES like `warren worker`, and stops on Ctrl-C or SIGTERM once
the tasks it runs are done.
"""

import logging
import os
import re
import sys
import time

try:
    from warren_worker import Permanent, Worker
except ImportError:  # run from a checkout without pip install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    from warren_worker import Permanent, Worker

WORD = re.compile(r"[^\W_]+")

w = Worker(concurrency=int(os.environ.get("CONCURRENCY", "4")))


@w.handler("wordcount")
def wordcount(payload, task):
    """{"text": "..."} -> {"word": count, ...}: the same as warren's built-in wordcount."""
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
        # Retrying cannot fix bad input: fail the task now, with a dead letter.
        raise Permanent('the payload must be {"text": "..."}')
    counts = {}
    for word in WORD.findall(payload["text"].lower()):
        counts[word] = counts.get(word, 0) + 1
    return counts


@w.handler("thumbnail")
def thumbnail(payload, task):
    """{"key": "cat.jpg", "width": 128} -> {"url": ...}: stands in for real image work.

    A real handler would fetch the image, resize it and store the result
    under a name derived from task.idempotency_key, so that a task that
    runs twice (after a crash) writes the same object twice, harmlessly.
    """
    key = payload.get("key") if isinstance(payload, dict) else None
    if not key:
        raise Permanent("no image key")
    if payload.get("flaky") and task.attempt == 1:
        # Any other exception is transient: the task is retried through the
        # retry tiers (1s, 5s, 30s, 2m, 10m) while the job's max_retries allow.
        raise ConnectionError("object store timed out")
    time.sleep(0.05)  # the work
    width = int(payload.get("width", 128))
    return {"url": "s3://thumbnails/%s/%d/%s" % (task.idempotency_key, width, key), "attempt": task.attempt}


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)  # pika logs every connection step at INFO
    w.run()
