package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
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
