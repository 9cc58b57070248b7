package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

func TestSubmitThen(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"split","reduce":"concat","tasks":[1,2],"then":{"type":"count","reduce":"sum","max_retries":1,`+
		`"task_timeout":900,"priority":20,"queue":"second","metadata":{"stage":2},"then":{"type":"report"}}}`)
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, 2, job.Then.Length())
	require.Equal(t, "count", job.Then.Type)
	require.Equal(t, warren.Policy{Reduce: "sum", MaxRetries: 1, TaskTimeout: 900 * time.Second, Priority: 20, Queue: "second"}, job.Then.Policy,
		"a follow-up's options are a submission's")
	require.JSONEq(t, `{"stage":2}`, string(job.Then.Metadata))
	require.Equal(t, &warren.FollowUp{Type: "report", Policy: warren.Policy{Reduce: "collect", MaxRetries: warren.DefaultMaxRetries}}, job.Then.Then,
		"defaults as for a submission")

	v := b.get(t, "/v1/jobs/"+id).json(t)
	require.Equal(t, map[string]any{"type": "count", "remaining": float64(2)}, v["then"])
	require.Nil(t, v["next_job"], "null until the job completes")
	require.Nil(t, v["previous_job"], "null for the first job")

	finish(t, b.store, id, 2, warren.JobCompleted, []byte(`[10, 20, 30]`))
	v = b.get(t, "/v1/jobs/"+id).json(t)
	next, _ := v["next_job"].(string)
	require.NotEmpty(t, next)
	w := b.get(t, "/v1/jobs/"+next).json(t)
	require.Equal(t, id, w["previous_job"])
	require.Equal(t, "count", w["type"])
	require.EqualValues(t, 3, w["expected_tasks"])
	require.Equal(t, map[string]any{"type": "report", "remaining": float64(1)}, w["then"])
	require.Equal(t, []string{`10`, `20`, `30`}, payloadsOf(t, b.store, next))
}

func TestSubmitThenNDJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	resp := b.submitNDJSON(t, `{"type":"split","then":{"type":"count"}}`+"\n1\n2\n")
	require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
	job, err := b.store.GetJob(context.Background(), resp.json(t)["id"].(string))
	require.NoError(t, err)
	require.Equal(t, "count", job.Then.Type)
}

func TestSubmitThenIsValidatedAtEveryLevel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	deep := chain(warren.MaxChainLength) // and the first job: one too many
	for _, c := range []struct {
		then   string
		status int
		code   string
		want   string
	}{
		{`{"reduce":"sum"}`, http.StatusUnprocessableEntity, "validation_failed", "then.type is required"},
		{`{"type":"x","then":{"type":"y","then":{}}}`, http.StatusUnprocessableEntity, "validation_failed", "then.then.then.type is required"},
		{`{"type":"x","then":{"type":"y","max_retries":"3"}}`, http.StatusBadRequest, "invalid_type", "then.then.max_retries must be an integer"},
		{`{"type":"x","tasks":[1]}`, http.StatusBadRequest, "unknown_field", "then.tasks: a follow-up job has no tasks of its own"},
		{`{"type":"x","then":{"type":"y","idempotency_key":"k"}}`, http.StatusBadRequest, "unknown_field", `unknown field "then.then.idempotency_key"`},
		{`{"type":"x","reduce":"nope"}`, http.StatusUnprocessableEntity, "validation_failed", `then: unknown reducer "nope"`},
		{`{"type":"x","batch_size":0}`, http.StatusUnprocessableEntity, "validation_failed", "then.batch_size must be between 1 and"},
		{`{"type":"x","reduce":{"queue":"q"}}`, http.StatusUnprocessableEntity, "validation_failed", `then.reduce: "task" is required`},
		{`{"type":"x","webhook":{"url":"https://93.184.215.14/h"}}`, http.StatusBadRequest, "invalid_parameter", "then.webhook.secret is required"},
		{`[1]`, http.StatusBadRequest, "invalid_type", "then must be an object (a job spec without tasks), got an array"},
		{`{"type":"x","type":"y"}`, http.StatusBadRequest, "invalid_json", `field "then.type" is given twice`},
		{deep, http.StatusUnprocessableEntity, "validation_failed", "a chain holds at most 10 jobs"},
	} {
		resp := b.submit(t, `{"type":"first","tasks":[1],"then":`+c.then+`}`)
		requireError(t, resp, c.status, c.code)
		require.Contains(t, errorMessage(t, resp), c.want, "then %s", c.then)
	}
	requireNoJobs(t, b.store)

	// Ten jobs in all is the limit, not over it.
	b.mustSubmit(t, `{"type":"first","tasks":[1],"then":`+chain(warren.MaxChainLength-1)+`}`)
}

// chain is a then of n jobs, each the follow-up of the one before.
func chain(n int) string {
	spec := `{"type":"last"}`
	for range n - 1 {
		spec = `{"type":"link","then":` + spec + `}`
	}
	return spec
}

func TestSubmitThenWebhookIsCheckedAsTheJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	resp := b.submit(t, `{"type":"first","tasks":[1],"then":{"type":"x","webhook":{"url":"http://127.0.0.1/h","secret":"s"}}}`)
	requireError(t, resp, http.StatusBadRequest, "invalid_parameter")
	require.Contains(t, errorMessage(t, resp), "then: ")
	requireNoJobs(t, b.store)
}
