package store

import "github.com/warrenhq/warren"

// Round is what one relay round may claim (Store.RelayRound): at most
// Messages task messages' worth of tasks (a job's tasks go out in messages
// of its batch size) and at most Tasks tasks in all.
type Round struct {
	Messages int
	Tasks    int
}

// PendingJob is an open job with tasks waiting in the outbox, as a relay
// round sees it.
type PendingJob struct {
	ID string
	// Priority is the job's weight, its warren.Policy.Priority (0 meaning
	// warren.DefaultPriority).
	Priority int
	// BatchSize is how many of its tasks one message carries (at least 1).
	BatchSize int
	// Pending is how many of its tasks are pending, counted up to the
	// round's Tasks: no job can be given more.
	Pending int
}

// Shares splits a relay round between jobs, the open jobs with pending
// tasks in creation order: it returns how many tasks to claim from each,
// in jobs' order. The round's messages are shared in proportion to the
// jobs' priorities, each job given whole messages of its batch size (so
// a job's share is at least one message while the round's messages last),
// never more than it has pending; what a job cannot use goes to the
// others, until the round's messages or tasks run out. turn rotates which
// job is served first, so that when there are more jobs than messages,
// successive rounds serve them in turn (round robin). The relay calls it
// with a turn that grows by one each round.
func Shares(r Round, jobs []PendingJob, turn int) []int {
	shares := make([]int, len(jobs))
	n := len(jobs)
	if n == 0 || r.Messages <= 0 || r.Tasks <= 0 {
		return shares
	}
	start := turn % n
	if start < 0 {
		start += n
	}
	messages, tasks := r.Messages, r.Tasks
	for messages > 0 && tasks > 0 {
		var weight int64
		for i, j := range jobs {
			if shares[i] < j.Pending {
				weight += weightOf(j)
			}
		}
		if weight == 0 {
			break
		}
		// Each pass hands out the messages left at its start in
		// proportion to the weights of the jobs that can still use some.
		pool := int64(messages)
		given := false
		for k := 0; k < n && messages > 0 && tasks > 0; k++ {
			i := (start + k) % n
			j := jobs[i]
			left := j.Pending - shares[i]
			if left <= 0 {
				continue
			}
			batch := max(j.BatchSize, 1)
			m := max(1, int(pool*weightOf(j)/weight))
			m = min(m, messages)
			t := min(m*batch, left, tasks)
			shares[i] += t
			tasks -= t
			messages -= (t + batch - 1) / batch
			given = true
		}
		if !given {
			break
		}
	}
	return shares
}

// weightOf is job j's weight: its effective priority.
func weightOf(j PendingJob) int64 {
	return int64(warren.Policy{Priority: j.Priority}.EffectivePriority())
}
