"""Reading server-sent events (text/event-stream), as the HTML standard parses them."""

__all__ = ["Event", "EventReader", "MAX_EVENT_BYTES"]

# The most one event (its lines together) may take: a job's JSON is far
# smaller; a stream over it is not warren's, and is given up on.
MAX_EVENT_BYTES = 32 << 20


class Event:
    """One dispatched event: its name ("message" when the stream names none), its data and the last id seen."""

    __slots__ = ("event", "data", "id")

    def __init__(self, event, data, id):
        self.event, self.data, self.id = event, data, id

    def __repr__(self):
        return "Event(event=%r, id=%r, data=%r)" % (self.event, self.id, self.data[:80])


class EventReader:
    """Events from readline, a function returning the stream's next line as bytes (b"" at its end).

    Lines end with CRLF, LF or CR; a line starting with ':' is a comment;
    "field: value" sets event, data (lines joined with LF), id (ignored when
    it holds NUL) or retry (ignored); a blank line dispatches the event when
    it has data; a last event without its blank line is dropped, as the
    standard says. A byte order mark at the start is skipped.
    """

    def __init__(self, readline, max_event_bytes=MAX_EVENT_BYTES):
        self._readline = readline
        self._max = max_event_bytes
        self._started = False
        self._pending = []  # lines already split off the last read (a lone CR separates them)
        self.last_id = ""

    def _line(self):
        """The next line without its terminator, or None at the end of the stream."""
        while not self._pending:
            raw = self._readline(self._max + 1)
            if not raw:
                return None
            if len(raw) > self._max:
                raise ValueError("an event stream line is over %d bytes" % self._max)
            text = raw.decode("utf-8", "replace")
            if not self._started:
                self._started = True
                text = text[1:] if text.startswith("\ufeff") else text
            if text.endswith("\n"):
                text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
            self._pending = text.split("\r")
        return self._pending.pop(0)

    def next(self):
        """The next event with data, or None once the stream ended."""
        name, data, has, size = "", [], False, 0
        while True:
            line = self._line()
            if line is None:
                return None
            if line == "":
                if has:
                    return Event(name or "message", "\n".join(data), self.last_id)
                name, data, size = "", [], 0
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "event":
                name = value
            elif field == "data":
                size += len(value) + 1
                if size > self._max:
                    raise ValueError("an event is over %d bytes" % self._max)
                data.append(value)
                has = True
            elif field == "id" and "\0" not in value:
                self.last_id = value
