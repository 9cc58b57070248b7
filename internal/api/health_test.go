package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	resp := b.get(t, "/healthz")
	require.Equal(t, http.StatusOK, resp.status)
	require.JSONEq(t, `{"status":"ok"}`, string(resp.body))
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	var brokerErr error
	b := setup(t, &options{ready: func(context.Context) error { return brokerErr }})
	resp := b.get(t, "/readyz")
	require.Equal(t, http.StatusOK, resp.status)
	require.JSONEq(t, `{"status":"ok"}`, string(resp.body))

	brokerErr = errors.New("broker: not connected")
	resp = b.get(t, "/readyz")
	requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, errorMessage(t, resp), "broker: not connected")

	brokerErr = nil
	require.NoError(t, b.store.Close())
	resp = b.get(t, "/readyz")
	requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, errorMessage(t, resp), "job store")
	require.Equal(t, http.StatusOK, b.get(t, "/healthz").status, "a process whose store is down is still alive")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`, "Idempotency-Key", "k")
	b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`, "Idempotency-Key", "k")
	cancelled := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+cancelled+"/cancel", nil).status)
	b.get(t, "/v1/jobs/nope")
	b.get(t, "/nope")

	resp := b.get(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.status)
	require.True(t, strings.HasPrefix(resp.header.Get("Content-Type"), "text/plain"))
	text := string(resp.body)
	for _, line := range []string{
		`warren_jobs{state="pending"} 1`,
		`warren_jobs{state="cancelled"} 1`,
		`warren_jobs{state="completed"} 0`,
		`warren_jobs_submitted_total 2`,
		`warren_tasks_submitted_total 4`,
		`warren_idempotent_replays_total 1`,
		`warren_api_requests_total{code="202",route="POST /v1/jobs"} 3`,
		`warren_api_requests_total{code="404",route="GET /v1/jobs/{id}"} 1`,
		`warren_api_requests_total{code="404",route="unmatched"} 1`,
		`warren_api_request_duration_seconds_count{route="POST /v1/jobs/{id}/cancel"} 1`,
	} {
		require.Contains(t, text, line+"\n")
	}
}

func TestMetricsLeaveOutAFailingCollector(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{wrap: func(s store.Store) store.Store {
		return &faultyStore{Store: s, fail: map[string]bool{"CountJobs": true}}
	}})
	resp := b.get(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.status)
	require.NotContains(t, string(resp.body), "warren_jobs{")
	require.Contains(t, string(resp.body), "warren_jobs_submitted_total 0\n")
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "r:read"})
	for _, path := range []string{"/", "/v1", "/v1/jobs/x/y", "/v2/jobs", "/v1/jobs/x/results"} {
		requireError(t, b.get(t, path), http.StatusNotFound, "not_found")
	}
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPatch, "/v1/jobs", "GET, HEAD, POST"},
		{http.MethodPut, "/v1/jobs/abc", "DELETE, GET, HEAD"},
		{http.MethodGet, "/v1/jobs/abc/cancel", "POST"},
		{http.MethodGet, "/v1/jobs/abc/redrive", "POST"},
		{http.MethodGet, "/v1/deadletters/replay", "POST"},
		{http.MethodDelete, "/v1/deadletters", "GET, HEAD"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodPatch, "/metrics", "GET, HEAD"},
	} {
		resp := b.do(t, tc.method, tc.path, nil)
		requireError(t, resp, http.StatusMethodNotAllowed, "method_not_allowed")
		require.Equal(t, tc.allow, strings.Join(resp.header.Values("Allow"), ", "), "%s %s", tc.method, tc.path)
	}
}

// storeCalls are one request for each route that uses the store, for job
// id.
func storeCalls(id string) []struct{ method, path, body string } {
	return []struct{ method, path, body string }{
		{http.MethodPost, "/v1/jobs", `{"type":"echo","tasks":[1]}`},
		{http.MethodGet, "/v1/jobs", ""},
		{http.MethodGet, "/v1/jobs/" + id, ""},
		{http.MethodGet, "/v1/jobs/" + id + "/tasks", ""},
		{http.MethodGet, "/v1/jobs/" + id + "/tasks/1", ""},
		{http.MethodGet, "/v1/jobs/" + id + "/result", ""},
		{http.MethodGet, "/v1/jobs/" + id + "/events", ""},
		{http.MethodGet, "/v1/jobs/" + id + "/timeline", ""},
		{http.MethodPost, "/v1/jobs/" + id + "/cancel", ""},
		{http.MethodPost, "/v1/jobs/" + id + "/redrive", ""},
		{http.MethodDelete, "/v1/jobs/" + id, ""},
		{http.MethodGet, "/v1/jobs/" + id + "/deliveries", ""},
		{http.MethodPost, "/v1/jobs/" + id + "/pause", ""},
		{http.MethodPost, "/v1/jobs/" + id + "/resume", ""},
		{http.MethodPost, "/v1/queues/q1/pause", ""},
		{http.MethodPost, "/v1/queues/q1/resume", ""},
	}
}

func (b *testBundle) call(t *testing.T, method, path, body string) response {
	t.Helper()
	if body == "" {
		return b.do(t, method, path, nil)
	}
	return b.do(t, method, path, strings.NewReader(body), "Content-Type", "application/json")
}

func TestStoreDownIs503(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := createJob(t, b.store, 1)
	require.NoError(t, b.store.Close())
	for _, c := range storeCalls(job.ID) {
		resp := b.call(t, c.method, c.path, c.body)
		requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	}
}

// errSecret is a store failure whose text must never reach a client.
var errSecret = errors.New("disk full at /var/lib/secret-volume")

// faultyStore fails the methods named in fail with errSecret (or panics,
// for the method named by panics); its Ping works.
type faultyStore struct {
	store.Store
	fail   map[string]bool
	panics string
}

func (f *faultyStore) check(method string) error {
	if f.panics == method {
		panic("faultyStore: " + method)
	}
	if f.fail[method] {
		return errSecret
	}
	return nil
}

func (f *faultyStore) CreateJob(ctx context.Context, spec store.NewJob, tasks iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	if err := f.check("CreateJob"); err != nil {
		return warren.Job{}, false, err
	}
	return f.Store.CreateJob(ctx, spec, tasks)
}

func (f *faultyStore) GetJob(ctx context.Context, id string) (warren.Job, error) {
	if err := f.check("GetJob"); err != nil {
		return warren.Job{}, err
	}
	return f.Store.GetJob(ctx, id)
}

func (f *faultyStore) CountJobs(ctx context.Context) (map[warren.JobState]int64, error) {
	if err := f.check("CountJobs"); err != nil {
		return nil, err
	}
	return f.Store.CountJobs(ctx)
}

func (f *faultyStore) ListJobs(ctx context.Context, opts store.ListJobsOpts) ([]warren.Job, string, error) {
	if err := f.check("ListJobs"); err != nil {
		return nil, "", err
	}
	return f.Store.ListJobs(ctx, opts)
}

func (f *faultyStore) ListTasks(ctx context.Context, id string, opts store.ListTasksOpts) ([]warren.TaskRecord, string, error) {
	if err := f.check("ListTasks"); err != nil {
		return nil, "", err
	}
	return f.Store.ListTasks(ctx, id, opts)
}

func (f *faultyStore) GetTask(ctx context.Context, id string, taskID int64) (warren.TaskRecord, error) {
	if err := f.check("GetTask"); err != nil {
		return warren.TaskRecord{}, err
	}
	return f.Store.GetTask(ctx, id, taskID)
}

func (f *faultyStore) TaskAttempts(ctx context.Context, id string, taskID int64) ([]warren.TaskAttempt, error) {
	if err := f.check("TaskAttempts"); err != nil {
		return nil, err
	}
	return f.Store.TaskAttempts(ctx, id, taskID)
}

func (f *faultyStore) JobErrors(ctx context.Context, id string, limit int) ([]warren.TaskError, error) {
	if err := f.check("JobErrors"); err != nil {
		return nil, err
	}
	return f.Store.JobErrors(ctx, id, limit)
}

func (f *faultyStore) CancelJob(ctx context.Context, id string) (warren.Job, error) {
	if err := f.check("CancelJob"); err != nil {
		return warren.Job{}, err
	}
	return f.Store.CancelJob(ctx, id)
}

func (f *faultyStore) RedriveJob(ctx context.Context, id string) (warren.Job, int, error) {
	if err := f.check("RedriveJob"); err != nil {
		return warren.Job{}, 0, err
	}
	return f.Store.RedriveJob(ctx, id)
}

func (f *faultyStore) DeleteJob(ctx context.Context, id string) error {
	if err := f.check("DeleteJob"); err != nil {
		return err
	}
	return f.Store.DeleteJob(ctx, id)
}

func (f *faultyStore) TaskTimeline(ctx context.Context, id string, span store.TimelineSpan) ([]store.TimelineBucket, error) {
	if err := f.check("TaskTimeline"); err != nil {
		return nil, err
	}
	return f.Store.TaskTimeline(ctx, id, span)
}

func (f *faultyStore) ListDeliveries(ctx context.Context, id string) ([]store.Delivery, error) {
	if err := f.check("ListDeliveries"); err != nil {
		return nil, err
	}
	return f.Store.ListDeliveries(ctx, id)
}

func (f *faultyStore) PauseJob(ctx context.Context, id string) (warren.Job, error) {
	if err := f.check("PauseJob"); err != nil {
		return warren.Job{}, err
	}
	return f.Store.PauseJob(ctx, id)
}

func (f *faultyStore) ResumeJob(ctx context.Context, id string) (warren.Job, error) {
	if err := f.check("ResumeJob"); err != nil {
		return warren.Job{}, err
	}
	return f.Store.ResumeJob(ctx, id)
}

func (f *faultyStore) PauseQueue(ctx context.Context, queue string) (store.QueuePause, error) {
	if err := f.check("PauseQueue"); err != nil {
		return store.QueuePause{}, err
	}
	return f.Store.PauseQueue(ctx, queue)
}

func (f *faultyStore) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	if err := f.check("ResumeQueue"); err != nil {
		return false, err
	}
	return f.Store.ResumeQueue(ctx, queue)
}

func (f *faultyStore) JobResultRange(ctx context.Context, id string, off, n int64) ([]byte, int64, error) {
	if err := f.check("JobResultRange"); err != nil {
		return nil, 0, err
	}
	return f.Store.JobResultRange(ctx, id, off, n)
}

func TestStoreErrorIs500WithoutDetails(t *testing.T) {
	t.Parallel()
	fail := map[string]bool{"CreateJob": true, "GetJob": true, "ListJobs": true, "ListTasks": true, "GetTask": true, "CancelJob": true, "RedriveJob": true, "DeleteJob": true,
		"ListDeliveries": true, "PauseJob": true, "ResumeJob": true, "PauseQueue": true, "ResumeQueue": true}
	b := setup(t, &options{wrap: func(s store.Store) store.Store { return &faultyStore{Store: s, fail: fail} }})
	job := createJob(t, b.store, 1)
	for _, c := range storeCalls(job.ID) {
		resp := b.call(t, c.method, c.path, c.body)
		requireError(t, resp, http.StatusInternalServerError, "internal")
		require.NotContains(t, string(resp.body), "secret")
	}
	requireError(t, b.get(t, "/v1/jobs?cursor=x"), http.StatusInternalServerError, "internal")
}

func TestStoreErrorAfterTheJobWasFound(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{wrap: func(s store.Store) store.Store {
		return &faultyStore{Store: s, fail: map[string]bool{"JobResultRange": true, "JobErrors": true, "TaskTimeline": true}}
	}})
	done := createJob(t, b.store, 2)
	finish(t, b.store, done.ID, 2, warren.JobCompleted, []byte(`[1,2]`), 2)
	for _, path := range []string{"/v1/jobs/" + done.ID + "/result", "/v1/jobs/" + done.ID, "/v1/jobs/" + done.ID + "/timeline"} {
		resp := b.get(t, path)
		requireError(t, resp, http.StatusInternalServerError, "internal")
		require.NotContains(t, string(resp.body), "secret")
	}
}

func TestPanicIs500(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{wrap: func(s store.Store) store.Store { return &faultyStore{Store: s, panics: "GetJob"} }})
	requireError(t, b.get(t, "/v1/jobs/x"), http.StatusInternalServerError, "internal")
	require.Equal(t, http.StatusOK, b.get(t, "/healthz").status)
}
