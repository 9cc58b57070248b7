package protocol

import (
	"math"
	"strconv"
)

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

// HeaderInt reads a non-negative integer header (at most MaxInt32) of any
// AMQP integer type (clients in other languages pick different widths), an
// integral float, or a decimal string. ok is false when the header is
// absent or anything else. h is an amqp091 Table.
func HeaderInt(h map[string]any, key string) (n int, ok bool) {
	var v64 int64
	switch v := h[key].(type) {
	case int:
		v64 = int64(v)
	case int8:
		v64 = int64(v)
	case int16:
		v64 = int64(v)
	case int32:
		v64 = int64(v)
	case int64:
		v64 = v
	case uint8:
		v64 = int64(v)
	case uint16:
		v64 = int64(v)
	case uint32:
		v64 = int64(v)
	case uint64:
		if v > math.MaxInt32 {
			return 0, false
		}
		v64 = int64(v)
	case float32:
		return floatInt(float64(v))
	case float64:
		return floatInt(v)
	case string:
		p, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		v64 = p
	default:
		return 0, false
	}
	if v64 < 0 || v64 > math.MaxInt32 {
		return 0, false
	}
	return int(v64), true
}

func floatInt(f float64) (int, bool) {
	if f < 0 || f > math.MaxInt32 || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

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
