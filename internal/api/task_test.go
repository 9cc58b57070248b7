package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/store"
)

// One task whole: its payload, its result, every attempt the store kept,
// and its dead letter.
func TestGetTask(t *testing.T) {
	t.Parallel()
	failedAt := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	dl := &fakeDeadLetters{}
	b := setup(t, withDeadLetters(dl, options{}))
	id := b.mustSubmit(t, `{"type":"echo","max_retries":1,"tasks":[{"x":1},{"x":2},{"x":3}]}`)
	dl.msgs = []deadletters.Message{
		{JobID: id, TaskID: 2, MessageID: id + ":2", Reason: "retries_exhausted", Error: "ValueError: no", Attempts: 2, Time: failedAt},
		{JobID: "other", TaskID: 2, MessageID: "other:2", Reason: "permanent"},
	}
	publishAll(t, b.store)
	started := time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
	_, err := b.store.ApplyOutcomes(context.Background(), []store.Outcome{
		{JobID: id, TaskID: 1, State: warren.TaskCompleted, Result: []byte(`{"y":1}`), Attempts: 1, Worker: "w1", StartedAt: &started},
		{JobID: id, TaskID: 2, State: warren.TaskFailed, Retry: true, Error: "ValueError: no", Traceback: "Traceback (most recent call last):\n  ...\nValueError: no", Attempts: 1, Worker: "w1", StartedAt: &started},
	})
	require.NoError(t, err)
	_, err = b.store.ApplyOutcomes(context.Background(), []store.Outcome{
		{JobID: id, TaskID: 2, State: warren.TaskFailed, Error: "ValueError: no", Traceback: "Traceback 2", Attempts: 2, Worker: "w2"},
	})
	require.NoError(t, err)

	v := b.get(t, "/v1/jobs/"+id+"/tasks/1").json(t)
	require.Equal(t, id, v["job_id"])
	require.Equal(t, "completed", v["state"])
	require.Equal(t, map[string]any{"x": 1.0}, v["payload"])
	require.Equal(t, map[string]any{"y": 1.0}, v["result"])
	require.Equal(t, 1.0, v["generation"])
	require.Nil(t, v["dead_letter"], "only a failed task has one")
	history := v["attempt_history"].([]any)
	require.Len(t, history, 1)
	a := history[0].(map[string]any)
	require.Equal(t, "completed", a["outcome"])
	require.Equal(t, "w1", a["worker"])
	requireTime(t, started, a["started_at"])

	v = b.get(t, "/v1/jobs/"+id+"/tasks/2").json(t)
	require.Equal(t, "failed", v["state"])
	history = v["attempt_history"].([]any)
	require.Len(t, history, 2)
	first, last := history[0].(map[string]any), history[1].(map[string]any)
	require.Equal(t, "retried", first["outcome"])
	require.Equal(t, 1.0, first["attempt"])
	require.Contains(t, first["traceback"], "Traceback (most recent call last)")
	require.Equal(t, "failed", last["outcome"])
	require.Equal(t, 2.0, last["attempt"])
	require.Equal(t, "w2", last["worker"])
	require.Equal(t, "Traceback 2", last["traceback"])
	require.Nil(t, last["started_at"])
	require.Equal(t, map[string]any{
		"message_id": id + ":2", "reason": "retries_exhausted", "error": "ValueError: no", "attempts": 2.0,
		"time": failedAt.Format(time.RFC3339),
	}, v["dead_letter"])

	v = b.get(t, "/v1/jobs/"+id+"/tasks/3").json(t)
	require.Equal(t, "queued", v["state"])
	require.Empty(t, v["attempt_history"])
	require.Nil(t, v["result"])

	requireError(t, b.get(t, "/v1/jobs/"+id+"/tasks/4"), http.StatusNotFound, "not_found")
	requireError(t, b.get(t, "/v1/jobs/no-such-job/tasks/1"), http.StatusNotFound, "not_found")
	for _, bad := range []string{"x", "-1", "1.5", "99999999999999999999"} {
		resp := b.get(t, "/v1/jobs/"+id+"/tasks/"+bad)
		requireError(t, resp, http.StatusBadRequest, "invalid_parameter")
		require.Contains(t, errorMessage(t, resp), "task_id")
	}

	// A dead-letter queue that does not answer leaves the rest to see.
	dl.err = errors.New("broker down")
	v = b.get(t, "/v1/jobs/"+id+"/tasks/2").json(t)
	require.Nil(t, v["dead_letter"])
	require.Len(t, v["attempt_history"], 2)
}

// A store that fails after the task was found is a 500, as any.
func TestGetTaskAttemptsFail(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{wrap: func(s store.Store) store.Store {
		return &faultyStore{Store: s, fail: map[string]bool{"TaskAttempts": true}}
	}})
	job := createJob(t, b.store, 1)
	resp := b.get(t, "/v1/jobs/"+job.ID+"/tasks/1")
	requireError(t, resp, http.StatusInternalServerError, "internal")
	require.NotContains(t, string(resp.body), "secret")
}
