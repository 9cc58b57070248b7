package protocol

// Routing keys.
const (
	// RoutingKeyTask routes task messages from the jobs exchange to the
	// work queue.
	RoutingKeyTask = "task"
	// RoutingKeyResult routes result messages to the results queue.
	RoutingKeyResult = "result"
	// RoutingKeyTaskFailed routes dead-lettered tasks to the dead-letter
	// queues.
	RoutingKeyTaskFailed = "task.failed"
	// RoutingKeyResultInvalid routes results that can never be applied
	// (malformed, or for a job the store does not know) to the results
	// dead-letter queue.
	RoutingKeyResultInvalid = "result.invalid"
	// RoutingKeyAttempt routes attempt messages (a retried run's failure:
	// a Result of StatusRetried) from the results exchange to the results
	// queue. Only a server that records attempts binds it
	// (broker.BindAttempts), so that until one does, the broker drops
	// them unrouted and no older server ever reads one.
	RoutingKeyAttempt = "attempt"
)

// Names are the exchange and queue names of one warren installation: the
// defaults with a prefix prepended to each.
type Names struct {
	// Prefix is prepended to every name below.
	Prefix string
	// JobsExchange is the direct exchange tasks are published to.
	JobsExchange string
	// TasksQueue is the work queue, bound to JobsExchange with RoutingKeyTask.
	TasksQueue string
	// ResultsExchange is the direct exchange results are published to.
	ResultsExchange string
	// ResultsQueue holds results for the aggregator.
	ResultsQueue string
	// DeadLetterExchange receives dead-lettered tasks and results.
	DeadLetterExchange string
	// TasksDLQ is the parking lot of failed tasks, for people.
	TasksDLQ string
	// DeadQueue is the aggregator's copy of every dead-lettered task.
	DeadQueue string
	// ResultsDLQ parks results that can never be applied.
	ResultsDLQ string
	// RetryExchange is the direct exchange of the retry delay tiers; the
	// routing key of a tier is its name (see RetryTierName).
	RetryExchange string
	// ControlExchange is the fanout exchange of control messages to every
	// worker (cancellations).
	ControlExchange string
	// HeartbeatExchange is the fanout exchange workers publish their
	// heartbeats to (Heartbeat); every server binds a queue of its own.
	HeartbeatExchange string
	// OutcomesQueue is the queue of the outcomes RPC: workers running a
	// reduce task publish OutcomesRequests to it through the default
	// exchange (it is the routing key), and every server consumes it.
	OutcomesQueue string
}

// RetryQueue returns the name of the delay-tier queue for a tier.
func (n Names) RetryQueue(tier string) string { return n.Prefix + "retry." + tier + ".q" }

// NamesFor returns the names with prefix prepended to each.
func NamesFor(prefix string) Names {
	return Names{
		Prefix:             prefix,
		JobsExchange:       prefix + "jobs.x",
		TasksQueue:         prefix + "tasks.q",
		ResultsExchange:    prefix + "results.x",
		ResultsQueue:       prefix + "results.q",
		DeadLetterExchange: prefix + "dlx.x",
		TasksDLQ:           prefix + "tasks.dlq",
		DeadQueue:          prefix + "dead.q",
		ResultsDLQ:         prefix + "results.dlq",
		RetryExchange:      prefix + "retry.x",
		ControlExchange:    prefix + "control.x",
		HeartbeatExchange:  prefix + "heartbeat.x",
		OutcomesQueue:      prefix + "outcomes.q",
	}
}
