package warren_test

// End-to-end tests of reduce tasks (docs/protocol.md, "Reduce tasks"): a
// job's fan-in run by a worker's reducer over every outcome in task order,
// against the real broker and both stores.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// reduceSum is what the test reducer returns: the sum of the completed
// results, how many outcomes it read, and the failed task ids, read in
// task id order (it fails the run if they are not).
type reduceSum struct {
	Sum     int64   `json:"sum"`
	Read    int64   `json:"read"`
	Failed  []int64 `json:"failed"`
	Payload string  `json:"payload"`
}

// sumOutcomes reads outcomes as a reducer does, checking their order.
func sumOutcomes(job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (reduceSum, error) {
	out := reduceSum{Failed: []int64{}}
	var last int64
	for o, err := range outcomes {
		if err != nil {
			return reduceSum{}, err
		}
		if o.TaskID <= last {
			return reduceSum{}, worker.Permanent(fmt.Errorf("task %d after task %d", o.TaskID, last))
		}
		last = o.TaskID
		out.Read++
		if o.State == string(warren.TaskFailed) {
			out.Failed = append(out.Failed, o.TaskID)
			continue
		}
		var v int64
		if err := json.Unmarshal(o.Result, &v); err != nil {
			return reduceSum{}, worker.Permanent(fmt.Errorf("task %d: %w", o.TaskID, err))
		}
		out.Sum += v
	}
	if len(job.Payload) > 0 {
		_ = json.Unmarshal(job.Payload, &out.Payload)
	}
	return out, nil
}

// submitReduced creates a job of n "double" tasks ({"n": i}) whose reduce
// task is of type typ with the payload "p", on policy.
func (b *testBundle) submitReduced(t *testing.T, n int, typ string, policy warren.Policy) warren.Job {
	t.Helper()
	policy.Reduce = ""
	policy.ReduceTask = &warren.ReduceTask{Type: typ, Payload: json.RawMessage(`"p"`)}
	return b.createReduced(t, n, policy)
}

// createReduced creates a job of n "double" tasks ({"n": i}) on policy,
// which has a reduce task, and wakes the relays.
func (b *testBundle) createReduced(t *testing.T, n int, policy warren.Policy) warren.Job {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil) {
				return
			}
		}
	}
	job, created, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "double", Policy: policy}, tasks)
	require.NoError(t, err)
	require.True(t, created)
	b.wakeRelays()
	return job
}

// doubleWorker runs a worker serving "double" (2n) and the reducer
// "sum", whose runs are counted and which fails as fail says (nil: never).
func doubleWorker(t *testing.T, b *testBundle, runs *atomic.Int64, fail func(run int64, tk worker.ReduceJob) error) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		var p struct{ N int64 }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		return 2 * p.N, nil
	})
	w.Reducer("sum", func(_ context.Context, job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		run := runs.Add(1)
		if fail != nil {
			if err := fail(run, job); err != nil {
				return nil, err
			}
		}
		return sumOutcomes(job, outcomes)
	})
	runWorker(t, w)
	return w
}

// jobResult reads a closed job's result as a reduceSum.
func (b *testBundle) reduceResult(t *testing.T, id string) reduceSum {
	t.Helper()
	raw, err := b.store.JobResult(context.Background(), id)
	require.NoError(t, err)
	var got reduceSum
	require.NoError(t, json.Unmarshal(raw, &got), "result %s", raw)
	return got
}

// A reduce task sums 2,000 outcomes, read in pages over the outcomes RPC,
// and its result is the job's; the job shows the reduce task as task 0.
func TestReduceTaskIsTheJobsResult(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		var runs atomic.Int64
		doubleWorker(t, b, &runs, nil)
		const n = 2000
		job := b.submitReduced(t, n, "sum", warren.Policy{})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		got := b.reduceResult(t, job.ID)
		require.Equal(t, reduceSum{Sum: n * (n + 1), Read: n, Failed: []int64{}, Payload: "p"}, got)
		require.Equal(t, int64(1), runs.Load())
		closed, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(n), closed.CompletedTasks, "the reduce task is not counted")
		require.Equal(t, warren.ReduceCompleted, closed.ReduceState)
		task0, err := b.store.GetTask(context.Background(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.Equal(t, warren.TaskCompleted, task0.State)
		require.Equal(t, 1, task0.Attempts)
	})
}

// A transient failure of the reducer is retried through the tiers; a
// permanent one fails the job with its error; failed map tasks within the
// tolerance reach the reducer as failed outcomes.
func TestReduceTaskRetriesAndFails(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupFailures(t, kind)
		b.startServer(t, b.store)
		var runs atomic.Int64
		doubleWorker(t, b, &runs, func(run int64, job worker.ReduceJob) error {
			if string(job.Payload) == `"permanent"` {
				return worker.Permanent(errors.New("the sums do not add up"))
			}
			if run == 1 {
				return errors.New("the warehouse is busy")
			}
			return nil
		})
		job := b.submitReduced(t, 50, "sum", warren.Policy{MaxRetries: 2})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		require.Equal(t, int64(2), runs.Load(), "one retry")
		require.Equal(t, int64(50*51), b.reduceResult(t, job.ID).Sum)
		task0, err := b.store.GetTask(context.Background(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.Equal(t, 2, task0.Attempts)

		ctx := context.Background()
		permJob := b.createReduced(t, 5, warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum", Payload: json.RawMessage(`"permanent"`)}})
		require.Equal(t, warren.JobFailed, b.waitClosed(t, permJob.ID))
		failed, err := b.store.GetJob(ctx, permJob.ID)
		require.NoError(t, err)
		require.Contains(t, failed.Error, "the sums do not add up")
		require.Equal(t, warren.ReduceFailed, failed.ReduceState)
		require.Equal(t, int64(5), failed.CompletedTasks, "the map tasks all completed")
	})
}

// A redrive of failed map tasks runs the reduce again, on the new
// outcomes.
func TestRedriveRunsTheReduceAgain(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupFailures(t, kind)
		b.startServer(t, b.store)
		var broken atomic.Bool
		broken.Store(true)
		var runs atomic.Int64
		w, err := worker.New(b.workerConfig(4))
		require.NoError(t, err)
		w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
			if tk.TaskID%4 == 0 && broken.Load() {
				return nil, worker.Permanent(errors.New("bad input today"))
			}
			return 2 * tk.TaskID, nil
		})
		w.Reducer("sum", func(_ context.Context, job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
			runs.Add(1)
			return sumOutcomes(job, outcomes)
		})
		runWorker(t, w)
		job := b.submitReduced(t, 20, "sum", warren.Policy{ToleratedFailures: 5, ToleratedFailurePercent: 100})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		first := b.reduceResult(t, job.ID)
		require.Equal(t, []int64{4, 8, 12, 16, 20}, first.Failed)
		require.Equal(t, int64(2*(20*21/2-(4+8+12+16+20))), first.Sum)

		broken.Store(false)
		_, n, err := b.store.RedriveJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 5, n)
		b.wakeRelays()
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		again := b.reduceResult(t, job.ID)
		require.Equal(t, reduceSum{Sum: 20 * 21, Read: 20, Failed: []int64{}, Payload: "p"}, again)
		require.Equal(t, int64(2), runs.Load())
		task0, err := b.store.GetTask(context.Background(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.Equal(t, 2, task0.Generation, "the second reduce is a new generation")
	})
}

// Cancelling a job while it reduces closes it cancelled; the reducer's
// late result changes nothing. (A reducer that asks for outcomes after the
// cancel is answered stale and publishes nothing: the worker's tests.)
func TestCancelDuringReduce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		w, err := worker.New(b.workerConfig(4))
		require.NoError(t, err)
		w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) { return 2 * tk.TaskID, nil })
		w.Reducer("sum", func(_ context.Context, job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
			// Every page is read before the job is cancelled: the result
			// is published, and the aggregator finds the job closed.
			sum, err := sumOutcomes(job, outcomes)
			started <- struct{}{}
			<-release
			return sum, err
		})
		runWorker(t, w)
		job := b.submitReduced(t, 10, "sum", warren.Policy{})
		select {
		case <-started:
		case <-time.After(waitTimeout):
			t.Fatal("the reduce task did not start")
		}
		reducing, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.JobRunning, reducing.State)
		require.Equal(t, warren.ReduceRunning, reducing.ReduceState)
		_, err = b.store.CancelJob(context.Background(), job.ID)
		require.NoError(t, err)
		close(release)
		b.waitFor(t, func() bool { return b.late.Load() >= 1 }, "the late reduce result")
		closed, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.JobCancelled, closed.State)
	})
}

// crashingReducer serves the "reduce" work queue with a reducer "sum"
// that kills its own process after reading the first page of outcomes.
func crashingReducer(prefix string) {
	w, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: prefix, Concurrency: 1, Queues: []string{"reduce"},
		RetryTiers: testTiers, DeliveryLimit: testDeliveryLimit})
	if err != nil {
		os.Exit(2)
	}
	w.Reducer("sum", func(_ context.Context, _ worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		for range outcomes {
			os.Exit(3)
		}
		return nil, nil
	})
	_ = w.Run(context.Background())
	os.Exit(4)
}

// A worker killed in the middle of a reduce leaves the reduce task
// unacked; it runs again on another worker, from the first outcome, and
// the job completes exactly. The reduce task goes to a queue of its own.
func TestWorkerKilledMidReduce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) { workerKilledMidReduce(t, kind) })
}

func workerKilledMidReduce(t *testing.T, kind string) {
	b := setupFailures(t, kind)
	t.Cleanup(func() { require.NoError(t, broker.DeleteWorkQueue(b.admin, b.names, "reduce", testTiers...)) })
	b.startServer(t, b.store)
	w, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) { return 2 * tk.TaskID, nil })
	runWorker(t, w)

	const n = 300
	job := b.createReduced(t, n, warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum", Queue: "reduce", Payload: json.RawMessage(`"p"`)}})

	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "WARREN_TEST_CRASHING_REDUCER="+b.names.Prefix)
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &exit)
	require.Equal(t, 3, exit.ExitCode(), "the reducer killed its worker")
	reducing, err := b.store.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.ReduceRunning, reducing.ReduceState, "the job still reduces")

	var runs atomic.Int64
	good, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: b.names.Prefix, Concurrency: 2, Queues: []string{"reduce"},
		RetryTiers: testTiers, DeliveryLimit: testDeliveryLimit})
	require.NoError(t, err)
	good.Reducer("sum", func(_ context.Context, job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		runs.Add(1)
		return sumOutcomes(job, outcomes)
	})
	runWorker(t, good)
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	require.Equal(t, reduceSum{Sum: n * (n + 1), Read: n, Failed: []int64{}, Payload: "p"}, b.reduceResult(t, job.ID))
	require.Equal(t, int64(1), runs.Load())
}

// A reduce result of another generation than the reduce task's is a
// duplicate and changes nothing; the one of its generation closes the job
// with that result. The reduce task here is taken from its queue by hand,
// as a worker with no warren code would.
func TestStaleReduceResultIsIgnored(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		t.Cleanup(func() { require.NoError(t, broker.DeleteWorkQueue(b.admin, b.names, "manual")) })
		b.startServer(t, b.store)
		w, err := worker.New(b.workerConfig(4))
		require.NoError(t, err)
		w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) { return 2 * tk.TaskID, nil })
		runWorker(t, w)
		job := b.createReduced(t, 1, warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum", Queue: "manual"}})
		// The queue exists once the relay published the reduce task to it.
		b.waitFor(t, func() bool {
			tk, err := b.store.GetTask(context.Background(), job.ID, warren.ReduceTaskID)
			return err == nil && tk.State == warren.TaskQueued
		}, "the reduce task to be published")
		ch, ds := takeTasks(t, b.admin, b.names.WorkQueue("manual"), 1)
		defer ch.Close()
		d := ds[0]
		require.Equal(t, "sum", d.Type)
		require.Equal(t, fmt.Sprintf("%s:0", job.ID), d.MessageId)
		var body struct {
			JobID  string `json:"job_id"`
			TaskID *int64 `json:"task_id"`
			Reduce bool   `json:"reduce"`
		}
		require.NoError(t, json.Unmarshal(d.Body, &body))
		require.True(t, body.Reduce)
		require.Equal(t, int64(0), *body.TaskID)
		gen, ok := d.Headers[protocol.HeaderGeneration].(int64)
		require.True(t, ok, "x-generation %v", d.Headers[protocol.HeaderGeneration])

		pub, err := b.admin.Channel()
		require.NoError(t, err)
		defer pub.Close()
		require.NoError(t, pub.Confirm(false))
		publish := func(gen int64, result string) {
			conf, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), b.names.ResultsExchange, protocol.RoutingKeyResult, true, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: protocol.ContentType, MessageId: d.MessageId,
					Headers: amqp.Table{protocol.HeaderGeneration: gen},
					Body:    []byte(fmt.Sprintf(`{"job_id":%q,"task_id":0,"result":%s}`, job.ID, result))})
			require.NoError(t, err)
			require.True(t, conf.Wait())
		}
		publish(gen+1, `"stale"`)
		b.waitFor(t, func() bool { return b.duplicates.Load() >= 1 }, "the stale result counted as a duplicate")
		still, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.ReduceRunning, still.ReduceState)
		publish(gen, `{"total": 2}`)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		raw, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `{"total": 2}`, string(raw))
		publish(gen, `"again"`)
		b.waitFor(t, func() bool { return b.late.Load() >= 1 }, "the repeated result counted as late")
		require.NoError(t, d.Ack(false))
	})
}
