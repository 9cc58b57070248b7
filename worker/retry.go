package worker

import (
	"log/slog"

	"github.com/warrenhq/warren/protocol"
)

// failureAction is what becomes of a task whose run failed.
type failureAction int

const (
	// failTask publishes a failed result: the error is permanent.
	failTask failureAction = iota
	// retryTask runs the task again.
	retryTask
	// deadLetterTask dead-letters the task: its retries are spent.
	deadLetterTask
)

// decideFailure is the retry policy, in one place: a permanent error fails
// the task; a transient one retries it while attempt <= maxRetries (so a
// task runs at most 1+maxRetries times), then dead-letters it.
func decideFailure(err error, attempt, maxRetries int) failureAction {
	switch {
	case IsPermanent(err):
		return failTask
	case attempt <= maxRetries:
		return retryTask
	default:
		return deadLetterTask
	}
}

// retry schedules another run of the task: for now, at once, by
// republishing it to the work queue with x-retry incremented (x-max-retries
// and everything else kept), then acking the original.
func (s *session) retry(d *delivery, t Task, cause error, log *slog.Logger) {
	msg := s.copyOf(d, t)
	msg.Headers[protocol.HeaderRetry] = int64(t.Attempt)
	ev := s.event(t)
	ev.Kind, ev.Err = EventRetried, cause
	s.publishThenAck(d, s.w.names.JobsExchange, protocol.RoutingKeyTask, msg, ev, log)
}
