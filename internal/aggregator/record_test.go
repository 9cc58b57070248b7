package aggregator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// fakeStore records outcomes in memory. It refuses, every time, a batch
// holding one of the refused tasks; it does not know the unknown tasks;
// it answers its first `down` calls with a transient error.
type fakeStore struct {
	store.Store
	refused, unknown []int64
	down             int
	calls            int
	applied          []int64
}

func (s *fakeStore) ApplyOutcomes(_ context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	s.calls++
	if s.down > 0 {
		s.down--
		return store.ApplyReport{}, fmt.Errorf("fake: %w", io.ErrUnexpectedEOF)
	}
	var r store.ApplyReport
	for _, o := range outcomes {
		if slices.Contains(s.refused, o.TaskID) {
			return store.ApplyReport{}, fmt.Errorf("fake: task %d: %w", o.TaskID, errors.New("refused"))
		}
	}
	for i, o := range outcomes {
		if slices.Contains(s.unknown, o.TaskID) {
			r.Unknown = append(r.Unknown, i)
			continue
		}
		s.applied = append(s.applied, o.TaskID)
		r.Applied++
		if o.TaskID == 7 {
			r.ReadyToClose = append(r.ReadyToClose, o.JobID)
		}
	}
	return r, nil
}

// ApplyOutcomesClosing closes nothing: it is ApplyOutcomes.
func (s *fakeStore) ApplyOutcomesClosing(ctx context.Context, outcomes []store.Outcome, _ store.CloseDecider) (store.ApplyReport, error) {
	return s.ApplyOutcomes(ctx, outcomes)
}

// deliveries returns a batch of one delivery per element of tasks, each
// holding the outcomes of those tasks, and its outcomes (outcome k from
// delivery from[k]).
func deliveries(tasks ...[]int64) ([]item, []store.Outcome, []int) {
	batch := make([]item, len(tasks))
	var (
		outcomes []store.Outcome
		from     []int
	)
	for i, ids := range tasks {
		for _, id := range ids {
			outcomes = append(outcomes, store.Outcome{JobID: "j", TaskID: id, State: warren.TaskCompleted})
			from = append(from, i)
		}
	}
	return batch, outcomes, from
}

func newTestAggregator(st store.Store) *Aggregator {
	return &Aggregator{cfg: Config{Store: st, Logger: slog.New(slog.DiscardHandler)}.withDefaults()}
}

// A batch the store refuses is recorded in parts: everything but the
// outcomes the store refuses alone, whose deliveries are marked invalid
// (a result batch as a whole, its other outcomes recorded), with the
// store's reason; the report covers the whole batch, its indexes those of
// the whole batch.
func TestRecordSetsAsideWhatTheStoreRefuses(t *testing.T) {
	t.Parallel()
	st := &fakeStore{refused: []int64{3, 8}, unknown: []int64{5}}
	a := newTestAggregator(st)
	batch, outcomes, from := deliveries([]int64{1}, []int64{2, 3}, []int64{4}, []int64{5}, []int64{6, 7}, []int64{8}, []int64{9})

	report, err := a.record(context.Background(), batch, outcomes, from)
	require.NoError(t, err)
	var invalid []int
	for i, it := range batch {
		if it.invalid != "" {
			invalid = append(invalid, i)
			require.Contains(t, it.invalid, "refused", "delivery %d", i)
		}
	}
	require.Equal(t, []int{1, 5}, invalid, "the deliveries of tasks 2+3 and 8")
	slices.Sort(st.applied)
	require.Equal(t, []int64{1, 2, 4, 6, 7, 9}, st.applied, "each other outcome once, task 2's too")
	require.Equal(t, 6, report.Applied)
	require.Equal(t, []int{4}, report.Unknown, "task 5's index in the batch")
	require.Equal(t, []string{"j"}, report.ReadyToClose)
	require.LessOrEqual(t, st.calls, 2*len(outcomes)-1, "at most one transaction per node of a binary tree over the outcomes")
}

// A store that does not answer is retried with the whole batch: nothing
// is split or set aside.
func TestRecordRetriesAStoreThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	st := &fakeStore{down: 2}
	a := newTestAggregator(st)
	batch, outcomes, from := deliveries([]int64{1}, []int64{2, 3})

	report, err := a.record(context.Background(), batch, outcomes, from)
	require.NoError(t, err)
	require.Equal(t, 3, report.Applied)
	require.Equal(t, 3, st.calls, "two failures, then the whole batch at once")
	for _, it := range batch {
		require.Empty(t, it.invalid)
	}
}

// A stopping aggregator stops retrying and sets nothing aside: the
// deliveries go back to their queue.
func TestRecordStopsWithItsContext(t *testing.T) {
	t.Parallel()
	st := &fakeStore{down: 1000}
	a := newTestAggregator(st)
	batch, outcomes, from := deliveries([]int64{1}, []int64{2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := a.record(ctx, batch, outcomes, from)
	require.ErrorIs(t, err, context.Canceled)
	for _, it := range batch {
		require.Empty(t, it.invalid)
	}
}

func TestSplitCutsBetweenDeliveries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		from []int
		want int
	}{
		{[]int{0, 1}, 1},
		{[]int{0, 1, 2, 3}, 2},
		{[]int{0, 1, 1, 1}, 1},
		{[]int{0, 0, 0, 1}, 3},
		{[]int{0, 0, 1, 1, 1, 2}, 2},
	} {
		require.Equal(t, tt.want, split(tt.from), "%v", tt.from)
	}
}
