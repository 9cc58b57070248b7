// Package retry is warren's retry decision, in one place: what becomes of
// a task whose run failed. The worker applies it to every failed run, and
// worker/workertest applies the same decision without a broker.
package retry

import (
	"time"

	"github.com/warrenhq/warren/protocol"
)

// Action is what becomes of a task whose run failed.
type Action int

const (
	// Fail publishes a failed result: the error is permanent.
	Fail Action = iota
	// Retry runs the task again after a delay, through a delay tier.
	Retry
	// DeadLetter dead-letters the task: its retries are spent.
	DeadLetter
)

// String names the action.
func (a Action) String() string {
	switch a {
	case Fail:
		return "fail"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return "unknown"
}

// Decide is the retry policy: a permanent error fails the task; a
// transient one retries it while attempt <= maxRetries (so a task runs at
// most 1+maxRetries times), then dead-letters it. A retry waits in a delay
// tier: the nth retry in tiers[n-1], every retry past the last tier in the
// last; the returned delay is that tier's. tiers must not be empty.
func Decide(permanent bool, attempt, maxRetries int, tiers []time.Duration) (Action, time.Duration) {
	switch {
	case permanent:
		return Fail, 0
	case attempt <= maxRetries:
		// This run is attempt; the retry is the attempt-th.
		return Retry, tiers[protocol.RetryTier(attempt, len(tiers))]
	default:
		return DeadLetter, 0
	}
}
