package api_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestGetJob(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			id := b.mustSubmit(t, `{`+fullSpec+`,"tasks":[1,2,3]}`)

			resp := b.get(t, "/v1/jobs/"+id)
			require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
			v := resp.json(t)
			created, err := time.Parse(time.RFC3339, v["created_at"].(string))
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), created, time.Minute)
			delete(v, "created_at")
			require.Equal(t, map[string]any{
				"id": id, "type": "echo", "state": "pending",
				"expected_tasks": 3.0, "completed_tasks": 0.0, "failed_tasks": 0.0, "pending_tasks": 3.0, "spawned_tasks": 0.0,
				"reduce": "sum", "max_retries": 5.0, "tolerated_failures": 2.0, "tolerated_failure_percent": 12.5,
				"fail_fast": true, "task_timeout": 900.0, "batch_size": 16.0, "priority": 30.0, "max_concurrency": 7.0, "queue": "gpu", "retention": 86400.0, "expires_at": nil,
				"metadata": map[string]any{"owner": "ops"}, "started_at": nil, "published_at": nil, "last_finished_at": nil, "finished_at": nil,
				"rate": nil, "result_url": nil, "error": nil,
				"webhook": map[string]any{"url": "https://93.184.215.14/hooks/warren"}, "errors": []any{},
				"then": nil, "next_job": nil, "previous_job": nil, "waiting": nil, "paused": false, "paused_at": nil,
			}, v)
			require.NotContains(t, string(resp.body), fullSpecSecret)

			resp = b.get(t, "/v1/jobs/no-such-job")
			requireError(t, resp, http.StatusNotFound, "not_found")
		})
	}
}

func TestGetJobShowsProgressAndFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[`+repeatJSON("1", 15)+`],"tolerated_failures":20,"tolerated_failure_percent":100}`)
	publishAll(t, b.store)

	var outcomes []store.Outcome
	first := time.Now().Add(-4 * time.Second).UTC()
	for i := int64(1); i <= 12; i++ { // tasks 1-12 fail, 13-15 are still running
		started, finished := first.Add(time.Duration(i)*100*time.Millisecond), first.Add(3*time.Second)
		outcomes = append(outcomes, store.Outcome{JobID: id, TaskID: i, State: warren.TaskFailed, Error: "boom", Attempts: 2, Worker: "w",
			StartedAt: &started, FinishedAt: &finished})
	}
	_, err := b.store.ApplyOutcomes(context.Background(), outcomes)
	require.NoError(t, err)

	v := b.get(t, "/v1/jobs/"+id).json(t)
	require.Equal(t, "running", v["state"])
	require.Equal(t, 12.0, v["failed_tasks"])
	require.Equal(t, 3.0, v["pending_tasks"])
	require.Nil(t, v["metadata"])
	published, err := time.Parse(time.RFC3339, v["published_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), published, time.Minute)
	started, err := time.Parse(time.RFC3339Nano, v["started_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, first.Add(100*time.Millisecond), started, time.Millisecond, "the first task's start")
	// 12 tasks finished 2.9 s after the first start.
	require.InDelta(t, 12/2.9, v["rate"], 0.01, "finished tasks per second to the latest finish")
	errs := v["errors"].([]any)
	require.Len(t, errs, 10, "at most 10 failures are listed")
	require.Equal(t, map[string]any{"task_id": 1.0, "error": "boom"}, errs[0])
	require.Equal(t, 10.0, errs[9].(map[string]any)["task_id"])
}

// TestIDsNoJobCanHave sends ids that are not UTF-8 or hold control
// characters: they are unknown jobs, not store errors.
func TestIDsNoJobCanHave(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			for _, id := range []string{"%00", "a%FFb", "x%0Ay"} {
				requireError(t, b.get(t, "/v1/jobs/"+id), http.StatusNotFound, "not_found")
				requireError(t, b.get(t, "/v1/jobs/"+id+"/tasks"), http.StatusNotFound, "not_found")
				requireError(t, b.get(t, "/v1/jobs/"+id+"/result"), http.StatusNotFound, "not_found")
				requireError(t, b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil), http.StatusNotFound, "not_found")
				requireError(t, b.do(t, http.MethodPost, "/v1/jobs/"+id+"/redrive", nil), http.StatusNotFound, "not_found")
				requireError(t, b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil), http.StatusNotFound, "not_found")
			}
			for _, cursor := range []string{"%00", "%FF", "dDE6eA", "ajE6MToA"} {
				requireError(t, b.get(t, "/v1/jobs?cursor="+cursor), http.StatusBadRequest, "invalid_parameter")
			}
		})
	}
}

func TestGetResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1,2]}`)

	resp := b.get(t, "/v1/jobs/"+id+"/result")
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "pending")

	finish(t, b.store, id, 2, warren.JobCompleted, []byte(`[{"i":1}, {"i":2}]`))
	v := b.get(t, "/v1/jobs/"+id).json(t)
	require.Equal(t, "completed", v["state"])
	require.Equal(t, "/v1/jobs/"+id+"/result", v["result_url"])
	require.NotNil(t, v["finished_at"])
	require.Equal(t, 2.0, v["completed_tasks"])
	require.Equal(t, 0.0, v["pending_tasks"])

	resp = b.get(t, v["result_url"].(string))
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.Equal(t, "application/json", resp.header.Get("Content-Type"))
	require.Equal(t, `[{"i":1}, {"i":2}]`, string(resp.body), "the stored bytes, as they are")

	requireError(t, b.get(t, "/v1/jobs/nope/result"), http.StatusNotFound, "not_found")
}

func TestGetResultOfAClosedJobWithoutOne(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	failed := b.mustSubmit(t, `{"type":"echo","tasks":[1,2]}`)
	finish(t, b.store, failed, 2, warren.JobFailed, nil, 2)
	v := b.get(t, "/v1/jobs/"+failed).json(t)
	require.Equal(t, "failed", v["state"])
	require.Nil(t, v["result_url"])
	require.Equal(t, []any{map[string]any{"task_id": 2.0, "error": "task 2 broke"}}, v["errors"])
	resp := b.get(t, "/v1/jobs/"+failed+"/result")
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "failed")

	cancelled := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+cancelled+"/cancel", nil).status)
	requireError(t, b.get(t, "/v1/jobs/"+cancelled+"/result"), http.StatusConflict, "conflict")

	// Completed, but the store holds no result for it.
	bare := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	finish(t, b.store, bare, 1, warren.JobCompleted, nil)
	require.Nil(t, b.get(t, "/v1/jobs/"+bare).json(t)["result_url"])
	requireError(t, b.get(t, "/v1/jobs/"+bare+"/result"), http.StatusNotFound, "not_found")
}

func TestCancelJob(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			id := b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`)

			resp := b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil)
			require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
			v := resp.json(t)
			require.Equal(t, id, v["id"])
			require.Equal(t, "cancelled", v["state"])
			require.NotNil(t, v["finished_at"])
			require.Equal(t, []any{}, v["errors"])
			require.Equal(t, "cancelled", b.get(t, "/v1/jobs/"+id).json(t)["state"])
			require.Equal(t, store.CancelledError, v["error"], "why it closed")
			tasks := b.get(t, "/v1/jobs/"+id+"/tasks?state=cancelled").json(t)["tasks"].([]any)
			require.Len(t, tasks, 3, "the unfinished tasks are cancelled with the job")

			resp = b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil)
			requireError(t, resp, http.StatusConflict, "conflict")
			require.Contains(t, errorMessage(t, resp), "already cancelled")

			requireError(t, b.do(t, http.MethodPost, "/v1/jobs/no-such-job/cancel", nil), http.StatusNotFound, "not_found")
		})
	}
}

func TestCancelCompletedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	finish(t, b.store, id, 1, warren.JobCompleted, []byte(`[1]`))
	resp := b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil)
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "already completed")
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var ids []string
	for range 5 {
		ids = append(ids, b.mustSubmit(t, `{"type":"echo","tasks":[1]}`))
	}
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+ids[1]+"/cancel", nil).status)

	resp := b.get(t, "/v1/jobs")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	v := resp.json(t)
	require.Nil(t, v["next_cursor"])
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, jobIDs(v["jobs"]), "newest first")

	// Pages of two, following next_cursor.
	var paged []string
	path := "/v1/jobs?limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		v := b.get(t, path).json(t)
		paged = append(paged, jobIDs(v["jobs"])...)
		next, _ := v["next_cursor"].(string)
		if next == "" {
			break
		}
		path = "/v1/jobs?limit=2&cursor=" + url.QueryEscape(next)
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, paged)

	v = b.get(t, "/v1/jobs?state=cancelled").json(t)
	require.Equal(t, []string{ids[1]}, jobIDs(v["jobs"]))
	v = b.get(t, "/v1/jobs?state=completed").json(t)
	require.Equal(t, []any{}, v["jobs"])

	for _, query := range []string{"state=done", "state=PENDING", "limit=0", "limit=1001", "limit=-1", "limit=ten", "cursor=garbage"} {
		resp := b.get(t, "/v1/jobs?"+query)
		requireError(t, resp, http.StatusBadRequest, "invalid_parameter")
	}
}

func TestListTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[`+repeatJSON(`{"x":1}`, 5)+`]}`)

	v := b.get(t, "/v1/jobs/"+id+"/tasks").json(t)
	require.Nil(t, v["next_cursor"])
	tasks := v["tasks"].([]any)
	require.Len(t, tasks, 5)
	require.Equal(t, map[string]any{
		"task_id": 1.0, "state": "pending", "attempts": 0.0, "worker": "", "error": "",
		"queued_at": nil, "started_at": nil, "finished_at": nil, "result": nil,
	}, tasks[0])

	publishAll(t, b.store)
	started := time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
	ended := started.Add(500 * time.Millisecond)
	_, err := b.store.ApplyOutcomes(context.Background(), []store.Outcome{
		{JobID: id, TaskID: 2, State: warren.TaskCompleted, Result: []byte(`{"words":3}`), Attempts: 1, Worker: "w7", StartedAt: &started, FinishedAt: &ended},
		{JobID: id, TaskID: 4, State: warren.TaskFailed, Error: "bad payload", Attempts: 4, Worker: "w8"},
	})
	require.NoError(t, err)

	v = b.get(t, "/v1/jobs/"+id+"/tasks?state=completed").json(t)
	tasks = v["tasks"].([]any)
	require.Len(t, tasks, 1)
	task := tasks[0].(map[string]any)
	require.Equal(t, 2.0, task["task_id"])
	require.Equal(t, "completed", task["state"])
	require.Equal(t, map[string]any{"words": 3.0}, task["result"])
	require.Equal(t, "w7", task["worker"])
	require.Equal(t, 1.0, task["attempts"])
	require.NotNil(t, task["queued_at"])
	requireTime(t, started, task["started_at"])
	requireTime(t, ended, task["finished_at"])

	v = b.get(t, "/v1/jobs/"+id+"/tasks?state=failed").json(t)
	task = v["tasks"].([]any)[0].(map[string]any)
	require.Equal(t, 4.0, task["task_id"])
	require.Equal(t, "bad payload", task["error"])
	require.Nil(t, task["result"])

	// Pages of two, following next_cursor.
	var got []float64
	path := "/v1/jobs/" + id + "/tasks?limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		v := b.get(t, path).json(t)
		for _, task := range v["tasks"].([]any) {
			got = append(got, task.(map[string]any)["task_id"].(float64))
		}
		next, _ := v["next_cursor"].(string)
		if next == "" {
			break
		}
		path = "/v1/jobs/" + id + "/tasks?limit=2&cursor=" + url.QueryEscape(next)
	}
	require.Equal(t, []float64{1, 2, 3, 4, 5}, got)

	requireError(t, b.get(t, "/v1/jobs/no-such-job/tasks"), http.StatusNotFound, "not_found")
	requireError(t, b.get(t, "/v1/jobs/no-such-job/tasks?cursor=garbage"), http.StatusNotFound, "not_found")
	for _, query := range []string{"state=running", "limit=0", "limit=5000", "limit=x", "cursor=garbage"} {
		requireError(t, b.get(t, "/v1/jobs/"+id+"/tasks?"+query), http.StatusBadRequest, "invalid_parameter")
	}
}

// jobIDs returns the ids of a "jobs" array.
func jobIDs(jobs any) []string {
	var ids []string
	for _, j := range jobs.([]any) {
		ids = append(ids, j.(map[string]any)["id"].(string))
	}
	return ids
}

// repeatJSON returns n copies of v joined by commas.
func repeatJSON(v string, n int) string {
	out := v
	for range n - 1 {
		out += "," + v
	}
	return out
}

// requireTime checks that the RFC 3339 time got is want.
func requireTime(t *testing.T, want time.Time, got any) {
	t.Helper()
	s, ok := got.(string)
	require.True(t, ok, "want a time, got %v", got)
	parsed, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	require.True(t, want.Equal(parsed), "want %s, got %s", want, parsed)
}
