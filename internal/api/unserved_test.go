package api_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/heartbeats"
)

// When live workers consume a job's queue and none advertises its type,
// the submit answer warns, and the job's "waiting" says
// no_worker_for_type until a worker that serves the type is heard from.
// With no live worker on the queue at all, the heartbeats say nothing of
// types: no warning.
func TestSubmitWarnsWhenNoLiveWorkerServesTheType(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		workers = []heartbeats.Worker{
			{ID: "a", Name: "thumbs", Queues: []string{"default"}, Types: []string{"thumbnail"}, Alive: true},
			{ID: "b", Name: "gone", Queues: []string{"default"}, Types: []string{"resize"}, Alive: false},
		}
	)
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Workers = func() []heartbeats.Worker {
			mu.Lock()
			defer mu.Unlock()
			return append([]heartbeats.Worker(nil), workers...)
		}
	}})

	resp := b.submit(t, `{"type":"resize","task_timeout":120,"tasks":[{}]}`)
	require.Equal(t, http.StatusAccepted, resp.status, "%s", resp.body)
	var answer struct {
		ID       string   `json:"id"`
		Warnings []string `json:"warnings"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &answer))
	require.Equal(t, []string{`no live worker serves type "resize" on queue "default": its tasks wait for one, and fail unknown_type after the task_timeout (2m0s)`},
		answer.Warnings, "the only worker that served it is not alive")

	waiting := func(id string) map[string]any {
		t.Helper()
		resp := b.get(t, "/v1/jobs/"+id)
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		w, _ := resp.json(t)["waiting"].(map[string]any)
		return w
	}
	w := waiting(answer.ID)
	require.Equal(t, "no_worker_for_type", w["reason"])
	require.Equal(t, "resize", w["type"])
	require.Equal(t, "default", w["queue"])
	since, err := time.Parse(time.RFC3339Nano, w["since"].(string))
	require.NoError(t, err)
	require.Equal(t, w["since"], waiting(answer.ID)["since"], "since is the first reading")
	require.WithinDuration(t, time.Now(), since, time.Minute)

	resp = b.submit(t, `{"type":"thumbnail","tasks":[{}]}`)
	require.Equal(t, http.StatusAccepted, resp.status)
	require.NotContains(t, string(resp.body), "warnings", "a served type has none")

	resp = b.submit(t, `{"type":"resize","queue":"gpu","tasks":[{}]}`)
	require.Equal(t, http.StatusAccepted, resp.status)
	require.NotContains(t, string(resp.body), "warnings", "no live worker on the queue: the heartbeats do not tell")

	mu.Lock()
	workers = append(workers, heartbeats.Worker{ID: "c", Name: "resizer", Queues: []string{"default"}, Types: []string{"resize"}, Alive: true})
	mu.Unlock()
	require.Nil(t, waiting(answer.ID), "a worker serves the type now")
}

// A reduce task's type is checked on the reduce queue.
func TestSubmitWarnsOfAnUnservedReduceTaskType(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Workers = func() []heartbeats.Worker {
			return []heartbeats.Worker{{ID: "a", Name: "w", Queues: []string{"default"}, Types: []string{"echo"}, Alive: true}}
		}
	}})
	resp := b.submit(t, `{"type":"echo","reduce":{"task":"sum"},"tasks":[{}]}`)
	require.Equal(t, http.StatusAccepted, resp.status, "%s", resp.body)
	require.Contains(t, string(resp.body), `no live worker serves reduce task type \"sum\" on queue \"default\"`)
}
