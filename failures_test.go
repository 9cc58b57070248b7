package warren_test

// End-to-end tests of the failure paths (docs/failures.md) against the real
// broker and stores.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// testTiers are short retry delay tiers, so that retries take milliseconds.
var testTiers = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}

// testDeliveryLimit is the failure tests' quorum delivery limit.
const testDeliveryLimit = 3

func setupFailures(t *testing.T, kind string) *testBundle {
	t.Helper()
	return setupWith(t, kind, &broker.TopologyOptions{RetryTiers: testTiers, DeliveryLimit: testDeliveryLimit})
}

// TestMain doubles as a crashing worker process for the poison test.
func TestMain(m *testing.M) {
	if prefix := os.Getenv("WARREN_TEST_CRASHING_WORKER"); prefix != "" {
		crashingWorker(prefix)
		return
	}
	if prefix := os.Getenv("WARREN_TEST_CRASHING_REDUCER"); prefix != "" {
		crashingReducer(prefix)
		return
	}
	os.Exit(m.Run())
}

// crashingWorker consumes tasks and kills its own process on the first one,
// like a handler that segfaults.
func crashingWorker(prefix string) {
	w, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: prefix, Concurrency: 1, RetryTiers: testTiers, DeliveryLimit: testDeliveryLimit})
	if err != nil {
		os.Exit(2)
	}
	w.Handle("double", func(context.Context, worker.Task) (any, error) {
		os.Exit(3)
		return nil, nil
	})
	_ = w.Run(context.Background())
	os.Exit(4)
}

// mixedWorker serves "double" with planned failures by task id: ids
// divisible by 10 fail transiently once, ids 5, 25, 45, ... fail
// permanently, and ids in panics panic on every attempt.
func mixedWorker(t *testing.T, b *testBundle, panics map[int64]bool, runs *atomic.Int64) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		if runs != nil {
			runs.Add(1)
		}
		switch {
		case panics[tk.TaskID]:
			panic(fmt.Sprintf("task %d always panics", tk.TaskID))
		case tk.TaskID%20 == 5:
			return nil, worker.Permanent(fmt.Errorf("task %d has bad input", tk.TaskID))
		case tk.TaskID%10 == 0 && tk.Attempt == 1:
			return nil, errors.New("transient: try again")
		}
		return 2 * tk.TaskID, nil
	})
	return w
}

// A 200-task job with 10% transient failures, 5% permanent failures and
// two panicking tasks ends with exact counters, the state its tolerance
// implies, per-task attempts and errors, and dead letters for exactly the
// failed tasks.
func TestMixedFailuresEndExactly(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupFailures(t, kind)
		b.startServer(t, b.store)
		const n = 200
		panics := map[int64]bool{7: true, 13: true}
		job := b.submit(t, n, warren.Policy{MaxRetries: 2, ToleratedFailures: 12, ToleratedFailurePercent: 6})
		runWorker(t, mixedWorker(t, b, panics, nil))

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID), "12 failures of 200: within both tolerances")
		ctx := context.Background()
		got, err := b.store.GetJob(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(188), got.CompletedTasks)
		require.Equal(t, int64(12), got.FailedTasks)

		var failedIDs []int64
		tasks := allTasks(t, b.store, job.ID)
		require.Len(t, tasks, n)
		for _, tk := range tasks {
			switch {
			case panics[tk.TaskID]:
				require.Equal(t, warren.TaskFailed, tk.State)
				require.Equal(t, 3, tk.Attempts, "1 run + 2 retries")
				require.Contains(t, tk.Error, protocol.ReasonRetriesExhausted)
				require.Contains(t, tk.Error, "panicked")
				failedIDs = append(failedIDs, tk.TaskID)
			case tk.TaskID%20 == 5:
				require.Equal(t, warren.TaskFailed, tk.State)
				require.Equal(t, 1, tk.Attempts, "never retried")
				require.Contains(t, tk.Error, protocol.ReasonPermanent)
				require.Contains(t, tk.Error, "bad input")
				require.NotNil(t, tk.StartedAt)
				failedIDs = append(failedIDs, tk.TaskID)
			case tk.TaskID%10 == 0:
				require.Equal(t, warren.TaskCompleted, tk.State)
				require.Equal(t, 2, tk.Attempts)
			default:
				require.Equal(t, warren.TaskCompleted, tk.State)
				require.Equal(t, 1, tk.Attempts)
			}
		}
		raw, err := b.store.JobResult(ctx, job.ID)
		require.NoError(t, err)
		var result []*int64
		require.NoError(t, json.Unmarshal(raw, &result))
		for i, v := range result {
			id := int64(i + 1)
			if panics[id] || id%20 == 5 {
				require.Nil(t, v, "task %d failed: null", id)
			} else {
				require.Equal(t, 2*id, *v)
			}
		}

		// tasks.dlq holds exactly the failed tasks.
		q := b.dlq(t)
		msgs, err := q.List(ctx, deadletters.Filter{JobID: job.ID})
		require.NoError(t, err)
		var parked []int64
		for _, m := range msgs {
			parked = append(parked, m.TaskID)
		}
		require.ElementsMatch(t, failedIDs, parked)
	})
}

// With no tolerance the same kind of job fails; with fail_fast it fails
// before all its tasks ran, and results arriving later change nothing.
func TestToleranceZeroAndFailFast(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	strict := b.submit(t, 40, warren.Policy{MaxRetries: 1})
	runWorker(t, mixedWorker(t, b, nil, nil))
	require.Equal(t, warren.JobFailed, b.waitClosed(t, strict.ID))
	got, err := b.store.GetJob(context.Background(), strict.ID)
	require.NoError(t, err)
	require.Equal(t, int64(40), got.CompletedTasks+got.FailedTasks, "a job without fail_fast waits for every task")
	require.Equal(t, int64(2), got.FailedTasks)

	// fail_fast, in an installation of its own: task 1 fails at once; the
	// others are slow.
	b = setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	release := make(chan struct{})
	fast := b.submitTyped(t, "slow", 50, warren.Policy{FailFast: true})
	slow, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	slow.Handle("slow", func(ctx context.Context, tk worker.Task) (any, error) {
		if tk.TaskID == 1 {
			return nil, worker.Permanent(errors.New("first task is broken"))
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return tk.TaskID, nil
	})
	runWorker(t, slow)
	require.Equal(t, warren.JobFailed, b.waitClosed(t, fast.ID))
	closed, err := b.store.GetJob(context.Background(), fast.ID)
	require.NoError(t, err)
	require.Less(t, closed.CompletedTasks+closed.FailedTasks, int64(50), "closed before all tasks ran")

	close(release) // the held tasks finish now: late results
	b.waitFor(t, func() bool { return b.late.Load() >= 4 }, "late results of the held tasks")
	after, err := b.store.GetJob(context.Background(), fast.ID)
	require.NoError(t, err)
	require.Equal(t, closed.CompletedTasks, after.CompletedTasks)
	require.Equal(t, closed.FailedTasks, after.FailedTasks)
	require.Equal(t, warren.JobFailed, after.State)
}

// A poison task that kills its worker process every time is dead-lettered
// by the broker at the delivery limit, and its task is marked failed.
func TestPoisonTaskKillingItsWorkerIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	job := b.submit(t, 1, warren.Policy{})

	exe, err := os.Executable()
	require.NoError(t, err)
	// Crashing workers, one after another, until the job closes.
	stop, cancel := context.WithCancel(context.Background())
	var crashes atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stop.Err() == nil {
			cmd := exec.CommandContext(stop, exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), "WARREN_TEST_CRASHING_WORKER="+b.names.Prefix)
			var exit *exec.ExitError
			if err := cmd.Run(); errors.As(err, &exit) && exit.ExitCode() == 3 {
				crashes.Add(1)
			}
		}
	}()
	state := b.waitClosed(t, job.ID)
	cancel()
	<-done
	require.Equal(t, warren.JobFailed, state)
	require.GreaterOrEqual(t, crashes.Load(), int64(testDeliveryLimit), "the delivery limit counts the crashes")
	errs, err := b.store.JobErrors(context.Background(), job.ID, 1)
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error, protocol.ReasonDeliveryLimit)
}

// Malformed task messages are dead-lettered with a reason and the
// consumers keep running.
func TestMalformedTasksAreDeadLetteredAndWorkGoesOn(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	runWorker(t, mixedWorker(t, b, nil, nil))

	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer ch.Close()
	for _, body := range []string{`not json`, `{"job_id": "x"}`, `{"job_id": "x", "task_id": "one"}`} {
		require.NoError(t, ch.PublishWithContext(context.Background(), b.names.JobsExchange, protocol.RoutingKeyTask, true, false,
			amqpMsg("double", body)))
	}
	// The aggregator cannot apply them (no ids): they end in results.dlq.
	b.waitFor(t, func() bool { return b.invalid.Load() == 3 }, "3 malformed dead letters")
	q := b.dlq(t)
	msgs, err := q.List(context.Background(), deadletters.Filter{})
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	for _, m := range msgs {
		require.Equal(t, protocol.ReasonMalformed, m.Reason)
	}
	// Work goes on (task 5 fails permanently: tolerated).
	job := b.submit(t, 20, warren.Policy{MaxRetries: 1, ToleratedFailures: 1, ToleratedFailurePercent: 5})
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
}

// Cancelling during a run: the job closes at once, workers skip its
// remaining tasks, and nothing it does later changes the job.
func TestCancelDuringARun(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	started := make(chan struct{}, 1000)
	release := make(chan struct{})
	var skipped, ran atomic.Int64
	cancelSeen := make(chan struct{}, 1)
	progress := make(chan struct{}, 1)
	cfg := b.workerConfig(2)
	cfg.OnEvent = func(e worker.Event) {
		switch e.Kind {
		case worker.EventSkipped:
			skipped.Add(1)
		case worker.EventCancelSeen:
			select {
			case cancelSeen <- struct{}{}:
			default:
			}
		}
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	w.Handle("double", func(ctx context.Context, tk worker.Task) (any, error) {
		ran.Add(1)
		started <- struct{}{}
		<-release
		return tk.TaskID, nil
	})
	runWorker(t, w)
	const n = 100
	job := b.submit(t, n, warren.Policy{})
	<-started // the run is under way
	b.waitFor(t, func() bool { return b.published.Load() == n }, "all %d tasks published", n)

	ctx := context.Background()
	cancelled, err := b.store.CancelJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobCancelled, cancelled.State)
	pub, err := broker.NewPublisher(b.admin, nil)
	require.NoError(t, err)
	defer pub.Close()
	require.NoError(t, broker.PublishCancel(ctx, pub, b.names, job.ID))
	<-cancelSeen
	close(release)

	timeout := time.After(waitTimeout)
	for skipped.Load()+ran.Load() < n {
		select {
		case <-progress:
		case <-timeout:
			t.Fatalf("skipped %d + ran %d of %d tasks", skipped.Load(), ran.Load(), n)
		}
	}
	require.Greater(t, skipped.Load(), int64(n/2), "most tasks are skipped, not run")
	got, err := b.store.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobCancelled, got.State)
	require.Zero(t, got.CompletedTasks, "results of a cancelled job are ignored")
}

// Redrive after a failure that has since cleared: only the failed tasks
// run again, attempts keep counting, and the job completes.
func TestRedriveAfterTheCauseCleared(t *testing.T) {
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
			runs.Add(1)
			if tk.TaskID%3 == 0 && broken.Load() {
				return nil, errors.New("dependency down")
			}
			return 2 * tk.TaskID, nil
		})
		runWorker(t, w)
		job := b.submit(t, 30, warren.Policy{MaxRetries: 1})
		require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID))
		require.Equal(t, int64(30+10), runs.Load(), "10 tasks ran twice")

		broken.Store(false)
		ctx := context.Background()
		reopened, n, err := b.store.RedriveJob(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, 10, n)
		require.Equal(t, warren.JobRunning, reopened.State)
		b.wakeRelays()
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, 30)
		require.Equal(t, int64(30+10+10), runs.Load(), "only the failed tasks ran again")
		for _, tk := range allTasks(t, b.store, job.ID) {
			if tk.TaskID%3 == 0 {
				require.Equal(t, 3, tk.Attempts, "task %d: attempts keep counting", tk.TaskID)
			}
		}
	})
}

// Replay from the dead-letter queue after fixing the cause: the task runs
// again with its retries reset and the job completes.
func TestReplayFromTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	var broken atomic.Bool
	broken.Store(true)
	w, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		if tk.TaskID == 4 && broken.Load() {
			return nil, errors.New("disk full")
		}
		return 2 * tk.TaskID, nil
	})
	runWorker(t, w)
	job := b.submit(t, 8, warren.Policy{MaxRetries: 1})
	require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID))

	broken.Store(false)
	q := b.dlq(t)
	ctx := context.Background()
	rep, err := q.Replay(ctx, deadletters.Filter{JobID: job.ID})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	b.expectDoubled(t, job.ID, 8)
	left, err := q.List(ctx, deadletters.Filter{JobID: job.ID})
	require.NoError(t, err)
	require.Empty(t, left, "the replayed dead letter left the queue")
}

func allTasks(t *testing.T, s store.Store, jobID string) []warren.TaskRecord {
	t.Helper()
	var out []warren.TaskRecord
	cursor := ""
	for {
		page, next, err := s.ListTasks(context.Background(), jobID, store.ListTasksOpts{Limit: 1000, Cursor: cursor})
		require.NoError(t, err)
		out = append(out, page...)
		if next == "" {
			return out
		}
		cursor = next
	}
}
