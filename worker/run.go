package worker

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/outcome"
)

// taskRun is one task's run: what its handler returned, and when.
type taskRun struct {
	task              Task
	value             any
	err               error
	started, finished time.Time
	// elapsed is how long the handler ran, on the monotonic clock its
	// deadline is set on (started and finished are wall clock, in UTC).
	elapsed time.Duration
}

// run runs the tasks through h, one after another for a HandlerFunc, in
// one call for a BatchHandlerFunc; each call's context has the deadline
// of its task timeout (a batch's tasks share one, for the one call). ok
// is false when shutdown cancelled the handlers' context meanwhile.
func (s *session) run(ctx context.Context, h handlerSet, tasks []Task) ([]taskRun, bool) {
	runs := make([]taskRun, len(tasks))
	if h.batch != nil {
		start := time.Now()
		outcomes := s.callBatch(ctx, h.batch, tasks, start)
		end := time.Now()
		for i, t := range tasks {
			runs[i] = taskRun{task: t, value: outcomes[i].Value, err: outcomes[i].Err,
				started: start.UTC(), finished: end.UTC(), elapsed: end.Sub(start)}
		}
		return runs, s.handlers.Err() == nil
	}
	for i, t := range tasks {
		start := time.Now()
		value, err := s.call(ctx, h.one, t, start)
		end := time.Now()
		runs[i] = taskRun{task: t, value: value, err: err, started: start.UTC(), finished: end.UTC(), elapsed: end.Sub(start)}
		if s.handlers.Err() != nil {
			return nil, false
		}
	}
	return runs, true
}

// call runs h, started at start, with a context derived from base with
// the task's deadline, turning a panic into a transient error.
func (s *session) call(base context.Context, h HandlerFunc, t Task, start time.Time) (v any, err error) {
	ctx, cancel := outcome.Context(base, start, t.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = panicked(outcome.HandlerPanicked(p), p)
			s.taskLog(t).Error("worker: handler panicked", "panic", fmt.Sprint(p), "stack", shortStack())
		}
	}()
	return h(ctx, t)
}

// callBatch runs h over tasks, started at start, with one deadline for
// the call: the tasks' shared timeout. A panic or an outcome count other
// than len(tasks) becomes a transient error for every task.
func (s *session) callBatch(base context.Context, h BatchHandlerFunc, tasks []Task, start time.Time) (outcomes []Outcome) {
	ctx, cancel := outcome.Context(base, start, tasks[0].Timeout)
	defer cancel()
	fail := func(err error) []Outcome {
		out := make([]Outcome, len(tasks))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer func() {
		if p := recover(); p != nil {
			s.taskLog(tasks[0]).Error("worker: batch handler panicked", "tasks", len(tasks), "panic", fmt.Sprint(p), "stack", shortStack())
			outcomes = fail(panicked(outcome.BatchHandlerPanicked(p), p))
		}
	}()
	outcomes = h(ctx, tasks)
	if len(outcomes) != len(tasks) {
		return fail(outcome.WrongOutcomeCount(len(outcomes), len(tasks)))
	}
	return outcomes
}

// shortStack formats the panicking goroutine's innermost frames, without
// the runtime's and this package's recovery frames.
func shortStack() string {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	var b strings.Builder
	kept := 0
	for kept < 8 {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
			kept++
		}
		if !more {
			break
		}
	}
	return b.String()
}
