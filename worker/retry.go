package worker

import (
	"time"

	"github.com/warrenhq/warren/protocol"
)

// failureAction is what becomes of a task whose run failed.
type failureAction int

const (
	// failTask publishes a failed result: the error is permanent.
	failTask failureAction = iota
	// retryTask runs the task again after a delay.
	retryTask
	// deadLetterTask dead-letters the task: its retries are spent.
	deadLetterTask
)

// decideFailure is the retry policy, in one place: a permanent error fails
// the task; a transient one retries it while attempt <= maxRetries (so a
// task runs at most 1+maxRetries times), then dead-letters it. A retry
// waits in a delay tier: the nth retry in tiers[n-1], every retry past the
// last tier in the last; the returned delay is that tier's.
func decideFailure(err error, attempt, maxRetries int, tiers []time.Duration) (failureAction, time.Duration) {
	switch {
	case IsPermanent(err):
		return failTask, 0
	case attempt <= maxRetries:
		// This run is attempt; the retry is the attempt-th.
		return retryTask, tiers[protocol.RetryTier(attempt, len(tiers))]
	default:
		return deadLetterTask, 0
	}
}

// retryMsg returns the message that schedules another run of task t of d
// after delay: a copy with x-retry incremented (x-max-retries and the
// other headers kept) for the retry exchange, routed to the tier of that
// delay, and the event that reports it. The tier's queue holds the copy
// for delay and the broker dead-letters it back to the work queue: the
// worker never holds a message to delay it.
func (s *session) retryMsg(d *delivery, t Task, batch bool, delay time.Duration, cause error) (outbound, Event) {
	msg := s.taskCopy(d, t, batch)
	msg.Headers[protocol.HeaderRetry] = int64(t.Attempt)
	// A per-message TTL shorter than the tier would cut the delay short;
	// the broker drops it when the tier dead-letters the copy anyway.
	msg.Expiration = ""
	ev := s.event(t)
	ev.Kind, ev.Err, ev.Delay = EventRetried, cause, delay
	return outbound{s.w.names.RetryExchange, protocol.RetryTierName(delay), msg}, ev
}
