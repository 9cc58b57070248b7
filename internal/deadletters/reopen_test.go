package deadletters_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// A replay the broker surely refuses leaves the store as it was
// (docs/failures.md): the closed job stays closed with its state, error,
// finish time, counters and result, and the tasks its close cancelled stay
// cancelled, so nothing of it runs and it does not close a second time
// (a second webhook, its retention counted again). A later replay the
// broker takes reopens it, at a generation never used before.
func TestRefusedReplayLeavesTheStoreAsItWas(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, opts *options) {
		for name, closeJob := range map[string]func(b *testBundle, t *testing.T) (string, int64){
			"failed fast":             (*testBundle).failedFastJob,
			"completed with a result": (*testBundle).completedJobWithAFailure,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, opts)
				id, taskID := closeJob(b, t)
				b.dead(t, id, taskID, 1)
				before := b.snapshot(t, id)
				b.unbindTasksQueue(t)

				rep, err := b.queue.Replay(context.Background(), deadletters.Filter{})
				require.ErrorIs(t, err, broker.ErrUnroutable)
				require.Equal(t, deadletters.Report{}, rep)
				require.Equal(t, 1, b.depth(t, b.names.TasksDLQ), "the dead letter stays")
				require.Equal(t, before, b.snapshot(t, id), "the store is as it was")
				require.Empty(t, b.relay(t), "nothing of the closed job is published")
				toClose, err := b.store.JobsToClose(context.Background(), 10)
				require.NoError(t, err)
				require.Empty(t, toClose, "the job is closed, not waiting to close again")

				b.bindTasksQueue(t)
				rep, err = b.queue.Replay(context.Background(), deadletters.Filter{})
				require.NoError(t, err)
				require.Equal(t, deadletters.Report{Replayed: 1}, rep)
				job, err := b.store.GetJob(context.Background(), id)
				require.NoError(t, err)
				require.Equal(t, warren.JobRunning, job.State)
				msgs := b.getAll(t, b.names.TasksQueue)
				require.Len(t, msgs, 1)
				require.EqualValues(t, 3, msgs[0].Headers[protocol.HeaderGeneration],
					"the refused replay's generation 2 is never used again")
			})
		}
	})
}

// A replay resets the task's retries (docs/failures.md): its message
// carries x-retry 0, and the store counts its attempts from 0 again too,
// so a replayed run that is lost is retried as any first run would be,
// not failed as lost at once because of the runs before the replay.
func TestReplayResetsTheAttempts(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, opts *options) {
		b := setup(t, opts)
		id := b.failedJob(t, 1, 1) // 4 attempts: max_retries 3 is spent
		b.dead(t, id, 1, 1)

		rep, err := b.queue.Replay(context.Background(), deadletters.Filter{})
		require.NoError(t, err)
		require.Equal(t, deadletters.Report{Replayed: 1}, rep)
		lost := b.getAll(t, b.names.TasksQueue)
		require.Len(t, lost, 1)
		require.EqualValues(t, 0, lost[0].Headers[protocol.HeaderRetry])
		require.Zero(t, b.task(t, id, 1).Attempts, "the store agrees with the replayed message's x-retry 0")

		report, err := b.store.ReconcileStale(context.Background(), store.Staleness{Now: time.Now().Add(2 * time.Hour)}, 10)
		require.NoError(t, err)
		require.Equal(t, store.ReconcileReport{Requeued: 1}, report, "the lost replayed run is retried, not failed as lost")
		offered := b.relay(t)
		require.Len(t, offered, 1)
		require.Equal(t, 1, offered[0].Attempts, "republished with x-retry 1: its second run since the replay")
	})
}

// failedFastJob closes a fail-fast job of 4 tasks whose task 1 failed
// while task 2 was queued and tasks 3 and 4 were not published yet: the
// close cancels tasks 2 to 4. It returns the job and its failed task.
func (b *testBundle) failedFastJob(t *testing.T) (string, int64) {
	t.Helper()
	ctx := context.Background()
	job, _, err := b.store.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect", MaxRetries: 3, FailFast: true}}, payloads(4))
	require.NoError(t, err)
	_, err = b.store.RelayBatch(ctx, 2, confirmAll)
	require.NoError(t, err)
	report, err := b.store.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskFailed,
		Error: "retries_exhausted: boom", Attempts: 4, Worker: "w1"}})
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, report.ReadyToClose)
	b.finish(t, job.ID, warren.JobFailed, nil, "failed fast")
	require.Equal(t, warren.TaskCancelled, b.taskState(t, job.ID, 4))
	return job.ID, 1
}

// completedJobWithAFailure closes a job of 2 tasks that tolerates one
// failure as completed, with a reduced result, after its task 2 failed.
// It returns the job and its failed task.
func (b *testBundle) completedJobWithAFailure(t *testing.T) (string, int64) {
	t.Helper()
	ctx := context.Background()
	job, _, err := b.store.CreateJob(ctx, store.NewJob{Type: "echo",
		Policy: warren.Policy{Reduce: "collect", MaxRetries: 3, ToleratedFailures: 1, ToleratedFailurePercent: 50}}, payloads(2))
	require.NoError(t, err)
	_, err = b.store.RelayBatch(ctx, 10, confirmAll)
	require.NoError(t, err)
	started := time.Now().Add(-time.Minute).UTC()
	report, err := b.store.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: []byte(`1`), Attempts: 1, Worker: "w1"},
		{JobID: job.ID, TaskID: 2, State: warren.TaskFailed, Error: "retries_exhausted: boom", Attempts: 4, Worker: "w2", StartedAt: &started},
	})
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, report.ReadyToClose)
	b.finish(t, job.ID, warren.JobCompleted, []byte(`[1,null]`), "")
	return job.ID, 2
}

// finish closes job id as FinishJob does, which must close it.
func (b *testBundle) finish(t *testing.T, id string, state warren.JobState, result []byte, errMsg string) {
	t.Helper()
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	ok, err := b.store.FinishJob(context.Background(), id, job.Version, state, result, errMsg)
	require.NoError(t, err)
	require.True(t, ok)
}

// confirmAll is a relay publish func whose broker confirms every task.
func confirmAll(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	refs := make([]store.TaskRef, len(tasks))
	for i, task := range tasks {
		refs[i] = task.Ref()
	}
	return refs, nil
}

// relay runs one relay batch whose broker confirms everything, and
// returns the tasks it offered.
func (b *testBundle) relay(t *testing.T) []store.OutboxTask {
	t.Helper()
	var offered []store.OutboxTask
	_, err := b.store.RelayBatch(context.Background(), 1000, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		offered = append(offered, tasks...)
		return confirmAll(ctx, tasks)
	})
	require.NoError(t, err)
	return offered
}

// snapshot is what the store shows of a job: the job (but its version,
// which counts changes), its tasks, and its result.
type snapshot struct {
	Job    warren.Job
	Tasks  []warren.TaskRecord
	Result string
}

func (b *testBundle) snapshot(t *testing.T, id string) snapshot {
	t.Helper()
	ctx := context.Background()
	job, err := b.store.GetJob(ctx, id)
	require.NoError(t, err)
	job.Version = 0
	tasks, _, err := b.store.ListTasks(ctx, id, store.ListTasksOpts{Limit: 1000})
	require.NoError(t, err)
	// A refused replay's undo keeps the generations its reopen gave: a
	// generation is never given twice (store.Store.UndoReopen).
	for i := range tasks {
		tasks[i].Generation = 0
	}
	s := snapshot{Job: job, Tasks: tasks}
	if result, err := b.store.JobResult(ctx, id); err == nil {
		s.Result = string(result)
	} else {
		require.ErrorIs(t, err, warren.ErrNotFound)
	}
	return s
}

// task returns task taskID of job jobID.
func (b *testBundle) task(t *testing.T, jobID string, taskID int64) warren.TaskRecord {
	t.Helper()
	tasks, _, err := b.store.ListTasks(context.Background(), jobID, store.ListTasksOpts{Limit: 1000})
	require.NoError(t, err)
	for _, task := range tasks {
		if task.TaskID == taskID {
			return task
		}
	}
	t.Fatalf("job %s has no task %d", jobID, taskID)
	return warren.TaskRecord{}
}

// unbindTasksQueue makes the work queue unreachable: a task published to
// it is returned as unroutable, surely not taken.
func (b *testBundle) unbindTasksQueue(t *testing.T) {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.QueueUnbind(b.names.TasksQueue, protocol.RoutingKeyTask, b.names.JobsExchange, nil))
}

// bindTasksQueue undoes unbindTasksQueue.
func (b *testBundle) bindTasksQueue(t *testing.T) {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.QueueBind(b.names.TasksQueue, protocol.RoutingKeyTask, b.names.JobsExchange, false, nil))
}

// movingStore records a completed outcome of task 2 of the job right after
// each reopen, as another server's aggregator could while a replay waits
// for its confirm.
type movingStore struct{ store.Store }

func (s movingStore) ReopenTasks(ctx context.Context, jobID string, taskIDs []int64) (store.Reopening, error) {
	r, err := s.Store.ReopenTasks(ctx, jobID, taskIDs)
	if err == nil {
		_, err = s.ApplyOutcomes(ctx, []store.Outcome{{JobID: jobID, TaskID: 2, State: warren.TaskCompleted, Result: []byte(`2`)}})
	}
	return r, err
}

// When the job moved between the reopen and the broker's refusal, the
// reopen cannot be undone without losing what moved it: the replayed
// task is failed again, as its dead letter says, and the reopened job
// goes on (its tasks the close had cancelled are to be published).
func TestRefusedReplayOfAJobThatMovedFailsTheTaskAgain(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, opts *options) {
		opts.wrap = func(s store.Store) store.Store { return movingStore{s} }
		b := setup(t, opts)
		id, taskID := b.failedFastJob(t)
		b.dead(t, id, taskID, 1)
		b.unbindTasksQueue(t)

		_, err := b.queue.Replay(context.Background(), deadletters.Filter{})
		require.ErrorIs(t, err, broker.ErrUnroutable)
		failed := b.task(t, id, taskID)
		require.Equal(t, warren.TaskFailed, failed.State)
		require.Equal(t, "retries_exhausted: boom", failed.Error)
		require.Equal(t, 4, failed.Attempts)
		require.Equal(t, warren.TaskCompleted, b.taskState(t, id, 2))
		job, err := b.store.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, warren.JobRunning, job.State)
		require.Equal(t, int64(1), job.FailedTasks)
		require.Equal(t, int64(1), job.CompletedTasks)
		require.Len(t, b.relay(t), 2, "tasks 3 and 4")
	})
}
