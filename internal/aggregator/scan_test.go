package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// readyJob creates a one-task job reducing with reducer and records its
// task's result, so that it is ready to close.
func readyJob(t *testing.T, st store.Store, reducer string) string {
	t.Helper()
	ctx := context.Background()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: reducer}},
		func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
	require.NoError(t, err)
	_, err = st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	rep, err := st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, rep.ReadyToClose)
	return job.ID
}

// Jobs this server cannot close (their reducer is not registered here)
// must not hide, from the periodic scan, the jobs it can close: more of
// them than one scan's window used to fill it for good.
func TestScanLooksPastJobsItCannotClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "scan.db"))
	require.NoError(t, err)
	defer st.Close()
	const unknown = scanWindow + 20
	for range unknown {
		readyJob(t, st, "not-on-this-server")
	}
	closable := readyJob(t, st, "collect")

	var unknownSeen int
	a := &Aggregator{cfg: Config{Store: st, Reducers: reduce.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Hooks: Hooks{OnUnknownReducer: func(string, string) { unknownSeen++ }}}.withDefaults()}
	for range 3 {
		a.scan(ctx)
	}
	job, err := st.GetJob(ctx, closable)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "the job the scan can close is closed")
	require.Equal(t, unknown, unknownSeen, fmt.Sprintf("each job without its reducer is reported once, not at every scan (%d)", unknownSeen))
}
