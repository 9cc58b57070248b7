"""warren_client: submit warren jobs, wait for them and read their results from Python.

A client of warren's HTTP API (v1) on the standard library alone::

    from warren_client import Client

    c = Client()                               # WARREN_SERVER, WARREN_TOKEN, as the warren command
    job = c.submit("square", ({"n": n} for n in range(1_000_000)), reduce="sum")
    done = c.wait(job.id, timeout=600)         # follows the job's events; polls when it must
    print(done.state, c.result(job.id))
"""

from ._errors import (BadRequest, Conflict, ConnectionFailed, Forbidden, NotFound, ServerError, TooLarge,
                      Unauthorized, Unavailable, ValidationFailed, WaitTimeout, WarrenError)
from ._records import CLOSED_STATES, Job, Task
from .client import DEFAULT_TIMEOUT, Client

__version__ = "0.1.0"

__all__ = [
    "Client", "Job", "Task", "CLOSED_STATES", "DEFAULT_TIMEOUT",
    "WarrenError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "TooLarge",
    "ValidationFailed", "ServerError", "Unavailable", "ConnectionFailed", "WaitTimeout",
    "__version__",
]
