package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

func job(id string, priority, batch, pending int) store.PendingJob {
	return store.PendingJob{ID: id, Priority: priority, BatchSize: batch, Pending: pending}
}

func TestServedSplitsARoundByPriority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		round store.Round
		jobs  []store.PendingJob
		turn  int
		want  []int
	}{
		{"a small job beside a big one gets all it has", store.Round{Messages: 100, Tasks: 500},
			[]store.PendingJob{job("big", 10, 1, 500), job("small", 10, 1, 5)}, 0, []int{95, 5}},
		{"equal priorities share equally", store.Round{Messages: 100, Tasks: 500},
			[]store.PendingJob{job("a", 10, 1, 500), job("b", 10, 1, 500)}, 0, []int{50, 50}},
		{"priority 30 gets three times priority 10", store.Round{Messages: 100, Tasks: 500},
			[]store.PendingJob{job("a", 10, 1, 500), job("b", 30, 1, 500)}, 0, []int{25, 75}},
		{"shares are whole messages of each job's batch size", store.Round{Messages: 10, Tasks: 500},
			[]store.PendingJob{job("batched", 10, 32, 500), job("single", 10, 1, 500)}, 0, []int{160, 5}},
		{"the task cap holds, shared equally", store.Round{Messages: 100, Tasks: 60},
			[]store.PendingJob{job("a", 10, 1, 500), job("b", 10, 1, 500)}, 0, []int{30, 30}},
		{"the task cap is shared by priority too", store.Round{Messages: 100, Tasks: 60},
			[]store.PendingJob{job("a", 10, 1, 500), job("b", 50, 1, 500)}, 1, []int{10, 50}},
		{"large batches: the tasks run out before the messages, by priority", store.Round{Messages: 60, Tasks: 256},
			[]store.PendingJob{job("low", 10, 10, 1500), job("high", 50, 10, 1500)}, 1, []int{40, 216}},
		{"more jobs than messages: the turn says who goes first", store.Round{Messages: 2, Tasks: 500},
			[]store.PendingJob{job("a", 10, 1, 9), job("b", 10, 1, 9), job("c", 10, 1, 9)}, 1, []int{0, 1, 1}},
		{"the turn wraps", store.Round{Messages: 2, Tasks: 500},
			[]store.PendingJob{job("a", 10, 1, 9), job("b", 10, 1, 9), job("c", 10, 1, 9)}, 5, []int{1, 0, 1}},
		{"nothing to share", store.Round{Messages: 0, Tasks: 500}, []store.PendingJob{job("a", 10, 1, 9)}, 0, []int{0}},
		{"no jobs", store.Round{Messages: 10, Tasks: 10}, nil, 0, []int{}},
	} {
		got := sharesOf(c.round, c.jobs, c.turn)
		require.Equal(t, c.want, got, c.name)
	}
}

// Whatever the jobs, no share is more than the job has pending, the round's
// tasks are never exceeded, its messages are not exceeded by more than
// one message per job, and every message the round allows is used while
// some job has tasks left.
func TestServedInvariants(t *testing.T) {
	t.Parallel()
	for seed := range 2000 {
		x := uint64(seed)*2654435761 + 1
		next := func(n int) int { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int(x % uint64(n)) }
		jobs := make([]store.PendingJob, next(6))
		pendingTotal := 0
		for i := range jobs {
			jobs[i] = job("j", 1+next(100), 1+next(40), next(300))
			pendingTotal += jobs[i].Pending
		}
		r := store.Round{Messages: next(200), Tasks: next(600)}
		shares := sharesOf(r, jobs, next(10))
		total, messages := 0, 0
		for i, s := range shares {
			require.LessOrEqual(t, s, jobs[i].Pending)
			total += s
			messages += (s + jobs[i].BatchSize - 1) / jobs[i].BatchSize
		}
		require.LessOrEqual(t, total, r.Tasks)
		require.LessOrEqual(t, messages, r.Messages+len(jobs))
		if messages < r.Messages && total < r.Tasks {
			require.Equal(t, min(pendingTotal, r.Tasks), total, "room left while tasks wait: %+v %+v %v", r, jobs, shares)
		}
	}
}

// With Room, each work queue has its own messages, shared between its own
// jobs; the round's tasks are shared by all.
func TestServedGivesEachQueueItsRoom(t *testing.T) {
	t.Parallel()
	jobs := []store.PendingJob{
		{ID: "a", Priority: 10, BatchSize: 1, Pending: 100, Queue: "default"},
		{ID: "gpu", Priority: 10, BatchSize: 1, Pending: 100, Queue: "gpu"},
		{ID: "b", Priority: 10, BatchSize: 1, Pending: 100, Queue: "default"},
	}
	room := map[string]int{"default": 10, "gpu": 3}
	var asked []string
	shares := sharesOf(store.Round{Tasks: 100, Room: func(q string) int { asked = append(asked, q); return room[q] }}, jobs, 0)
	require.Equal(t, []int{5, 3, 5}, shares)
	require.ElementsMatch(t, []string{"default", "gpu"}, asked, "once per queue")

	room["default"] = 0
	require.Equal(t, []int{0, 3, 0}, sharesOf(store.Round{Tasks: 100, Room: func(q string) int { return room[q] }}, jobs, 0),
		"a full queue holds back only its own jobs")
	require.Equal(t, 4, sum(sharesOf(store.Round{Tasks: 4, Room: func(q string) int { return 10 }}, jobs, 0)), "the round's tasks cap all queues")
}

// sharesOf is served's shares alone.
func sharesOf(r store.Round, jobs []store.PendingJob, turn int) []int {
	shares, _ := served(r, jobs, turn)
	return shares
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func TestServedAsksTheRoundForAutomaticBatchSizes(t *testing.T) {
	t.Parallel()
	jobs := []store.PendingJob{job("auto", 10, 0, 500), job("fixed", 10, 4, 500), job("huge", 10, 0, 5000), job("probe", 10, 0, 500)}
	var asked []string
	round := store.Round{Messages: 10, Tasks: 5000, Batch: func(j store.PendingJob) (int, int) {
		asked = append(asked, j.ID)
		if j.ID == "probe" {
			return 1, 2
		}
		return map[string]int{"auto": 20, "huge": 5000}[j.ID], j.Pending
	}}
	shares := sharesOf(round, jobs, 0)
	require.Equal(t, []string{"auto", "huge", "probe"}, asked, "only jobs without a batch size are asked about")
	require.Equal(t, []int{20, 4, 1000, 1}, []int{jobs[0].BatchSize, jobs[1].BatchSize, jobs[2].BatchSize, jobs[3].BatchSize},
		"served records the sizes, within 1..MaxBatchSize")
	require.Equal(t, 2, jobs[3].Pending, "cut to the most the job may take")
	// 10 messages by equal weights: 2 each in the first pass, in messages
	// of each job's size (the probe's 2 tasks in 2 messages), then one
	// each for the first two of the jobs that can use more.
	require.Equal(t, []int{60, 12, 2000, 2}, shares)

	without := []store.PendingJob{job("auto", 10, 0, 5)}
	require.Equal(t, []int{5}, sharesOf(store.Round{Messages: 10, Tasks: 10}, without, 0))
	require.Equal(t, 1, without[0].BatchSize, "without Round.Batch, one task per message")
}

func TestPendingCapCountsFarEnoughForAnyShare(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2000, pendingCap(2000, 1), "one job may take the whole round")
	require.Equal(t, 2000, pendingCap(2000, 0), "before the first round")
	require.Equal(t, 1000, pendingCap(2000, 4), "twice an equal share")
	require.Equal(t, minPendingCap, pendingCap(2000, 100), "many jobs: no less than the minimum")
	require.Equal(t, 10, pendingCap(10, 100), "never more than the round's tasks")
}

// A job whose queue has no room this round is not asked about: asking
// may spend its probe (autobatch) on tasks that do not go out.
func TestServedAsksNothingForAQueueWithoutRoom(t *testing.T) {
	t.Parallel()
	jobs := []store.PendingJob{job("full", 10, 0, 50), job("roomy", 10, 0, 50)}
	jobs[0].Queue, jobs[1].Queue = "full", "roomy"
	var asked []string
	round := store.Round{Messages: 10, Tasks: 100,
		Room: func(q string) int { return map[string]int{"roomy": 10}[q] },
		Batch: func(j store.PendingJob) (int, int) {
			asked = append(asked, j.ID)
			return 2, j.Pending
		}}
	require.Equal(t, []int{0, 20}, sharesOf(round, jobs, 0))
	require.Equal(t, []string{"roomy"}, asked)
	require.Equal(t, 1, jobs[0].BatchSize, "a size all the same, one task per message")
}

// served gives the order the jobs were served in: the queues, and each
// queue's jobs, from the turn on, only the jobs given a share.
func TestServedOrdersTheJobsInTurn(t *testing.T) {
	t.Parallel()
	jobs := func() []store.PendingJob {
		return []store.PendingJob{job("a", 10, 1, 9), job("b", 10, 1, 9), job("c", 10, 1, 0), job("d", 10, 1, 9)}
	}
	round := store.Round{Messages: 100, Tasks: 100}
	for turn, want := range [][]int{{0, 1, 3}, {1, 3, 0}, {3, 0, 1}, {3, 0, 1}, {0, 1, 3}} {
		shares, order := served(round, jobs(), turn)
		require.Equal(t, []int{9, 9, 0, 9}, shares)
		require.Equal(t, want, order, "turn %d", turn)
	}

	queued := []store.PendingJob{
		{ID: "a", Priority: 10, BatchSize: 1, Pending: 9, Queue: "default"},
		{ID: "gpu", Priority: 10, BatchSize: 1, Pending: 9, Queue: "gpu"},
		{ID: "b", Priority: 10, BatchSize: 1, Pending: 9, Queue: "default"},
	}
	room := store.Round{Tasks: 100, Room: func(string) int { return 10 }}
	_, order := served(room, queued, 0)
	require.Equal(t, []int{0, 2, 1}, order, "turn 0: the default queue's jobs, then gpu's")
	_, order = served(room, queued, 1)
	require.Equal(t, []int{1, 2, 0}, order, "turn 1: gpu first, then the default queue's from its second job")
	_, order = served(store.Round{Tasks: 0, Messages: 10}, queued, 0)
	require.Empty(t, order, "nothing served")
}
