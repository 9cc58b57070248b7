package worker

import (
	"time"

	"github.com/warrenhq/warren/protocol"
)

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
