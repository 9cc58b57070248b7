package worker

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
	"unicode/utf8"

	"github.com/warrenhq/warren/protocol"
)

// tracer is an error that knows where it came from: the server keeps its
// Traceback with the failed attempt (protocol.Result.Traceback,
// protocol.HeaderTraceback), beside its message. A handler may return an
// error with a Traceback() string method of its own (found with
// errors.As); a panic becomes one (panicked).
type tracer interface {
	error
	Traceback() string
}

// traced is an error with the stack it was raised at.
type traced struct {
	err   error
	stack string
}

func (e traced) Error() string     { return e.err.Error() }
func (e traced) Unwrap() error     { return e.err }
func (e traced) Traceback() string { return e.stack }

// panicked returns err, a panic's error, with the stack of the goroutine
// that panicked (debug.Stack, called from within the recovering defer),
// innermost frames first, its first protocol.MaxTracebackBytes kept
// (cut at a character's boundary): unlike a Python traceback, a Go stack
// has the panic's site at its top, so its end is what goes.
func panicked(err error, p any) error {
	stack := fmt.Sprintf("panic: %v\n\n%s", p, fromPanic(debug.Stack()))
	if n := protocol.MaxTracebackBytes; len(stack) > n {
		for n > 0 && !utf8.RuneStart(stack[n]) {
			n--
		}
		stack = stack[:n]
	}
	return traced{err: err, stack: stack}
}

// fromPanic is stack (debug.Stack's) without the frames of its own
// taking and of the recovering defer: its goroutine line, then the frames
// from the runtime's panic on, where the handler's own come next.
func fromPanic(stack []byte) []byte {
	header, frames, ok := bytes.Cut(stack, []byte("\n"))
	if !ok {
		return stack
	}
	if i := bytes.Index(frames, []byte("\npanic(")); i >= 0 {
		return append(append(header, '\n'), frames[i+1:]...)
	}
	return stack
}

// tracebackOf returns the traceback err carries (tracer), or "".
func tracebackOf(err error) string {
	var t tracer
	if errors.As(err, &t) {
		return t.Traceback()
	}
	return ""
}
