package protocol

// HeaderGeneration is the generation of the task(s) a message carries:
// set by warren on every task message (an integer, 1 for a task's first
// publish, more once it was redriven, replayed or republished by the
// reconciler) and copied by workers onto the retries, dead letters and
// result messages of that delivery. Warren ignores an outcome whose
// generation is not its task's current one; a message without it is of an
// unknown generation, and is accepted.
const HeaderGeneration = "x-generation"

// HeaderTaskTimeout is the time limit of one run of the task(s) a
// message carries, in whole milliseconds (an integer): set by warren on
// every task message to the job's task_timeout, and kept on the retries,
// dead letters and split copies of that message, which copy its headers.
// A worker gives each handler call a deadline of its start plus this
// limit and treats a run that ends after it as a transient failure. It
// is optional: a message without it (from an older relay or another
// producer), or with a value that is not a positive integer, runs
// without a limit.
const HeaderTaskTimeout = "x-task-timeout"

// W3C trace context headers (https://www.w3.org/TR/trace-context/), under
// the names the W3C gives them for HTTP. Warren sets them on a task message
// when its job was submitted within a trace, and its Go worker sets them on
// its result messages; the retry, dead-letter and split copies of a task
// message carry them too. They are optional: a worker may ignore them, and
// a message without them, or with a value that is not valid trace
// context, is processed as any other, outside any trace.
const (
	// HeaderTraceParent is the W3C traceparent of the span that published
	// the message: "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
	HeaderTraceParent = "traceparent"
	// HeaderTraceState is the W3C tracestate that goes with
	// HeaderTraceParent: vendor-specific key=value pairs; absent when
	// empty.
	HeaderTraceState = "tracestate"
)

// Headers of a task that a worker received but serves no handler for
// (protocol version 2 of "What a worker does with a task", step 3): the
// worker puts the task back through a retry tier instead of
// dead-lettering it, so that a worker that serves its type can run it,
// and dead-letters it with ReasonUnknownType only once it has gone
// unserved for longer than its task timeout (HeaderTaskTimeout, else an
// hour). Neither counts as a retry: x-retry is kept as it was.
const (
	// HeaderUnserved is how many times workers put the task back for want
	// of a handler (an integer, 1 after the first).
	HeaderUnserved = "x-unserved"
	// HeaderFirstUnservedAt is when a worker first put the task back for
	// want of a handler (RFC 3339, UTC), kept on every later copy: the
	// clear end is measured from it.
	HeaderFirstUnservedAt = "x-first-unserved-at"
	// HeaderHeld is how many times workers put the task back because its
	// job or its work queue was paused (ControlPause), absent until then:
	// the nth hold waits the nth retry tier, none past the second. It is
	// no run, and counts toward no limit.
	HeaderHeld = "x-held"
)
