package store

// Round is what one relay round may claim (Store.RelayRound): at most
// Messages task messages' worth of tasks (a job's tasks go out in messages
// of its batch size) and at most Tasks tasks in all.
type Round struct {
	Messages int
	Tasks    int
	// Bytes, when above 0, bounds the payload bytes the round holds: the
	// round claims a job's share in task id order, and the jobs in the
	// order it served them (the queues, and each queue's jobs, in turn),
	// only while the payloads claimed so far are under Bytes (so at least
	// one task, however large). The tasks left out stay pending for a
	// later round; as successive rounds serve each job first in turn, a
	// job whose share alone is over Bytes does not hold the others back.
	Bytes int64
	// Room, when set, returns the messages the round may send to work
	// queue q, in place of Messages: the relay's free window in that
	// queue. It is called once per queue that has jobs waiting.
	Room func(q string) int
	// Batch, when set, returns the batch size of a job that leaves it to
	// warren (PendingJob.BatchSize 0, warren.Policy.AutoBatch): how many
	// of its tasks this round packs into one message (1..
	// warren.MaxBatchSize), and the most of its tasks the round may take
	// (0 holds the job back this round). It is called once per such job
	// whose queue has room (after Room was called for it) while the
	// round has tasks left; j.More says whether the
	// job has more than j.Pending. nil means one task per message for
	// them, and no limit.
	Batch func(j PendingJob) (size, most int)
	// Held, when set, is called with the id of each job whose
	// concurrency cap (warren.Policy.MaxConcurrency) held some of its
	// pending tasks back this round: a recorded outcome of that job frees
	// room, and the relay may look again then rather than at its next
	// poll.
	Held func(jobID string)
}

// PendingJob is an open job with tasks waiting in the outbox, as a relay
// round sees it.
type PendingJob struct {
	ID string
	// Priority is the job's weight, its warren.Policy.Priority (0 meaning
	// warren.DefaultPriority).
	Priority int
	// BatchSize is how many of its tasks one message carries: the job's
	// warren.Policy.BatchSize, 0 when warren chooses it (the round then
	// asks Round.Batch, and gives the job's tasks the size it chose:
	// OutboxTask.BatchSize).
	BatchSize int
	// Pending is how many of its tasks are pending, counted up to a cap
	// far enough for any job's share of the round: More says whether it
	// has more.
	Pending int
	// More reports that the job has more pending tasks than Pending (its
	// count reached the cap).
	More bool
	// Queue is the job's work queue (warren.Policy.EffectiveQueue).
	Queue string
}
