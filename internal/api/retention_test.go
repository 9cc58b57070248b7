package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
)

// deleteCalls records the job ids passed to OnDelete.
type deleteCalls struct {
	mu  sync.Mutex
	ids []string
}

func (d *deleteCalls) install(_ *testing.T, cfg *api.Config) {
	cfg.OnDelete = func(id string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.ids = append(d.ids, id)
	}
}

func (d *deleteCalls) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ids...)
}

// DELETE /v1/jobs/{id} deletes a closed job with everything it has: the
// job, its tasks and result answer 404, its idempotency key names a new
// job, and OnDelete hears of it once.
func TestDeleteJob(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			var hook deleteCalls
			b := setup(t, &options{kind: kind, onNew: hook.install})
			const spec = `{"type":"echo","tasks":[1,2]}`
			id := b.mustSubmit(t, spec, "Idempotency-Key", "nightly")
			other := b.mustSubmit(t, spec)
			finish(t, b.store, id, 2, warren.JobCompleted, []byte(`[1,2]`))

			resp := b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil)
			require.Equal(t, http.StatusNoContent, resp.status, "body: %s", resp.body)
			require.Empty(t, resp.body)
			require.Equal(t, []string{id}, hook.calls())
			for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs/" + id + "/tasks", "/v1/jobs/" + id + "/result"} {
				requireError(t, b.get(t, path), http.StatusNotFound, "not_found")
			}
			requireError(t, b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil), http.StatusNotFound, "not_found")
			require.Equal(t, []string{id}, hook.calls(), "a failed deletion is not reported")

			again := b.mustSubmit(t, spec, "Idempotency-Key", "nightly")
			require.NotEqual(t, id, again, "the key is free: it makes a new job")
			jobs := listAll(t, b)
			require.ElementsMatch(t, []string{other, again}, []string{jobs[0]["id"].(string), jobs[1]["id"].(string)})
			n, err := b.store.PurgeDeletedTasks(context.Background(), 10)
			require.NoError(t, err)
			require.Equal(t, 2, n, "the deleted job's tasks are left for the purge")
		})
	}
}

// An open job is not deleted: 409 says its state and what to do, and the
// job stays as it was. An unknown job is a 404.
func TestDeleteOpenJobIsConflict(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			var hook deleteCalls
			b := setup(t, &options{kind: kind, onNew: hook.install})
			id := b.mustSubmit(t, `{"type":"echo","tasks":[1,2]}`)

			resp := b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil)
			requireError(t, resp, http.StatusConflict, "conflict")
			require.Equal(t, `job "`+id+`" is pending: only a closed job can be deleted; cancel it first`, errorMessage(t, resp))
			v := b.get(t, "/v1/jobs/"+id).json(t)
			require.Equal(t, "pending", v["state"])
			require.Equal(t, 2.0, v["expected_tasks"])
			require.Empty(t, hook.calls())

			requireError(t, b.do(t, http.MethodDelete, "/v1/jobs/no-such-job", nil), http.StatusNotFound, "not_found")

			require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil).status)
			require.Equal(t, http.StatusNoContent, b.do(t, http.MethodDelete, "/v1/jobs/"+id, nil).status, "a cancelled job is closed")
		})
	}
}

// A job shows its retention, its own or the server's, in seconds, and
// once closed when it expires; a job the server keeps forever shows
// null for both.
func TestJobShowsRetentionAndExpiry(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind, onNew: func(_ *testing.T, cfg *api.Config) { cfg.Retention = 48 * time.Hour }})
			own := b.mustSubmit(t, `{"type":"echo","retention":5400.5,"tasks":[1]}`)
			byDefault := b.submitNDJSON(t, "{\"type\":\"echo\"}\n1\n")
			require.Equal(t, http.StatusAccepted, byDefault.status, "body: %s", byDefault.body)
			def := byDefault.json(t)["id"].(string)

			v := b.get(t, "/v1/jobs/"+own).json(t)
			require.Equal(t, 5400.5, v["retention"])
			require.Nil(t, v["expires_at"], "an open job does not expire")
			job, err := b.store.GetJob(context.Background(), own)
			require.NoError(t, err)
			require.Equal(t, 5400*time.Second+500*time.Millisecond, job.Policy.Retention)
			require.Equal(t, 48*3600.0, b.get(t, "/v1/jobs/"+def).json(t)["retention"], "the server's retention")

			for id, retention := range map[string]time.Duration{own: job.Policy.Retention, def: 48 * time.Hour} {
				finish(t, b.store, id, 1, warren.JobCompleted, []byte(`[1]`))
				v := b.get(t, "/v1/jobs/"+id).json(t)
				finished, err := time.Parse(time.RFC3339Nano, v["finished_at"].(string))
				require.NoError(t, err)
				expires, err := time.Parse(time.RFC3339Nano, v["expires_at"].(string))
				require.NoError(t, err)
				require.Equal(t, finished.Add(retention), expires)
			}
			listed := b.get(t, "/v1/jobs").json(t)["jobs"].([]any)
			require.Len(t, listed, 2)
			for _, j := range listed {
				require.NotNil(t, j.(map[string]any)["expires_at"], "lists show it too")
			}

			forever := setup(t, &options{kind: kind, onNew: func(_ *testing.T, cfg *api.Config) { cfg.Retention = -1 }})
			id := forever.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
			finish(t, forever.store, id, 1, warren.JobCompleted, []byte(`[1]`))
			v = forever.get(t, "/v1/jobs/"+id).json(t)
			require.Nil(t, v["retention"])
			require.Nil(t, v["expires_at"])
			id = forever.mustSubmit(t, `{"type":"echo","retention":60,"tasks":[1]}`)
			require.Equal(t, 60.0, forever.get(t, "/v1/jobs/"+id).json(t)["retention"], "a job's own retention stands")
		})
	}
}

// Without Config.Retention a job shows warren.DefaultRetention.
func TestJobRetentionDefaultsToAWeek(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, warren.DefaultRetention.Seconds(), b.get(t, "/v1/jobs/"+id).json(t)["retention"])
}

// A bad retention in NDJSON is refused too, before anything is written.
func TestSubmitNDJSONRefusesABadRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, head := range []string{`{"type":"echo","retention":0}`, `{"type":"echo","retention":-5}`} {
		requireError(t, b.submitNDJSON(t, head+"\n1\n"), http.StatusUnprocessableEntity, "validation_failed")
	}
	resp := b.submitNDJSON(t, `{"type":"echo","retention":"1w"}`+"\n1\n")
	requireError(t, resp, http.StatusBadRequest, "invalid_type")
	require.Contains(t, errorMessage(t, resp), `line 1: retention: "1w" is not a duration`)
	requireNoJobs(t, b.store)
}
