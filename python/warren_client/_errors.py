"""The exceptions of warren_client: API answers, connection failures, timeouts."""

import json

__all__ = [
    "WarrenError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "TooLarge",
    "ValidationFailed", "ServerError", "Unavailable", "ConnectionFailed", "WaitTimeout",
]


class WarrenError(Exception):
    """Every error of warren_client.

    ``code`` is the API's error code (``"not_found"``, ``"validation_failed"``,
    ...; docs: the ``{"error": {"code", "message"}}`` body), or the client's
    own (``"connection_failed"``, ``"timeout"``, ``"http_error"`` for an
    answer that is not the API's, ``"bad_response"``); ``message`` is the
    server's message; ``status`` the HTTP status, None when no answer came.
    """

    def __init__(self, code, message, status=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def __str__(self):
        if self.status is None:
            return self.message
        return "%s (HTTP %d %s)" % (self.message, self.status, self.code)


class BadRequest(WarrenError):
    """400: malformed input (invalid_json, invalid_type, unknown_field, invalid_parameter)."""


class Unauthorized(WarrenError):
    """401: no bearer token, or one the server does not know."""


class Forbidden(WarrenError):
    """403: the token lacks the scope the operation needs."""


class NotFound(WarrenError):
    """404: no such job (or result, or route); also a job deleted while waited for."""


class Conflict(WarrenError):
    """409: not possible in the job's state (a result of an open job, cancelling a closed one, ...)."""


class TooLarge(WarrenError):
    """413: the body, or one task, is over the server's limit."""


class ValidationFailed(WarrenError):
    """422: well-formed but not a valid job (validation_failed, idempotency_key_reused)."""


class ServerError(WarrenError):
    """5xx: the server failed (internal); details are in its log."""


class Unavailable(ServerError):
    """503: the store or another dependency is down, or the server is shutting down; retry later."""


class ConnectionFailed(WarrenError, ConnectionError):
    """The server could not be reached, or the connection broke before its answer."""

    def __init__(self, message):
        super().__init__("connection_failed", message)


class WaitTimeout(WarrenError, TimeoutError):
    """Client.wait gave up: the job did not close in time. ``job`` is the job as last read, or None."""

    def __init__(self, message, job=None):
        super().__init__("timeout", message)
        self.job = job


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: TooLarge,
              422: ValidationFailed, 503: Unavailable}


def error_from_answer(status, reason, body):
    """The exception for an answer with an error status and its body (bytes)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else WarrenError)
    try:
        detail = json.loads(body)["error"]
        code, message = detail["code"], detail["message"]
        if not isinstance(code, str) or not code or not isinstance(message, str):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        # Not the API's own answer: a proxy's, say.
        text = body[:4096].decode("utf-8", "replace").strip()
        return cls("http_error", ("%d %s %s" % (status, reason or "", text)).strip(), status)
    return cls(code, message, status)
