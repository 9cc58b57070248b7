package api_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
)

// hookCalls records the job ids passed to OnCancel and OnRedrive.
type hookCalls struct {
	mu                  sync.Mutex
	cancelled, redriven []string
}

func (h *hookCalls) install(_ *testing.T, cfg *api.Config) {
	cfg.OnCancel = func(job warren.Job) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.cancelled = append(h.cancelled, job.ID)
	}
	cfg.OnRedrive = func(id string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.redriven = append(h.redriven, id)
	}
}

func (h *hookCalls) calls() (cancelled, redriven []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cancelled...), append([]string(nil), h.redriven...)
}

func TestRedriveJob(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			var hooks hookCalls
			b := setup(t, &options{kind: kind, onNew: hooks.install})
			id := b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`)
			finish(t, b.store, id, 3, warren.JobFailed, nil, 2, 3)

			resp := b.do(t, http.MethodPost, "/v1/jobs/"+id+"/redrive", nil)
			require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
			v := resp.json(t)
			require.Equal(t, id, v["id"])
			require.Equal(t, "running", v["state"])
			require.Equal(t, 1.0, v["completed_tasks"])
			require.Equal(t, 0.0, v["failed_tasks"])
			require.Equal(t, 2.0, v["pending_tasks"])
			require.Nil(t, v["finished_at"])
			require.Equal(t, []any{}, v["errors"])
			_, redriven := hooks.calls()
			require.Equal(t, []string{id}, redriven, "OnRedrive wakes the relay")

			// Only the failed tasks go back to the outbox, attempts kept.
			requeued := publishAll(t, b.store)
			require.Len(t, requeued, 2)
			for i, task := range requeued {
				require.Equal(t, int64(i+2), task.TaskID)
				require.Equal(t, 1, task.Attempts)
			}

			resp = b.do(t, http.MethodPost, "/v1/jobs/"+id+"/redrive", nil)
			requireError(t, resp, http.StatusConflict, "conflict")
			require.Contains(t, errorMessage(t, resp), "running")
			requireError(t, b.do(t, http.MethodPost, "/v1/jobs/no-such-job/redrive", nil), http.StatusNotFound, "not_found")
			_, redriven = hooks.calls()
			require.Len(t, redriven, 1, "no hook for a refused redrive")
		})
	}
}

// A job completed within its tolerance can be redriven too; one without
// failures, or cancelled, cannot, and the 409 says why.
func TestRedriveConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tolerated := b.mustSubmit(t, `{"type":"echo","tasks":[1,2],"tolerated_failures":1}`)
	finish(t, b.store, tolerated, 2, warren.JobCompleted, []byte(`[1,null]`), 2)
	resp := b.do(t, http.MethodPost, "/v1/jobs/"+tolerated+"/redrive", nil)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	v := resp.json(t)
	require.Equal(t, "running", v["state"])
	require.Nil(t, v["result_url"], "the old result is gone")

	clean := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	finish(t, b.store, clean, 1, warren.JobCompleted, []byte(`[1]`))
	resp = b.do(t, http.MethodPost, "/v1/jobs/"+clean+"/redrive", nil)
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "nothing to redrive")

	cancelled := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+cancelled+"/cancel", nil).status)
	resp = b.do(t, http.MethodPost, "/v1/jobs/"+cancelled+"/redrive", nil)
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "cancelled")

	pending := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	resp = b.do(t, http.MethodPost, "/v1/jobs/"+pending+"/redrive", nil)
	requireError(t, resp, http.StatusConflict, "conflict")
	require.Contains(t, errorMessage(t, resp), "pending")

	tasks, _, err := b.store.ListTasks(t.Context(), clean, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Equal(t, warren.TaskCompleted, tasks[0].State, "a refused redrive changes nothing")
}

func TestCancelCallsOnCancel(t *testing.T) {
	t.Parallel()
	var hooks hookCalls
	b := setup(t, &options{onNew: hooks.install})
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil).status)
	requireError(t, b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil), http.StatusConflict, "conflict")
	cancelled, redriven := hooks.calls()
	require.Equal(t, []string{id}, cancelled, "once: not for the refused second cancel")
	require.Empty(t, redriven)
}
