package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
)

// An open job whose queue has no consumer says so in its "waiting"; a
// closed one, and one whose queue has a consumer, have null; a listing
// leaves it out.
func TestJobWaitingForAConsumer(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Waiting = func(_, queue string) *api.Waiting {
			if queue != "gpu" {
				return nil
			}
			return &api.Waiting{Reason: api.WaitingNoConsumer, Queue: queue, Since: since}
		}
	}})
	gpu := b.mustSubmit(t, `{"type":"echo","queue":"gpu","tasks":[{}]}`)
	other := b.mustSubmit(t, `{"type":"echo","tasks":[{}]}`)

	waiting := func(id string) json.RawMessage {
		t.Helper()
		resp := b.get(t, "/v1/jobs/"+id)
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		var job map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(resp.body, &job))
		w, ok := job["waiting"]
		require.True(t, ok, "always present in a single job")
		return w
	}
	require.JSONEq(t, `{"reason":"no_consumer","queue":"gpu","since":"2026-12-01T10:00:00Z"}`, string(waiting(gpu)))
	require.JSONEq(t, `null`, string(waiting(other)), "its queue has a consumer")

	resp := b.get(t, "/v1/jobs")
	require.Equal(t, http.StatusOK, resp.status)
	require.NotContains(t, string(resp.body), `"waiting"`, "left out of lists")

	resp = b.do(t, http.MethodPost, "/v1/jobs/"+gpu+"/cancel", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	require.Contains(t, string(resp.body), `"waiting":null`, "a closed job waits for nothing")
	require.JSONEq(t, `null`, string(waiting(gpu)))
}
