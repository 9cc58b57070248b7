package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

type testBundle struct {
	store  store.Store
	client *client.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	h, err := api.New(api.Config{Store: s, Tokens: []api.Token{{Value: "tok", Scopes: []api.Scope{api.ScopeAdmin}}}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBundle{store: s, client: client.New(srv.URL, client.WithToken("tok"))}
}

// finish runs a job's tasks to completion through the store, as the relay
// and the aggregator would.
func (b *testBundle) finish(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	var outcomes []store.Outcome
	_, err := b.store.RelayBatch(ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
			outcomes = append(outcomes, store.Outcome{JobID: id, TaskID: tk.TaskID, State: warren.TaskCompleted, Result: tk.Payload, Attempts: 1})
		}
		return refs, nil
	})
	require.NoError(t, err)
	_, err = b.store.ApplyOutcomes(ctx, outcomes)
	require.NoError(t, err)
	result, err := json.Marshal(outcomes[len(outcomes)-1].TaskID)
	require.NoError(t, err)
	job, err := b.store.GetJob(ctx, id)
	require.NoError(t, err)
	ok, err := b.store.FinishJob(ctx, id, job.Version, warren.JobCompleted, result, "")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestSubmitGetWaitResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	retries := 1
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Reduce: "collect", MaxRetries: &retries,
		Tasks: []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`2`)}, Metadata: json.RawMessage(`{"k":"v"}`)})
	require.NoError(t, err)
	require.Equal(t, client.JobPending, sub.State)
	require.Equal(t, "/v1/jobs/"+sub.ID, sub.StatusURL)

	job, err := b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), job.ExpectedTasks)
	require.Equal(t, 1, job.MaxRetries)
	require.JSONEq(t, `{"k":"v"}`, string(job.Metadata))
	require.False(t, job.Terminal())

	_, err = b.client.Result(ctx, sub.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)

	b.finish(t, sub.ID)
	var seen []client.JobState
	final, err := b.client.Wait(ctx, sub.ID, &client.WaitOpts{OnProgress: func(j client.Job) { seen = append(seen, j.State) }})
	require.NoError(t, err)
	require.Equal(t, client.JobCompleted, final.State)
	require.Equal(t, []client.JobState{client.JobCompleted}, seen)
	result, err := b.client.Result(ctx, sub.ID)
	require.NoError(t, err)
	require.JSONEq(t, `2`, string(result))

	tasks, err := b.client.Tasks(ctx, sub.ID, &client.ListOpts{Limit: 1})
	require.NoError(t, err)
	require.Len(t, tasks.Tasks, 1)
	require.NotNil(t, tasks.NextCursor)
	more, err := b.client.Tasks(ctx, sub.ID, &client.ListOpts{Limit: 1, Cursor: *tasks.NextCursor})
	require.NoError(t, err)
	require.Equal(t, int64(2), more.Tasks[0].TaskID)
	require.Equal(t, client.TaskCompleted, more.Tasks[0].State)
	require.JSONEq(t, `2`, string(more.Tasks[0].Result))
}

func TestWebhookAndDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := &client.Webhook{URL: "https://93.184.215.14/hooks/warren", Secret: "s3cret"}
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`)}, Webhook: hook})
	require.NoError(t, err)
	job, err := b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, &client.Webhook{URL: hook.URL}, job.Webhook, "the URL, never the secret")
	deliveries, err := b.client.Deliveries(ctx, sub.ID)
	require.NoError(t, err)
	require.Empty(t, deliveries)
	_, err = b.client.Cancel(ctx, sub.ID)
	require.NoError(t, err)
	deliveries, err = b.client.Deliveries(ctx, sub.ID)
	require.NoError(t, err)
	require.Len(t, deliveries, 1)
	require.Equal(t, "job.closed", deliveries[0].Event)
	require.Equal(t, "pending", deliveries[0].State)
	require.Nil(t, deliveries[0].LastStatus)

	_, err = b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`)},
		Webhook: &client.Webhook{URL: "http://127.0.0.1/hook", Secret: "s"}})
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
}

func TestSubmitNDJSONAndIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var lines strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&lines, "{\"i\":%d}\n", i)
	}
	spec := client.JobSpec{Type: "echo", IdempotencyKey: "k-1"}
	first, err := b.client.SubmitNDJSON(ctx, spec, strings.NewReader(lines.String()))
	require.NoError(t, err)
	again, err := b.client.SubmitNDJSON(ctx, spec, strings.NewReader(lines.String()))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	list, err := b.client.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list.Jobs, 1)
	require.Equal(t, int64(300), list.Jobs[0].ExpectedTasks)

	_, err = b.client.SubmitNDJSON(ctx, client.JobSpec{Type: "x", Tasks: []json.RawMessage{json.RawMessage(`1`)}}, strings.NewReader(""))
	require.Error(t, err)
}

func TestCancelAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)
	job, err := b.client.Cancel(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.JobCancelled, job.State)
	_, err = b.client.Cancel(ctx, sub.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	require.Equal(t, "conflict", apiErr.Code)

	_, err = b.client.Get(ctx, "nope")
	require.True(t, client.IsNotFound(err))
	_, err = b.client.Wait(ctx, "nope", nil)
	require.True(t, client.IsNotFound(err), "a 404 ends the wait")

	_, err = b.client.Submit(ctx, client.JobSpec{Type: "echo"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status)

	_, err = client.New("http://127.0.0.1:1").Get(ctx, "x")
	require.ErrorContains(t, err, "cannot reach the warren server")
}

func TestJobStateWireFormAndTerminal(t *testing.T) {
	t.Parallel()
	var job client.Job
	require.NoError(t, json.Unmarshal([]byte(`{"id":"j","state":"failed"}`), &job))
	require.Equal(t, client.JobFailed, job.State)
	require.True(t, job.State == "failed", "a state compares with an untyped string constant")
	out, err := json.Marshal(client.Submitted{ID: "j", State: client.JobPending})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"j","state":"pending","status_url":""}`, string(out), "the wire form is the plain string")

	terminal := map[client.JobState]bool{
		client.JobPending: false, client.JobRunning: false,
		client.JobCompleted: true, client.JobFailed: true, client.JobCancelled: true,
		"paused": false, // a state this client does not know is open
	}
	for state, want := range terminal {
		require.Equal(t, want, state.Terminal(), "JobState(%q).Terminal()", state)
		require.Equal(t, want, client.Job{State: state}.Terminal(), "Job{State: %q}.Terminal()", state)
	}
}

func TestTaskStateWireFormAndTerminal(t *testing.T) {
	t.Parallel()
	var list client.TaskList
	require.NoError(t, json.Unmarshal([]byte(`{"tasks":[{"task_id":1,"state":"queued"},{"task_id":2,"state":"cancelled"}]}`), &list))
	require.Equal(t, []client.TaskState{client.TaskQueued, client.TaskCancelled},
		[]client.TaskState{list.Tasks[0].State, list.Tasks[1].State})
	out, err := json.Marshal(client.Task{TaskID: 1, State: client.TaskFailed})
	require.NoError(t, err)
	require.Contains(t, string(out), `"state":"failed"`, "the wire form is the plain string")

	terminal := map[client.TaskState]bool{
		client.TaskPending: false, client.TaskQueued: false,
		client.TaskCompleted: true, client.TaskFailed: true, client.TaskCancelled: true,
	}
	for state, want := range terminal {
		require.Equal(t, want, state.Terminal(), "TaskState(%q).Terminal()", state)
	}
}

// A job's retention goes with the submission and comes back with the
// job, with its expiry once it closed; Delete deletes a closed job and
// refuses an open one.
func TestRetentionAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Retention: 3600, Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)
	job, err := b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.NotNil(t, job.Retention)
	require.Equal(t, 3600.0, *job.Retention)
	require.Nil(t, job.ExpiresAt, "an open job does not expire")

	err = b.client.Delete(ctx, sub.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	require.Contains(t, apiErr.Message, "cancel it first")

	b.finish(t, sub.ID)
	job, err = b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.NotNil(t, job.ExpiresAt)
	require.Equal(t, job.FinishedAt.Add(time.Hour), *job.ExpiresAt)

	require.NoError(t, b.client.Delete(ctx, sub.ID))
	_, err = b.client.Get(ctx, sub.ID)
	require.True(t, client.IsNotFound(err))
	require.True(t, client.IsNotFound(b.client.Delete(ctx, sub.ID)), "deleting twice")

	_, err = b.client.Submit(ctx, client.JobSpec{Type: "echo", Retention: 0.5, Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status)
}

func TestListSearches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	one := []json.RawMessage{json.RawMessage(`1`)}
	gpu, err := b.client.Submit(ctx, client.JobSpec{Type: "thumbnail", Queue: "gpu", Metadata: json.RawMessage(`{"order":"A-1017"}`), Tasks: one})
	require.NoError(t, err)
	_, err = b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: one})
	require.NoError(t, err)
	job, err := b.client.Get(ctx, gpu.ID)
	require.NoError(t, err)

	for _, opts := range []client.ListOpts{
		{Search: "a-1017"},
		{Queue: "gpu"},
		{Search: "thumb", Queue: "gpu", CreatedAfter: *job.CreatedAt, CreatedBefore: job.CreatedAt.Add(time.Second)},
	} {
		list, err := b.client.List(ctx, &opts)
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1, "%+v", opts)
		require.Equal(t, gpu.ID, list.Jobs[0].ID)
	}
	list, err := b.client.List(ctx, &client.ListOpts{Search: "thumb", CreatedBefore: *job.CreatedAt})
	require.NoError(t, err)
	require.Empty(t, list.Jobs, "created_before is exclusive")

	_, err = b.client.List(ctx, &client.ListOpts{Search: "ab"})
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
}
