"""A complete warren worker in Python: word counts, a thumbnail-like task,
and a reducer that runs a job's fan-in: the most frequent words.

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


@w.reducer("top_words")
def top_words(outcomes, job):
    """The fan-in of a wordcount job: {"n": 10} -> the n most frequent words.

    outcomes come in task id order, page by page, never all in memory; a
    failed task (within the job's tolerance) is counted, not merged. What
    this returns is the job's result.
    """
    n = 10
    if isinstance(job.payload, dict):
        n = int(job.payload.get("n", n))
    counts, failed = {}, 0
    for o in outcomes:
        if o.state != "completed":
            failed += 1
            continue
        for word, count in o.result.items():
            counts[word] = counts.get(word, 0) + count
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return {"top": [{"word": word, "count": count} for word, count in top], "failed_tasks": failed}


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)  # pika logs every connection step at INFO
    w.run()
