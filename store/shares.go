package store

import (
	"slices"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// Round is what one relay round may claim (Store.RelayRound): at most
// Messages task messages' worth of tasks (a job's tasks go out in messages
// of its batch size) and at most Tasks tasks in all.
type Round struct {
	Messages int
	Tasks    int
	// Bytes, when above 0, bounds the payload bytes the round holds: the
	// round claims a job's share in task id order, and the jobs in the
	// order Shares serves them (Served), only while the payloads claimed
	// so far are under Bytes (so at least one task, however large). The
	// tasks left out stay pending for a later round; as the turn moves,
	// each job is served first in turn, so a job whose share alone is
	// over Bytes does not hold the others back.
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
}

// PendingJob is an open job with tasks waiting in the outbox, as a relay
// round sees it.
type PendingJob struct {
	ID string
	// Priority is the job's weight, its warren.Policy.Priority (0 meaning
	// warren.DefaultPriority).
	Priority int
	// BatchSize is how many of its tasks one message carries: the job's
	// warren.Policy.BatchSize, 0 when warren chooses it. Shares sets it
	// to the size the round uses (Round.Batch), which the driver gives
	// the job's tasks (OutboxTask.BatchSize).
	BatchSize int
	// Pending is how many of its tasks are pending, counted up to a cap
	// (PendingCap): More says whether it has more.
	Pending int
	// More reports that the job has more pending tasks than Pending (its
	// count reached the cap).
	More bool
	// Queue is the job's work queue (warren.Policy.EffectiveQueue).
	Queue string
}

// Shares splits a relay round between jobs, the open jobs with pending
// tasks in creation order: it returns how many tasks to claim from each,
// in jobs' order. Each work queue's messages (Round.Room, else
// Round.Messages), and the round's tasks, are shared between its jobs in
// proportion to their priorities, each job given whole messages of its
// batch size (so a
// job's share is at least one message while the queue's messages last),
// never more than it has pending; what a job cannot use goes to the
// others, until the messages or the round's tasks run out. turn rotates
// which job, and which queue, is served first, so that when there are
// more jobs than messages, successive rounds serve them in turn (round
// robin). The relay calls it with a turn that grows by one each round.
//
// Shares sets the BatchSize of each job that has none to the one the
// round packs its tasks by (Round.Batch, 1 without it), and cuts its
// Pending to the most Round.Batch lets it take.
func Shares(r Round, jobs []PendingJob, turn int) []int {
	shares, _ := Served(r, jobs, turn)
	return shares
}

// Served is Shares, also returning the order it served the jobs in:
// order holds the indexes into jobs of the jobs given a share, first
// served first (the queues, and each queue's jobs, in turn from turn on).
// A relay round claims the jobs in that order, so that the first served
// are the first to spend the round's Bytes, and successive rounds let
// each job go first in turn.
func Served(r Round, jobs []PendingJob, turn int) (shares, order []int) {
	shares = make([]int, len(jobs))
	if len(jobs) == 0 || r.Tasks <= 0 {
		return shares, nil
	}

	tasks := r.Tasks
	if r.Room == nil {
		all := make([]int, len(jobs))
		for i := range all {
			all[i] = i
		}
		r.resolveBatches(jobs, all, r.Messages > 0)
		shareQueue(shares, jobs, all, r.Messages, &tasks, turn)
		return shares, servedOrder(shares, nil, all, turn)
	}
	var queues []string
	byQueue := map[string][]int{}
	for i, j := range jobs {
		if _, ok := byQueue[j.Queue]; !ok {
			queues = append(queues, j.Queue)
		}
		byQueue[j.Queue] = append(byQueue[j.Queue], i)
	}
	for k := range queues {
		q := queues[rotate(turn, k, len(queues))]
		room := r.Room(q)
		r.resolveBatches(jobs, byQueue[q], room > 0 && tasks > 0)
		shareQueue(shares, jobs, byQueue[q], room, &tasks, turn)
		order = servedOrder(shares, order, byQueue[q], turn)
	}
	return shares, order
}

// servedOrder appends to order the jobs idx (indexes into jobs, one work
// queue's) that have a share, in the order shareQueue serves them.
func servedOrder(shares, order, idx []int, turn int) []int {
	for k := range idx {
		if i := idx[rotate(turn, k, len(idx))]; shares[i] > 0 {
			order = append(order, i)
		}
	}
	return order
}

// resolveBatches sets the batch size of the jobs idx (indexes into jobs)
// that have none: Round.Batch's, within 1..warren.MaxBatchSize, cutting
// their Pending to the most it allows. Unless ask (their queue has room
// and the round has tasks left), they get 1 without Round.Batch being
// asked: they get no tasks, and asking may spend what a job may send
// while its durations are unknown (autobatch's probe).
func (r Round) resolveBatches(jobs []PendingJob, idx []int, ask bool) {
	for _, i := range idx {
		if jobs[i].BatchSize > 0 {
			continue
		}
		b := 1
		if r.Batch != nil && ask {
			size, most := r.Batch(jobs[i])
			b = min(max(size, 1), warren.MaxBatchSize)
			jobs[i].Pending = min(jobs[i].Pending, max(most, 0))
		}
		jobs[i].BatchSize = b
	}
}

// rotate is the index of the kth of n served, starting at turn.
func rotate(turn, k, n int) int {
	i := (turn + k) % n
	if i < 0 {
		i += n
	}
	return i
}

// shareQueue shares messages between the jobs of one work queue (indexes
// into jobs), adding to shares and taking from the round's tasks left.
func shareQueue(shares []int, jobs []PendingJob, idx []int, messages int, tasks *int, turn int) {
	n := len(idx)
	for messages > 0 && *tasks > 0 {
		var weight int64
		for _, i := range idx {
			if shares[i] < jobs[i].Pending {
				weight += weightOf(jobs[i])
			}
		}
		if weight == 0 {
			return
		}
		// Each pass hands out the messages and the tasks left at its
		// start in proportion to the weights of the jobs that can still
		// use some: whichever of the two runs out first (the tasks, when
		// batches are large), the shares keep the priorities.
		pool, tpool := int64(messages), int64(*tasks)
		given := false
		for k := 0; k < n && messages > 0 && *tasks > 0; k++ {
			i := idx[rotate(turn, k, n)]
			j := jobs[i]
			left := j.Pending - shares[i]
			if left <= 0 {
				continue
			}
			batch := max(j.BatchSize, 1)
			m := max(1, int(pool*weightOf(j)/weight))
			m = min(m, messages)
			tshare := max(batch, int(tpool*weightOf(j)/weight)/batch*batch)
			t := min(m*batch, tshare, left, *tasks)
			shares[i] += t
			*tasks -= t
			messages -= (t + batch - 1) / batch
			given = true
		}
		if !given {
			return
		}
	}
}

// MinPendingCap is the least PendingCap counts up to.
const MinPendingCap = 256

// PendingCap is how far a relay round counts each open job's pending
// tasks (PendingJob.Pending), for a round of tasks tasks among openJobs
// open jobs (as the previous round found them, say): far enough for any
// job's share, twice the round's tasks divided between the jobs and at
// least MinPendingCap, and no further than the round's tasks, so that a
// round among many jobs with long backlogs does not count them all far.
func PendingCap(tasks, openJobs int) int {
	return max(1, min(tasks, max(MinPendingCap, 2*tasks/max(openJobs, 1))))
}

// SortQueues returns the work queue names queues (as a driver reads them
// from its jobs, "" meaning the default queue) with the default queue
// named, each once, sorted.
func SortQueues(queues []string) []string {
	for i, q := range queues {
		queues[i] = protocol.QueueOrDefault(q)
	}
	slices.Sort(queues)
	return slices.Compact(queues)
}

// weightOf is job j's weight: its effective priority.
func weightOf(j PendingJob) int64 {
	return int64(warren.Policy{Priority: j.Priority}.EffectivePriority())
}
