package worker_test

import (
	"context"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

func (b *testBundle) pause(t *testing.T, c protocol.Control) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, broker.PublishPause(ctx, b.pub, b.names, c))
}

// A task of a paused job goes back through the retry tiers, again and
// again, without running and without spending an attempt, while other
// jobs' tasks run; after the resume it runs as the attempt it was.
func TestRunHoldsTasksOfAPausedJobUntilTheResume(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	var ranPaused atomic.Int64
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			if task.JobID == "job-p" {
				ranPaused.Add(1)
			}
			return square(ctx, task)
		},
	})
	rw.listening(t)
	b.pause(t, protocol.Control{Type: protocol.ControlPause, JobID: "job-p"})
	require.Equal(t, "job-p", rw.expect(t, worker.EventPauseSeen)[0].JobID)

	b.publishTask(t, taskType, "job-y", 1, `{"x": 2}`, retries(3))
	require.Equal(t, "job-y", rw.expect(t, worker.EventCompleted)[0].JobID, "another job's task runs")
	b.publishTask(t, taskType, "job-p", 1, `{"x": 3}`, amqp.Table{protocol.HeaderRetry: int64(1), protocol.HeaderMaxRetries: int64(3)})
	held := rw.expect(t, worker.EventHeld)[0]
	require.Equal(t, "job-p", held.JobID)
	require.Equal(t, 2, held.Attempt)
	require.Equal(t, unservedTiers[0], held.Delay, "the first hold waits the first tier")
	require.Equal(t, protocol.DefaultQueue, held.Queue)
	held = rw.expect(t, worker.EventHeld)[0]
	require.Equal(t, unservedTiers[1], held.Delay, "the second waits the second")
	held = rw.expect(t, worker.EventHeld)[0]
	require.Equal(t, unservedTiers[1], held.Delay, "and none waits past the second")
	require.Zero(t, ranPaused.Load(), "no run while paused")

	b.pause(t, protocol.Control{Type: protocol.ControlResume, JobID: "job-p"})
	rw.expect(t, worker.EventResumeSeen)
	done := rw.expectPast(t, worker.EventHeld, worker.EventCompleted)
	require.Equal(t, "job-p", done.JobID)
	require.Equal(t, 2, done.Attempt, "the holds spent no attempt")
	require.NoError(t, rw.stop())
	require.Equal(t, int64(1), ranPaused.Load())
	byJob := map[string]protocol.Result{}
	for _, r := range b.results(t) {
		byJob[r.JobID] = r
	}
	require.Len(t, byJob, 2)
	require.Equal(t, 2, byJob["job-p"].Attempt)
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
}

// A queue pause holds every task of the work queue, whatever its job.
func TestRunHoldsTasksOfAPausedQueue(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square})
	rw.listening(t)
	b.pause(t, protocol.Control{Type: protocol.ControlPause, Queue: protocol.DefaultQueue})
	require.Equal(t, protocol.DefaultQueue, rw.expect(t, worker.EventPauseSeen)[0].Queue)
	b.publishTask(t, taskType, "job-a", 1, `{"x": 2}`, retries(3))
	require.Equal(t, "job-a", rw.expect(t, worker.EventHeld)[0].JobID)
	b.pause(t, protocol.Control{Type: protocol.ControlResume, Queue: protocol.DefaultQueue})
	rw.expect(t, worker.EventResumeSeen)
	require.Equal(t, 1, rw.expectPast(t, worker.EventHeld, worker.EventCompleted).Attempt)
}

// expectPast returns the next event of kind want, past any events of
// kind skip (a held copy may come back once more between a resume's
// publish and the worker reading it).
func (rw *runningWorker) expectPast(t *testing.T, skip, want worker.EventKind) worker.Event {
	t.Helper()
	for {
		ev := recv(t, rw.events, string(want)+" event")
		if ev.Kind == skip {
			continue
		}
		require.Equal(t, want, ev.Kind, "%+v", ev)
		return ev
	}
}
