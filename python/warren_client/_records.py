"""Job and Task: the API's JSON objects with attribute access."""

__all__ = ["Job", "Task", "CLOSED_STATES"]

# The states of a closed job: it changes no more unless redriven.
CLOSED_STATES = frozenset(("completed", "failed", "cancelled"))


class _Record:
    """A JSON object of the API: ``r.field`` and ``r["field"]`` read its fields; ``r.raw`` is the dict."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        if not isinstance(raw, dict):
            raise TypeError("%s: want a JSON object, got %s" % (type(self).__name__, type(raw).__name__))
        self.raw = raw

    def __getattr__(self, name):
        # Only called when the normal lookup fails: raw and the methods come first.
        if name.startswith("__") or name == "raw":
            raise AttributeError(name)
        try:
            return self.raw[name]
        except KeyError:
            raise AttributeError("%s has no field %r (fields: %s)"
                                 % (type(self).__name__, name, ", ".join(sorted(self.raw)))) from None

    def __getitem__(self, key):
        return self.raw[key]

    def __contains__(self, key):
        return key in self.raw

    def get(self, key, default=None):
        return self.raw.get(key, default)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.raw))

    def __eq__(self, other):
        return type(other) is type(self) and other.raw == self.raw

    __hash__ = None


class Job(_Record):
    """A job as the API shows it (GET /v1/jobs/{id}): ``id``, ``type``, ``state``,
    ``expected_tasks``, ``completed_tasks``, ``failed_tasks``, ``pending_tasks``,
    ``error`` (why it failed or was cancelled, else None), ``errors`` (a sample
    of failed tasks), ``reduce``, ``metadata``, ``result_url``, the times and
    the policy fields; ``then``, ``next_job`` and ``previous_job`` place it
    in its chain of follow-up jobs (None when there is none); ``waiting``
    says why an open job makes no progress (``{"reason": "no_consumer",
    "queue": ..., "since": ...}``, else None). The Job that ``submit`` returns holds only the 202's
    fields: ``id``, ``state`` and ``status_url``.
    """

    __slots__ = ()

    @property
    def closed(self):
        """Whether the job is completed, failed or cancelled."""
        return self.raw.get("state") in CLOSED_STATES

    def __repr__(self):
        r = self.raw
        if "expected_tasks" in r:
            return "Job(id=%r, state=%r, completed_tasks=%r, failed_tasks=%r, expected_tasks=%r)" % (
                r.get("id"), r.get("state"), r.get("completed_tasks"), r.get("failed_tasks"), r.get("expected_tasks"))
        return "Job(id=%r, state=%r)" % (r.get("id"), r.get("state"))


class Task(_Record):
    """One task as the API lists it (GET /v1/jobs/{id}/tasks): ``task_id``, ``state``,
    ``attempts``, ``worker``, ``error``, ``queued_at``, ``started_at``,
    ``finished_at`` and ``result`` (its JSON value, None until it completed).
    """

    __slots__ = ()

    def __repr__(self):
        return "Task(task_id=%r, state=%r, attempts=%r)" % (
            self.raw.get("task_id"), self.raw.get("state"), self.raw.get("attempts"))
