"""warren_worker: run warren tasks in Python.

A pure-Python implementation of warren's worker protocol (docs/protocol.md)
on pika::

    from warren_worker import Worker, Permanent

    w = Worker(amqp_url="amqp://guest:guest@127.0.0.1:5672/", prefix="", concurrency=4)

    @w.handler("thumbnail")
    def thumbnail(payload, task):
        if "key" not in payload:
            raise Permanent("no key")        # failed now, with a dead letter
        return {"url": make_thumbnail(payload["key"], task.idempotency_key)}

    w.run()   # until SIGINT/SIGTERM, draining in-flight tasks
"""

from .worker import Event, Outcome, OutcomesError, Permanent, ReduceJob, Stale, Task, Worker

__version__ = "0.1.0"

__all__ = ["Worker", "Task", "Permanent", "Event", "ReduceJob", "Outcome", "OutcomesError", "Stale", "__version__"]
