package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// closeBundle is a store and an aggregator over it, for CloseJob.
type closeBundle struct {
	ctx   context.Context
	store store.Store
	agg   *aggregator.Aggregator
}

// setupClose opens a store, lets wrap wrap it (nil: as it is), and makes
// an aggregator over the wrapped store with cfg's hooks and reducers.
func setupClose(t *testing.T, wrap func(store.Store) store.Store, cfg aggregator.Config) *closeBundle {
	t.Helper()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, nil)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var s store.Store = st
	if wrap != nil {
		s = wrap(st)
	}
	cfg.Store, cfg.Conn, cfg.Names = s, conn, names
	a, err := aggregator.New(cfg)
	require.NoError(t, err)
	return &closeBundle{ctx: ctx, store: st, agg: a}
}

// readyJob creates a job of n tasks with policy p, publishes them, and
// records the outcomes: task ids in failed fail, the others complete with
// their id as result.
func (b *closeBundle) readyJob(t *testing.T, n int, p warren.Policy, failed ...int64) string {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
				return
			}
		}
	}
	job, _, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", Policy: p}, tasks)
	require.NoError(t, err)
	_, err = b.store.RelayBatch(b.ctx, n, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	now := time.Now().UTC()
	outcomes := make([]store.Outcome, 0, n)
	for i := int64(1); i <= int64(n); i++ {
		o := store.Outcome{JobID: job.ID, TaskID: i, State: warren.TaskCompleted, Result: json.RawMessage(fmt.Sprint(i)), FinishedAt: &now}
		for _, f := range failed {
			if f == i {
				o.State, o.Result, o.Error = warren.TaskFailed, nil, "boom"
			}
		}
		outcomes = append(outcomes, o)
	}
	_, err = b.store.ApplyOutcomes(b.ctx, outcomes)
	require.NoError(t, err)
	return job.ID
}

// finishRace is a store on which something happens, once, between
// CloseJob's read of a job and its FinishJob: between runs when the first
// FinishJob is called, before it reaches the store.
type finishRace struct {
	store.Store
	once    sync.Once
	between func()
}

func (s *finishRace) FinishJob(ctx context.Context, id string, version int64, state warren.JobState, result []byte, msg string) (bool, error) {
	s.once.Do(s.between)
	return s.Store.FinishJob(ctx, id, version, state, result, msg)
}

// A replay or a redrive that reopens a task between CloseJob's read and
// its finish is not undone: the job stays open with the task runnable,
// and CloseJob, starting over, finds it no longer ready.
func TestCloseJobDoesNotUndoAConcurrentReopen(t *testing.T) {
	t.Parallel()
	tolerant := warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 50}
	for _, tc := range []struct {
		name   string
		policy warren.Policy
		// reopen reopens task 2 of job id, as another process would.
		reopen func(t *testing.T, s store.Store, id string)
		// want is task 2's state after it.
		want warren.TaskState
	}{{
		// A completed-with-failures job: the close reduces, and a replay
		// of the failed task comes in meanwhile.
		name:   "Replay",
		policy: tolerant,
		reopen: func(t *testing.T, s store.Store, id string) {
			_, ok, err := s.ReopenTask(context.Background(), id, 2)
			require.NoError(t, err)
			require.True(t, ok)
		},
		want: warren.TaskQueued,
	}, {
		// Another server closes the job and an operator redrives it.
		name:   "Redrive",
		policy: warren.Policy{Reduce: "collect"},
		reopen: func(t *testing.T, s store.Store, id string) {
			ctx := context.Background()
			job, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			ok, err := s.FinishJob(ctx, id, job.Version, warren.JobFailed, nil, "1 of 2 tasks failed")
			require.NoError(t, err)
			require.True(t, ok)
			_, n, err := s.RedriveJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		},
		want: warren.TaskPending,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			race := &finishRace{}
			var closes []warren.JobState
			b := setupClose(t, func(s store.Store) store.Store { race.Store = s; return race },
				aggregator.Config{Hooks: aggregator.Hooks{OnJobClosed: func(_ string, st warren.JobState) { closes = append(closes, st) }}})
			id := b.readyJob(t, 2, tc.policy, 2)
			race.between = func() { tc.reopen(t, b.store, id) }

			require.NoError(t, b.agg.CloseJob(b.ctx, id))

			job, err := b.store.GetJob(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, warren.JobRunning, job.State, "the reopened job stays open (error %q)", job.Error)
			require.Equal(t, int64(1), job.CompletedTasks)
			require.Zero(t, job.FailedTasks)
			require.Empty(t, closes, "this aggregator closed nothing")
			tasks, _, err := b.store.ListTasks(b.ctx, id, store.ListTasksOpts{})
			require.NoError(t, err)
			require.Equal(t, tc.want, tasks[1].State, "the reopened task stays runnable")
			_, err = b.store.JobResult(b.ctx, id)
			require.ErrorIs(t, err, warren.ErrNotFound)
		})
	}
}

// movingStore moves the job (a duplicate-free failed outcome of a task
// that a replay reopened) before every FinishJob, as a job replayed over
// and over would.
type movingStore struct {
	store.Store
	id string
}

func (s *movingStore) FinishJob(ctx context.Context, id string, version int64, state warren.JobState, result []byte, msg string) (bool, error) {
	if _, _, err := s.ReopenTask(ctx, s.id, 2); err != nil {
		return false, err
	}
	now := time.Now().UTC()
	if _, err := s.ApplyOutcomes(ctx, []store.Outcome{{JobID: s.id, TaskID: 2, State: warren.TaskFailed, Error: "again", FinishedAt: &now}}); err != nil {
		return false, err
	}
	return s.Store.FinishJob(ctx, id, version, state, result, msg)
}

// A job that changes under every close is left open for the scan, with an
// error that says so, after a bounded number of tries.
func TestCloseJobGivesUpOnAJobThatKeepsMoving(t *testing.T) {
	t.Parallel()
	moving := &movingStore{}
	b := setupClose(t, func(s store.Store) store.Store { moving.Store = s; return moving }, aggregator.Config{})
	moving.id = b.readyJob(t, 2, warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 50}, 2)

	err := b.agg.CloseJob(b.ctx, moving.id)
	require.ErrorContains(t, err, "changed under each of")
	job, err := b.store.GetJob(b.ctx, moving.id)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, job.State)
	require.True(t, store.ReadyToClose(job), "the scan closes it once it stops moving")

	require.NoError(t, setupCloseOn(t, b.store).CloseJob(b.ctx, moving.id))
	job, err = b.store.GetJob(b.ctx, moving.id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State)
}

// setupCloseOn is an aggregator over st as it is.
func setupCloseOn(t *testing.T, st store.Store) *aggregator.Aggregator {
	t.Helper()
	names, conn := amqptest.Topology(t, nil)
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names})
	require.NoError(t, err)
	return a
}

// flakyScan is a store whose ScanResults fails, while down is set, after
// feeding the first task: a connection reset in the middle of a scan.
type flakyScan struct {
	store.Store
	down bool
}

var errConnReset = errors.New("read tcp 127.0.0.1:5432: connection reset by peer")

func (s *flakyScan) ScanResults(ctx context.Context, id string, fn func(int64, warren.TaskState, json.RawMessage) error) error {
	if !s.down {
		return s.Store.ScanResults(ctx, id, fn)
	}
	first := true
	err := s.Store.ScanResults(ctx, id, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
		if !first {
			return errConnReset
		}
		first = false
		return fn(taskID, state, result)
	})
	if errors.Is(err, errConnReset) {
		return fmt.Errorf("postgres: scan results of job %q: %w", id, err)
	}
	return err
}

// A store error while the results are scanned leaves the job open and
// CloseJob says so; the next close, with the store back, completes it.
func TestCloseJobRetriesAStoreErrorWhileScanning(t *testing.T) {
	t.Parallel()
	flaky := &flakyScan{down: true}
	b := setupClose(t, func(s store.Store) store.Store { flaky.Store = s; return flaky }, aggregator.Config{})
	id := b.readyJob(t, 3, warren.Policy{Reduce: "collect"})

	err := b.agg.CloseJob(b.ctx, id)
	require.ErrorIs(t, err, errConnReset)
	job, err := b.store.GetJob(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, job.State, "a store error never fails the job (error %q)", job.Error)

	flaky.down = false
	require.NoError(t, b.agg.CloseJob(b.ctx, id))
	job, err = b.store.GetJob(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "error %q", job.Error)
	result, err := b.store.JobResult(b.ctx, id)
	require.NoError(t, err)
	require.JSONEq(t, `[1,2,3]`, string(result))
}

// A job whose reducer this server does not know stays open, logged and
// counted in warren_reduce_unknown_total{reducer} once (not at every
// close the scan tries); a server with the reducer closes it.
func TestCloseJobLeavesAnUnknownReducerOpen(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var unknown []string
	b := setupClose(t, nil, aggregator.Config{Hooks: aggregator.NewMetrics(reg).Hooks(aggregator.Hooks{
		OnUnknownReducer: func(id, reducer string) { unknown = append(unknown, id+" "+reducer) },
	})})
	id := b.readyJob(t, 2, warren.Policy{Reduce: "count"})

	require.NoError(t, b.agg.CloseJob(b.ctx, id))
	require.NoError(t, b.agg.CloseJob(b.ctx, id))
	job, err := b.store.GetJob(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, job.State, "error %q", job.Error)
	require.Equal(t, []string{id + " count"}, unknown)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_reduce_unknown_total Jobs ready to close that this server left open because their reducer is not registered on it (each counted once), by reducer.
# TYPE warren_reduce_unknown_total counter
warren_reduce_unknown_total{reducer="count"} 1
`), "warren_reduce_unknown_total"))

	reducers := reduce.NewRegistry()
	require.NoError(t, reducers.Register("count", func() reduce.Reducer { return &countReducer{} }))
	names, conn := amqptest.Topology(t, nil)
	a, err := aggregator.New(aggregator.Config{Store: b.store, Conn: conn, Names: names, Reducers: reducers})
	require.NoError(t, err)
	require.NoError(t, a.CloseJob(b.ctx, id))
	job, err = b.store.GetJob(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "error %q", job.Error)
}

// Results the reducer refuses fail the job, with the reducer's reason.
func TestCloseJobFailsAJobWhoseResultsTheReducerRefuses(t *testing.T) {
	t.Parallel()
	b := setupClose(t, nil, aggregator.Config{})
	id := b.readyJob(t, 2, warren.Policy{Reduce: "concat"})

	require.NoError(t, b.agg.CloseJob(b.ctx, id))
	job, err := b.store.GetJob(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobFailed, job.State)
	require.Contains(t, job.Error, `reduce "concat": task 1`)
}

// A reduced result over the configured limit fails its job, with an error
// that says so, instead of being stored (or retried) whole.
func TestCloseJobFailsAJobWhoseResultIsTooLarge(t *testing.T) {
	t.Parallel()
	b := setupClose(t, nil, aggregator.Config{MaxResultBytes: 8})
	small := b.readyJob(t, 2, warren.Policy{Reduce: "collect"}) // [0,1]: 5 bytes
	large := b.readyJob(t, 5, warren.Policy{Reduce: "collect"}) // [0,1,2,3,4]: 11 bytes

	require.NoError(t, b.agg.CloseJob(b.ctx, small))
	require.NoError(t, b.agg.CloseJob(b.ctx, large))
	job, err := b.store.GetJob(b.ctx, small)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "error %q", job.Error)
	job, err = b.store.GetJob(b.ctx, large)
	require.NoError(t, err)
	require.Equal(t, warren.JobFailed, job.State)
	require.Equal(t, "the reduced result is 11 bytes, over the limit of 8 bytes", job.Error)
	_, err = b.store.JobResult(b.ctx, large)
	require.ErrorIs(t, err, warren.ErrNotFound, "nothing stored")
}
