package outcomes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/outcomes"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// rig is a responder on the real broker over a SQLite store, and a
// client channel that asks it as a worker does (direct reply-to).
type rig struct {
	st      store.Store
	ch      *amqp.Channel
	replies <-chan amqp.Delivery
	queue   string
}

func newRig(t *testing.T, maxBytes int) *rig {
	t.Helper()
	names, conn := amqptest.Topology(t, nil)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	r, err := outcomes.New(outcomes.Config{Conn: conn, Queue: names.OutcomesQueue, Store: st, MaxMessageBytes: maxBytes})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	replies, err := ch.Consume(protocol.DirectReplyTo, "", true, false, false, false, nil)
	require.NoError(t, err)
	return &rig{st: st, ch: ch, replies: replies, queue: names.OutcomesQueue}
}

// ask sends one request body and returns the reply's body.
func (r *rig) ask(t *testing.T, body string) []byte {
	t.Helper()
	id := fmt.Sprintf("c-%d", time.Now().UnixNano())
	require.NoError(t, r.ch.PublishWithContext(context.Background(), "", r.queue, false, false, amqp.Publishing{
		ContentType: protocol.ContentType, ReplyTo: protocol.DirectReplyTo, CorrelationId: id, Body: []byte(body)}))
	for {
		select {
		case d := <-r.replies:
			if d.CorrelationId == id {
				return d.Body
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no reply to %s", body)
		}
	}
}

// reducing makes a job of n tasks with a reduce task, records their
// outcomes (every third failed, results of resultBytes bytes) and starts
// its reduce; it returns the job and its reduce task's generation.
func (r *rig) reducing(t *testing.T, n, resultBytes int) (warren.Job, int) {
	t.Helper()
	ctx := context.Background()
	policy := warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum"}, ToleratedFailurePercent: 100,
		ToleratedFailures: warren.UnlimitedFailures}
	job, _, err := r.st.CreateJob(ctx, store.NewJob{Type: "t", Policy: policy}, func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(`1`), nil) {
				return
			}
		}
	})
	require.NoError(t, err)
	_, err = r.st.RelayBatch(ctx, n, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	var outs []store.Outcome
	for i := 1; i <= n; i++ {
		o := store.Outcome{JobID: job.ID, TaskID: int64(i), State: warren.TaskCompleted,
			Result: json.RawMessage(fmt.Sprintf(`"%d%s"`, i, strings.Repeat("x", resultBytes)))}
		if i%3 == 0 {
			o = store.Outcome{JobID: job.ID, TaskID: int64(i), State: warren.TaskFailed, Error: fmt.Sprintf("task %d failed", i)}
		}
		outs = append(outs, o)
	}
	_, err = r.st.ApplyOutcomes(ctx, outs)
	require.NoError(t, err)
	job, err = r.st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	started, err := r.st.StartReduce(ctx, job.ID, job.Version)
	require.NoError(t, err)
	require.True(t, started)
	task0, err := r.st.GetTask(ctx, job.ID, warren.ReduceTaskID)
	require.NoError(t, err)
	return job, task0.Generation
}

// A job's outcomes come in task id order, in pages that stay under the
// maximum message size (but hold one outcome at least), each reply
// naming where the next page starts, the last none; task 0 is never one.
func TestPagesUnderTheMessageSize(t *testing.T) {
	t.Parallel()
	const maxBytes = 4096
	r := newRig(t, maxBytes)
	job, gen := r.reducing(t, 50, 500)
	var (
		after int64
		seen  []int64
		pages int
	)
	for {
		body := r.ask(t, fmt.Sprintf(`{"job_id":%q,"generation":%d,"after":%d}`, job.ID, gen, after))
		require.LessOrEqual(t, len(body), maxBytes, "a page fits the maximum message size")
		reply, err := protocol.DecodeOutcomesReply(body, after)
		require.NoError(t, err, "reply %s", body)
		require.Nil(t, reply.Error)
		pages++
		for _, o := range reply.Outcomes {
			seen = append(seen, o.TaskID)
			if o.TaskID%3 == 0 {
				require.Equal(t, string(warren.TaskFailed), o.State)
				require.Equal(t, fmt.Sprintf("task %d failed", o.TaskID), o.Error)
			} else {
				require.Equal(t, string(warren.TaskCompleted), o.State)
				require.JSONEq(t, fmt.Sprintf(`"%d%s"`, o.TaskID, strings.Repeat("x", 500)), string(o.Result))
			}
		}
		if reply.Next == nil {
			break
		}
		after = *reply.Next
	}
	want := make([]int64, 50)
	for i := range want {
		want[i] = int64(i + 1)
	}
	require.Equal(t, want, seen, "every outcome once, in task id order")
	require.GreaterOrEqual(t, pages, 5, "34 results of 500 bytes take five 4 KiB pages")

	// A result larger than a page still goes, alone.
	big, gen := r.reducing(t, 2, 6000)
	reply, err := protocol.DecodeOutcomesReply(r.ask(t, fmt.Sprintf(`{"job_id":%q,"generation":%d,"after":0}`, big.ID, gen)), 0)
	require.NoError(t, err)
	require.Len(t, reply.Outcomes, 1)
	require.NotNil(t, reply.Next)
}

// A request for a job that is not reducing at the request's generation is
// answered stale; one that is not a request, bad_request.
func TestStaleAndBadRequests(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1<<20)
	job, gen := r.reducing(t, 3, 1)
	code := func(body string) string {
		reply, err := protocol.DecodeOutcomesReply(r.ask(t, body), 0)
		require.NoError(t, err)
		if reply.Error == nil {
			return ""
		}
		return reply.Error.Code
	}
	require.Equal(t, "", code(fmt.Sprintf(`{"job_id":%q,"generation":%d,"after":0}`, job.ID, gen)))
	require.Equal(t, "", code(fmt.Sprintf(`{"job_id":%q,"generation":0,"after":0}`, job.ID)), "no generation: any")
	require.Equal(t, protocol.OutcomesStale, code(fmt.Sprintf(`{"job_id":%q,"generation":%d,"after":0}`, job.ID, gen+1)))
	require.Equal(t, protocol.OutcomesStale, code(`{"job_id":"no-such-job","generation":1,"after":0}`))
	require.Equal(t, protocol.OutcomesBadRequest, code(`{"job_id":"","generation":1}`))
	require.Equal(t, protocol.OutcomesBadRequest, code(`not json`))

	_, err := r.st.CancelJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, protocol.OutcomesStale, code(fmt.Sprintf(`{"job_id":%q,"generation":%d,"after":0}`, job.ID, gen)), "cancelled")
}
