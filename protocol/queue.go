package protocol

import (
	"fmt"
	"strings"
)

// DefaultQueue is the work queue of a job that names none: Names.TasksQueue,
// bound with RoutingKeyTask.
const DefaultQueue = "default"

// HeaderQueue is the header that names a task message's work queue when
// it is not DefaultQueue. Retry and dead-letter copies keep it, so that a
// retry comes back to the queue it left and a replayed dead letter goes
// to it too. A message without it belongs to DefaultQueue.
const HeaderQueue = "x-queue"

// MaxQueueNameLength is the longest work queue name a job may give.
const MaxQueueNameLength = 64

// CheckQueueName returns an error saying why q cannot name a work queue:
// it must be 1 to MaxQueueNameLength lowercase letters, digits, '-' or '_'.
func CheckQueueName(q string) error {
	if q == "" || len(q) > MaxQueueNameLength {
		return fmt.Errorf("a queue name must be 1 to %d characters, got %d", MaxQueueNameLength, len(q))
	}
	for _, r := range q {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("a queue name may hold only lowercase letters, digits, '-' and '_', got %q", q)
		}
	}
	return nil
}

// QueueOrDefault returns q, or DefaultQueue when q is empty.
func QueueOrDefault(q string) string {
	if q == "" {
		return DefaultQueue
	}
	return q
}

// TaskRoutingKey returns the routing key that takes task messages from the
// jobs exchange to work queue q: RoutingKeyTask for DefaultQueue (or ""),
// "task.<q>" for any other.
func TaskRoutingKey(q string) string {
	if q == "" || q == DefaultQueue {
		return RoutingKeyTask
	}
	return RoutingKeyTask + "." + q
}

// RetryRoutingKey returns the routing key of the delay tier named tier
// (RetryTierName) of work queue q on the retry exchange: the tier's name
// for DefaultQueue, "<q>.<tier>" for any other, whose tier queues
// dead-letter back to q.
func RetryRoutingKey(q, tier string) string {
	if q == "" || q == DefaultQueue {
		return tier
	}
	return q + "." + tier
}

// WorkQueue returns the name of work queue q: TasksQueue for DefaultQueue
// (or ""), "<prefix>tasks.<q>.q" for any other.
func (n Names) WorkQueue(q string) string {
	if q == "" || q == DefaultQueue {
		return n.TasksQueue
	}
	return n.Prefix + "tasks." + q + ".q"
}

// QueueRetryQueue returns the name of the delay-tier queue named tier of
// work queue q: RetryQueue(tier) for DefaultQueue, "<prefix>retry.<q>.<tier>.q"
// for any other.
func (n Names) QueueRetryQueue(q, tier string) string {
	if q == "" || q == DefaultQueue {
		return n.RetryQueue(tier)
	}
	return n.Prefix + "retry." + q + "." + tier + ".q"
}

// ParseQueues splits a comma-separated list of work queue names, checking
// each; an empty list is DefaultQueue alone.
func ParseQueues(list string) ([]string, error) {
	var qs []string
	seen := map[string]bool{}
	for _, q := range strings.Split(list, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		if err := CheckQueueName(q); err != nil {
			return nil, err
		}
		if !seen[q] {
			seen[q] = true
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		return []string{DefaultQueue}, nil
	}
	return qs, nil
}
