package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// fakeDeadLetters stands in for the server's dead-letter queue and
// records the filters it is called with.
type fakeDeadLetters struct {
	msgs   []deadletters.Message
	report deadletters.Report
	purged int
	err    error

	mu      sync.Mutex
	filters []deadletters.Filter
}

func (f *fakeDeadLetters) record(filter deadletters.Filter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, filter)
}

func (f *fakeDeadLetters) recorded() []deadletters.Filter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]deadletters.Filter(nil), f.filters...)
}

func (f *fakeDeadLetters) List(_ context.Context, filter deadletters.Filter) ([]deadletters.Message, error) {
	f.record(filter)
	return f.msgs, f.err
}

func (f *fakeDeadLetters) Replay(_ context.Context, filter deadletters.Filter) (deadletters.Report, error) {
	f.record(filter)
	return f.report, f.err
}

func (f *fakeDeadLetters) Purge(_ context.Context, filter deadletters.Filter) (int, error) {
	f.record(filter)
	return f.purged, f.err
}

// setupFailures is setup with dl as the server's dead-letter queue.
func setupFailures(t *testing.T, dl api.DeadLetters) *testBundle {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	h, err := api.New(api.Config{Store: s, DeadLetters: dl, Tokens: []api.Token{{Value: "tok", Scopes: []api.Scope{api.ScopeAdmin}}}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBundle{store: s, client: client.New(srv.URL, client.WithToken("tok"))}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, nil)
	ctx := context.Background()
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}})
	require.NoError(t, err)

	_, err = b.client.Redrive(ctx, sub.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	require.Contains(t, apiErr.Message, "pending")

	// Task 1 completes, task 2 fails, the job closes as failed.
	_, err = b.store.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	_, err = b.store.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: sub.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`), Attempts: 1},
		{JobID: sub.ID, TaskID: 2, State: warren.TaskFailed, Error: "boom", Attempts: 4},
	})
	require.NoError(t, err)
	stored, err := b.store.GetJob(ctx, sub.ID)
	require.NoError(t, err)
	closed, err := b.store.FinishJob(ctx, sub.ID, stored.Version, warren.JobFailed, nil, "1 task failed")
	require.NoError(t, err)
	require.True(t, closed)

	job, err := b.client.Redrive(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, sub.ID, job.ID)
	require.Equal(t, client.JobRunning, job.State)
	require.Equal(t, int64(1), job.PendingTasks)
	require.Zero(t, job.FailedTasks)
	require.False(t, job.Terminal())

	_, err = b.client.Redrive(ctx, "no-such-job")
	require.True(t, client.IsNotFound(err))
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fake := &fakeDeadLetters{
		msgs: []deadletters.Message{
			{JobID: "j1", TaskID: 2, MessageID: "j1:2", RoutingKey: "task.failed", Reason: "permanent", Error: "bad input", Attempts: 1, Time: at},
			{RoutingKey: "task.failed", Reason: "malformed", Error: "not a task", Attempts: 1},
			{JobID: "j2", TaskID: 1, MessageID: "j2:1", RoutingKey: "task.failed", Reason: "permanent", Error: "x", Attempts: 1, Time: at,
				Settled: deadletters.SettledResent},
		},
		report: deadletters.Report{Replayed: 2, Skipped: 1},
		purged: 4,
	}
	b := setupFailures(t, fake)
	ctx := context.Background()

	msgs, err := b.client.DeadLetters(ctx, "", 0)
	require.NoError(t, err)
	require.Equal(t, []client.DeadLetter{
		{JobID: "j1", TaskID: 2, MessageID: "j1:2", RoutingKey: "task.failed", Reason: "permanent", Error: "bad input", Attempts: 1, Time: at, Pending: true},
		{RoutingKey: "task.failed", Reason: "malformed", Error: "not a task", Attempts: 1, Pending: true},
		{JobID: "j2", TaskID: 1, MessageID: "j2:1", RoutingKey: "task.failed", Reason: "permanent", Error: "x", Attempts: 1, Time: at, Settled: "resent"},
	}, msgs)
	out, err := json.Marshal(msgs[1])
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"","task_id":0,"message_id":"","routing_key":"task.failed","reason":"malformed","error":"not a task","attempts":1,"pending":true}`,
		string(out), "no time: left out")

	_, err = b.client.DeadLetters(ctx, "j 1/x", 3)
	require.NoError(t, err)
	replayed, skipped, err := b.client.ReplayDeadLetters(ctx, "j1", 5)
	require.NoError(t, err)
	require.Equal(t, 2, replayed)
	require.Equal(t, 1, skipped)
	_, _, err = b.client.ReplayDeadLetters(ctx, "", 0)
	require.NoError(t, err)
	purged, err := b.client.PurgeDeadLetters(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, 4, purged)
	_, err = b.client.PurgeDeadLetters(ctx, "")
	require.NoError(t, err)
	_, err = b.client.PendingDeadLetters(ctx, "j1", 2)
	require.NoError(t, err)
	_, err = b.client.PurgeSettledDeadLetters(ctx, "")
	require.NoError(t, err)
	_, err = b.client.PurgeSettledDeadLetters(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, []deadletters.Filter{{}, {JobID: "j 1/x", Limit: 3}, {JobID: "j1", Limit: 5}, {}, {JobID: "j1"}, {},
		{JobID: "j1", Limit: 2, Pending: true}, {Settled: true}, {JobID: "j1", Settled: true}}, fake.recorded())

	_, err = b.client.DeadLetters(ctx, "", -1)
	require.ErrorContains(t, err, "limit")
	_, _, err = b.client.ReplayDeadLetters(ctx, "", -1)
	require.ErrorContains(t, err, "limit")
	require.Len(t, fake.recorded(), 9, "a bad limit is refused before any request")
}

func TestDeadLetterErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFailures(t, &fakeDeadLetters{err: errors.New("channel closed"), report: deadletters.Report{Replayed: 1}})
	_, _, err := b.client.ReplayDeadLetters(ctx, "", 0)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusInternalServerError, apiErr.Status)
	require.Contains(t, apiErr.Message, "after replaying 1")

	_, err = setupFailures(t, nil).client.DeadLetters(ctx, "", 0)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
	require.Equal(t, "unavailable", apiErr.Code)
}
