package warren_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/worker"
)

// Jobs with a queue go to their own work queue, served only by the
// workers that consume it: a worker that has no handler for a type never
// sees that type's tasks, so nothing is dead-lettered unknown_type.
func TestJobsGoToTheirQueues(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	t.Cleanup(func() { require.NoError(t, broker.DeleteWorkQueue(b.admin, b.names, "gpu")) })
	b.startServer(t, b.store)

	// One worker serves "double" on the default queue, another "render"
	// on the gpu queue.
	runWorker(t, newDoublingWorker(t, b, nil))
	cfg := b.workerConfig(4)
	cfg.Queues = []string{"gpu"}
	gpu, err := worker.New(cfg)
	require.NoError(t, err)
	gpu.Handle("render", func(_ context.Context, tk worker.Task) (any, error) { return "frame", nil })
	runWorker(t, gpu)

	renders := b.submitTyped(t, "render", 50, warren.Policy{Queue: "gpu"})
	doubles := b.submit(t, 50, warren.Policy{})
	closed := map[string]warren.JobState{}
	for len(closed) < 2 {
		c := <-b.closed
		closed[c.id] = c.state
	}
	require.Equal(t, map[string]warren.JobState{renders.ID: warren.JobCompleted, doubles.ID: warren.JobCompleted}, closed)
	b.expectDoubled(t, doubles.ID, 50)
	job, err := b.store.GetJob(context.Background(), renders.ID)
	require.NoError(t, err)
	require.Equal(t, "gpu", job.Policy.Queue)
	require.EqualValues(t, 50, job.CompletedTasks)
	require.Zero(t, b.invalid.Load())
	require.Zero(t, amqptest.QueueDepth(t, b.admin, b.names.TasksDLQ), "no task was dead-lettered")
}
