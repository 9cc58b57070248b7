package engine

import (
	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// served splits a relay round between jobs, the open jobs with pending
// tasks in creation order: shares holds how many tasks to claim from
// each, in jobs' order, and order the indexes into jobs of the jobs
// given a share, first served first. Each work queue's messages
// (Round.Room, else Round.Messages), and the round's tasks, are shared
// between its jobs in proportion to their priorities, each job given
// whole messages of its batch size (so a job's share is at least one
// message while the queue's messages last), never more than it has
// pending; what a job cannot use goes to the others, until the messages
// or the round's tasks run out. turn rotates which job, and which queue,
// is served first, so that when there are more jobs than messages,
// successive rounds serve them in turn (round robin), and each job is
// first in turn to spend the round's Bytes. The relay calls it with a
// turn that grows by one each round.
//
// served sets the BatchSize of each job that has none to the one the
// round packs its tasks by (Round.Batch, 1 without it), and cuts its
// Pending to the most Round.Batch lets it take.
func served(r store.Round, jobs []store.PendingJob, turn int) (shares, order []int) {
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
		resolveBatches(r, jobs, all, r.Messages > 0)
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
		resolveBatches(r, jobs, byQueue[q], room > 0 && tasks > 0)
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
// that have none: r.Batch's, within 1..warren.MaxBatchSize, cutting
// their Pending to the most it allows. Unless ask (their queue has room
// and the round has tasks left), they get 1 without r.Batch being
// asked: they get no tasks, and asking may spend what a job may send
// while its durations are unknown (autobatch's probe).
func resolveBatches(r store.Round, jobs []store.PendingJob, idx []int, ask bool) {
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
func shareQueue(shares []int, jobs []store.PendingJob, idx []int, messages int, tasks *int, turn int) {
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

// minPendingCap is the least pendingCap counts up to.
const minPendingCap = 256

// pendingCap is how far a relay round counts each open job's pending
// tasks (store.PendingJob.Pending), for a round of tasks tasks among
// openJobs open jobs (as the previous round found them, say): far enough
// for any job's share, twice the round's tasks divided between the jobs
// and at least minPendingCap, and no further than the round's tasks, so
// that a round among many jobs with long backlogs does not count them
// all far.
func pendingCap(tasks, openJobs int) int {
	return max(1, min(tasks, max(minPendingCap, 2*tasks/max(openJobs, 1))))
}

// weightOf is job j's weight: its effective priority.
func weightOf(j store.PendingJob) int64 {
	return int64(warren.Policy{Priority: j.Priority}.EffectivePriority())
}
