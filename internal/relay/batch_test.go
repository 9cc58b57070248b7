package relay_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// A job with a batch size goes out as batch messages of that many tasks
// (the last one shorter), each confirmed and marked like single tasks.
func TestRelaySendsABatchJobAsBatchMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= 10; i++ {
			if !yield(json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`), nil) {
				return
			}
		}
	}
	job, _, err := b.store.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{MaxRetries: 4, BatchSize: 4, TaskTimeout: 90 * time.Second}}, tasks)
	require.NoError(t, err)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n, "every task is marked queued")
	require.Equal(t, 3, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue), "4 + 4 + 2 tasks in 3 messages")
	got, err := b.store.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)

	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var ids []int64
	for range 3 {
		d, ok, err := ch.Get(b.names.TasksQueue, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, job.ID, d.CorrelationId)
		require.Equal(t, "echo", d.Type)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		require.EqualValues(t, 0, d.Headers[protocol.HeaderRetry])
		require.EqualValues(t, 4, d.Headers[protocol.HeaderMaxRetries])
		require.EqualValues(t, 90000, d.Headers[protocol.HeaderTaskTimeout], "the job's task_timeout: the limit of each task's run")
		ts, batch, err := protocol.DecodeTasks(d.Body)
		require.NoError(t, err)
		require.True(t, batch)
		require.Equal(t, protocol.BatchMessageID(job.ID, ts[0].TaskID, len(ts)), d.MessageId)
		for _, tk := range ts {
			ids = append(ids, tk.TaskID)
		}
	}
	require.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, ids)
}

// sizer is a relay.Sizer that records what it is asked and answers size.
type sizer struct {
	size  int
	asked []string
}

func (s *sizer) Size(j store.PendingJob, atLeast bool, consumers int) (int, int) {
	s.asked = append(s.asked, j.ID+" pending="+strconv.Itoa(j.Pending)+" atLeast="+strconv.FormatBool(atLeast)+" consumers="+strconv.Itoa(consumers))
	return s.size, j.Pending
}

// A job without a batch size goes out in messages of the size the Sizer
// chooses, given the job's pending tasks and its queue's consumers; a job
// with one keeps it.
func TestRelayAsksTheSizerForJobsWithoutABatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	auto := b.createJob(t, 10)
	b.createJobWith(t, warren.Policy{BatchSize: 2}, 4)
	sz := &sizer{size: 5}
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, Sizer: sz, BatchSize: 100,
		Depth: func(string) (broker.QueueDepth, error) { return broker.QueueDepth{Consumers: 3}, nil }})
	require.NoError(t, err)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 14, n)
	require.Equal(t, []string{auto.ID + " pending=10 atLeast=false consumers=3"}, sz.asked)
	require.Equal(t, 2+2, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue), "5 + 5 tasks of one job, 2 + 2 of the other")

	// Pending counted up to the round's tasks: the job may have more.
	big := b.createJob(t, 300)
	sz.asked = nil
	_, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{big.ID + " pending=100 atLeast=true consumers=3"}, sz.asked)
}

// A round shared between an old job with a backlog and a small new one
// gives the small job all its tasks: its last batch is short because the
// job has no more, not because the round cut it, so it goes out now
// instead of waiting for the old job's backlog to drain.
func TestRelayPublishesASmallJobsShortBatchBehindABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := b.createJobWith(t, warren.Policy{BatchSize: 10}, 400)
	small := b.createJobWith(t, warren.Policy{BatchSize: 16}, 10)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, BatchSize: 200})
	require.NoError(t, err)

	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	pending, _, err := b.store.ListTasks(ctx, small.ID, store.ListTasksOpts{State: warren.TaskPending})
	require.NoError(t, err)
	require.Zero(t, len(pending), "the small job's 10 tasks went out in the first round")
	require.Equal(t, 200, n, "190 tasks of the old job in 19 messages, the small job's 10 in one")
	got, err := b.store.GetJob(ctx, small.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
	backlog, err := b.store.Backlog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 400-190, backlog, "the old job's rest waits")
	got, err = b.store.GetJob(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobPending, got.State)
}

// A job whose share of a round ends in a short batch while it has more
// tasks pending keeps that batch's tasks for a later round, where they go
// out in a whole batch.
func TestRelayHoldsAShortLastBatchOfAJobWithMore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	job := b.createJobWith(t, warren.Policy{BatchSize: 16}, 400)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, BatchSize: 200})
	require.NoError(t, err)

	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 192, n, "12 whole batches of 16; the 8 tasks left of the round's 200 wait")
	require.Equal(t, 12, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	backlog, err := b.store.Backlog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 400-192, backlog)
	pending, _, err := b.store.ListTasks(ctx, job.ID, store.ListTasksOpts{State: warren.TaskPending, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, int64(193), pending[0].TaskID, "the tasks held are the first of the job's rest")
}
