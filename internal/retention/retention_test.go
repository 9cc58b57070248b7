package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/retention"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
)

// clock is a settable clock, which starts at the test's start.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.Set(time.Now())
	return c
}

func (c *clock) Now() time.Time  { return time.Unix(0, c.now.Load()) }
func (c *clock) Set(t time.Time) { c.now.Store(t.UnixNano()) }

// stores opens a fresh store of each kind on clock c, closed when the
// test ends.
var stores = map[string]func(t *testing.T, c *clock) store.Store{
	"sqlite": func(t *testing.T, c *clock) store.Store {
		s, err := sqlite.OpenWith(t.Context(), filepath.Join(t.TempDir(), "warren.db"), sqlite.Options{Clock: c.Now})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
	"postgres": func(t *testing.T, c *clock) store.Store {
		s, err := postgres.OpenWith(t.Context(), pgtest.URL(t), postgres.Options{Clock: c.Now})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

// payloads yields n payloads.
func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for range n {
			if !yield(json.RawMessage(`{}`), nil) {
				return
			}
		}
	}
}

// closedJob creates a job of n tasks with policy p and cancels it, which
// closes it.
func closedJob(t *testing.T, s store.Store, n int, p warren.Policy) warren.Job {
	t.Helper()
	job, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t", Policy: p}, payloads(n))
	require.NoError(t, err)
	job, err = s.CancelJob(t.Context(), job.ID)
	require.NoError(t, err)
	return job
}

// counted records what the sweeper's hooks report.
type counted struct {
	mu      sync.Mutex
	deleted []int
	purged  []int
}

func (c *counted) config(s store.Store) retention.Config {
	return retention.Config{
		Store: s, Retention: time.Hour, JobBatch: 3, TaskBatch: 4, Pause: time.Millisecond,
		OnDeleted: func(n int) { c.mu.Lock(); c.deleted = append(c.deleted, n); c.mu.Unlock() },
		OnPurged:  func(n int) { c.mu.Lock(); c.purged = append(c.purged, n); c.mu.Unlock() },
		Logger:    slog.New(slog.DiscardHandler),
	}
}

// A sweep deletes every job expired at its start, a batch of jobs per
// transaction, and purges their tasks a batch per transaction; open jobs,
// jobs not expired yet and jobs kept forever stay.
func TestSweepDeletesExpiredJobsInBatches(t *testing.T) {
	t.Parallel()
	for kind, open := range stores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			s := open(t, clk)
			var expired []warren.Job
			for range 7 {
				expired = append(expired, closedJob(t, s, 5, warren.Policy{}))
			}
			last := *expired[6].FinishedAt
			own := closedJob(t, s, 2, warren.Policy{Retention: 3 * time.Hour})
			openJob, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t", Policy: warren.Policy{Retention: time.Second}}, payloads(1))
			require.NoError(t, err)

			var c counted
			clk.Set(last.Add(time.Hour))
			sw, err := retention.New(c.config(s))
			require.NoError(t, err)
			r, err := sw.RunOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, 7, r.Jobs)
			require.Equal(t, 35, r.Tasks)
			require.Equal(t, []int{3, 3, 1}, c.deleted, "jobs per transaction")
			sum := 0
			for _, n := range c.purged {
				require.LessOrEqual(t, n, 4, "tasks per transaction")
				sum += n
			}
			require.Equal(t, 35, sum)
			for _, job := range expired {
				_, err := s.GetJob(t.Context(), job.ID)
				require.ErrorIs(t, err, warren.ErrNotFound)
			}
			for _, id := range []string{own.ID, openJob.ID} {
				_, err := s.GetJob(t.Context(), id)
				require.NoError(t, err, "job %s stays", id)
			}

			r, err = sw.RunOnce(t.Context())
			require.NoError(t, err)
			require.Zero(t, r.Jobs+r.Tasks, "nothing is left to delete")
		})
	}
}

// Without a default retention, only jobs with their own are deleted.
func TestSweepWithoutDefaultKeepsJobsForever(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := stores["sqlite"](t, clk)
	kept := closedJob(t, s, 1, warren.Policy{})
	own := closedJob(t, s, 1, warren.Policy{Retention: time.Minute})
	var c counted
	clk.Set(own.FinishedAt.Add(warren.MaxRetention))
	cfg := c.config(s)
	cfg.Retention = -1
	sw, err := retention.New(cfg)
	require.NoError(t, err)
	r, err := sw.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, retention.Report{Jobs: 1, Tasks: 1}, retention.Report{Jobs: r.Jobs, Tasks: r.Tasks})
	_, err = s.GetJob(t.Context(), kept.ID)
	require.NoError(t, err)
}

// Run sweeps at once and whenever woken: a job deleted through the store
// (as DELETE /v1/jobs/{id} does) has its tasks purged by the next sweep.
// Run returns when its context is done.
func TestRunSweepsWhenWoken(t *testing.T) {
	t.Parallel()
	s := stores["sqlite"](t, newClock())
	job := closedJob(t, s, 6, warren.Policy{})
	sweeps := make(chan retention.Report, 10)
	var c counted
	cfg := c.config(s)
	cfg.Interval = time.Hour
	cfg.OnSweep = func(r retention.Report) { sweeps <- r }
	sw, err := retention.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()

	require.Zero(t, waitSweep(t, sweeps).Tasks, "the first sweep finds nothing")
	require.NoError(t, s.DeleteJob(t.Context(), job.ID))
	sw.Wake()
	require.Equal(t, 6, waitSweep(t, sweeps).Tasks)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was done")
	}
}

// waitSweep returns the next sweep's report.
func waitSweep(t *testing.T, sweeps <-chan retention.Report) retention.Report {
	t.Helper()
	select {
	case r := <-sweeps:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep within 10s")
		return retention.Report{}
	}
}

// failingStore fails DeleteExpiredJobs.
type failingStore struct{ store.Store }

var errStore = errors.New("store down")

func (failingStore) DeleteExpiredJobs(context.Context, store.Expiry, int) (int, error) {
	return 0, errStore
}

// A sweep that fails returns the store's error and reports no sweep; a
// cancelled one returns the context's error.
func TestSweepErrors(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := stores["sqlite"](t, clk)
	swept := false
	cfg := retention.Config{Store: failingStore{s}, Logger: slog.New(slog.DiscardHandler), OnSweep: func(retention.Report) { swept = true }}
	sw, err := retention.New(cfg)
	require.NoError(t, err)
	_, err = sw.RunOnce(t.Context())
	require.ErrorIs(t, err, errStore)
	require.False(t, swept)

	closedJob(t, s, 1, warren.Policy{Retention: time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	clk.Set(clk.Now().Add(time.Hour))
	cfg = retention.Config{Store: s, Pause: time.Hour,
		OnDeleted: func(int) { cancel() }, Logger: slog.New(slog.DiscardHandler)}
	sw, err = retention.New(cfg)
	require.NoError(t, err)
	r, err := sw.RunOnce(ctx)
	require.ErrorIs(t, err, context.Canceled, "the pause ends with the context")
	require.Equal(t, 1, r.Jobs)
}

func TestNewRefusesABadConfig(t *testing.T) {
	t.Parallel()
	_, err := retention.New(retention.Config{})
	require.ErrorContains(t, err, "Config.Store")
	_, err = retention.New(retention.Config{Store: stores["sqlite"](t, newClock()), Pause: -1})
	require.ErrorContains(t, err, "must be >= 0")
}
