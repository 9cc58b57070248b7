package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
)

// A tolerance that is not given does not limit, as in AWS Step Functions:
// tolerated_failures alone tolerates that many failures whatever their
// share, the percent alone that share whatever the count, both must both
// hold, and neither tolerates none. GET shows the job as given: a count
// that does not limit is null, a percent that does not limit is 100.
func TestSubmitToleranceNotGivenDoesNotLimit(t *testing.T) {
	t.Parallel()
	const tasks = 10
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			for _, tc := range []struct {
				name, fields string
				ndjson       bool
				tolerated    int64 // the most failures of 10 the job tolerates
				shownCount   any   // tolerated_failures in GET
				shownPercent any   // tolerated_failure_percent in GET
			}{
				{name: "count only", fields: `"tolerated_failures":3`, tolerated: 3, shownCount: 3.0, shownPercent: 100.0},
				{name: "count only, ndjson", fields: `"tolerated_failures":3`, ndjson: true, tolerated: 3, shownCount: 3.0, shownPercent: 100.0},
				{name: "count only, percent null", fields: `"tolerated_failures":3,"tolerated_failure_percent":null`, tolerated: 3, shownCount: 3.0, shownPercent: 100.0},
				{name: "percent only", fields: `"tolerated_failure_percent":20`, tolerated: 2, shownCount: nil, shownPercent: 20.0},
				{name: "percent only, ndjson", fields: `"tolerated_failure_percent":20`, ndjson: true, tolerated: 2, shownCount: nil, shownPercent: 20.0},
				{name: "both: the percent binds", fields: `"tolerated_failures":5,"tolerated_failure_percent":20`, tolerated: 2, shownCount: 5.0, shownPercent: 20.0},
				{name: "both: the count binds", fields: `"tolerated_failures":1,"tolerated_failure_percent":50`, tolerated: 1, shownCount: 1.0, shownPercent: 50.0},
				{name: "neither", fields: `"max_retries":1`, tolerated: 0, shownCount: 0.0, shownPercent: 0.0},
				{name: "count 0 only", fields: `"tolerated_failures":0`, tolerated: 0, shownCount: 0.0, shownPercent: 100.0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var resp response
					if tc.ndjson {
						resp = b.submitNDJSON(t, `{"type":"echo",`+tc.fields+"}\n"+repeatLines("1", tasks))
					} else {
						resp = b.submit(t, `{"type":"echo",`+tc.fields+`,"tasks":[`+repeatJSON("1", tasks)+`]}`)
					}
					require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
					id := resp.json(t)["id"].(string)
					job, err := b.store.GetJob(context.Background(), id)
					require.NoError(t, err)
					require.True(t, job.Policy.Tolerates(tc.tolerated, tasks), "%d failures of %d are tolerated (policy %+v)", tc.tolerated, tasks, job.Policy)
					require.False(t, job.Policy.Tolerates(tc.tolerated+1, tasks), "%d failures of %d are not (policy %+v)", tc.tolerated+1, tasks, job.Policy)

					v := b.get(t, "/v1/jobs/"+id).json(t)
					require.Equal(t, tc.shownCount, v["tolerated_failures"])
					require.Equal(t, tc.shownPercent, v["tolerated_failure_percent"])
				})
			}
		})
	}
}

// repeatLines returns n lines of v, for an NDJSON body.
func repeatLines(v string, n int) string {
	out := ""
	for range n {
		out += v + "\n"
	}
	return out
}

// A task_timeout that the retry delays outlast is refused, with the
// numbers that say why: the reconciler would fail a task that is only
// waiting in a retry tier as lost. The tiers are the server's.
func TestSubmitRefusesATaskTimeoutShorterThanTheRetryDelays(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		name, fields, want string
	}{
		// Default tiers 1s, 5s, 30s, 2m, 10m: 5 retries wait 756 s.
		{"given", `"max_retries":5,"task_timeout":600`,
			"task_timeout 600 s does not outlast the retry delays: with max_retries 5 a task may wait 756 s between its runs " +
				"in the server's retry tiers (1s, 5s, 30s, 2m, 10m, the last repeating)"},
		{"equal", `"max_retries":3,"task_timeout":36`, "task_timeout 36 s does not outlast the retry delays: with max_retries 3 a task may wait 36 s"},
		// 10 retries wait 756 s + 5 x 600 s = 3756 s, more than the
		// default hour.
		{"the default", `"max_retries":10`, "the default task_timeout 3600 s does not outlast the retry delays: with max_retries 10 a task may wait 3756 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, resp := range []response{
				b.submit(t, `{"type":"echo",`+tc.fields+`,"tasks":[1]}`),
				b.submitNDJSON(t, `{"type":"echo",`+tc.fields+"}\n1\n"),
			} {
				requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
				require.Contains(t, errorMessage(t, resp), tc.want)
				require.Contains(t, errorMessage(t, resp), "give a task_timeout above")
			}
			requireNoJobs(t, b.store)
		})
	}
	// Just longer is fine.
	id := b.mustSubmit(t, `{"type":"echo","max_retries":5,"task_timeout":757,"tasks":[1]}`)
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, 757*time.Second, job.Policy.TaskTimeout)
}

// The check uses the retry tiers the server runs with.
func TestSubmitChecksTheTaskTimeoutAgainstTheServersTiers(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.RetryTiers = []time.Duration{2 * time.Second, time.Minute}
	}})
	b.mustSubmit(t, `{"type":"echo","max_retries":2,"task_timeout":63,"tasks":[1]}`)     // waits 62 s
	resp := b.submit(t, `{"type":"echo","max_retries":3,"task_timeout":63,"tasks":[1]}`) // waits 122 s
	requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
	require.Contains(t, errorMessage(t, resp), "may wait 122 s between its runs in the server's retry tiers (2s, 1m, the last repeating)")
}

// max_retries has an upper bound, warren.MaxRetriesLimit.
func TestSubmitRefusesMoreRetriesThanTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, body := range []string{
		`{"type":"echo","max_retries":101,"task_timeout":604800,"tasks":[1]}`,
		`{"type":"echo","max_retries":1000000,"task_timeout":604800,"tasks":[1]}`,
	} {
		resp := b.submit(t, body)
		requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
		require.Contains(t, errorMessage(t, resp), "max_retries must be between 0 and 100")
	}
	requireNoJobs(t, b.store)
	// 100 retries wait 756 s + 95 x 600 s = 57,756 s in the default tiers.
	id := b.mustSubmit(t, `{"type":"echo","max_retries":100,"task_timeout":57757,"tasks":[1]}`)
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, warren.MaxRetriesLimit, job.Policy.MaxRetries)
}
