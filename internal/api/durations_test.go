package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Wherever a submission takes seconds (task_timeout, retention, in the
// job and in its follow-ups), a Go duration string is taken too, and a
// string that is not one is refused with the field named.
func TestSubmitTakesDurationStrings(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		spec               string
		timeout, retention time.Duration
	}{
		{`"task_timeout":"90s","retention":"1h30m"`, 90 * time.Second, 90 * time.Minute},
		{`"task_timeout":"1.5m","retention":86400`, 90 * time.Second, 24 * time.Hour},
		{`"task_timeout":120,"retention":"168h"`, 2 * time.Minute, 7 * 24 * time.Hour},
	} {
		id := b.mustSubmit(t, `{"type":"echo",`+tc.spec+`,"tasks":[1]}`)
		job, err := b.store.GetJob(ctx, id)
		require.NoError(t, err, tc.spec)
		require.Equal(t, tc.timeout, job.Policy.TaskTimeout, tc.spec)
		require.Equal(t, tc.retention, job.Policy.Retention, tc.spec)
	}

	for _, tc := range []struct{ spec, status, want string }{
		{`"task_timeout":"soon"`, "invalid_type", `task_timeout: "soon" is not a duration (a number of seconds, or a string such as "30s", "1m", "1h30m")`},
		{`"retention":"2 days"`, "invalid_type", `retention: "2 days" is not a duration`},
		{`"retention":[60]`, "invalid_type", `retention must be a number of seconds or a duration string such as "30s", got an array`},
		{`"then":{"type":"echo","task_timeout":"x"}`, "invalid_type", `then.task_timeout: "x" is not a duration`},
		{`"task_timeout":"200h"`, "validation_failed", "task_timeout must be between 1 and 604800 seconds, got 720000"},
	} {
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(`{"type":"echo",`+tc.spec+`,"tasks":[1]}`), "Content-Type", "application/json")
		status := http.StatusBadRequest
		if tc.status == "validation_failed" {
			status = http.StatusUnprocessableEntity
		}
		requireError(t, resp, status, tc.status)
		require.Contains(t, errorMessage(t, resp), tc.want, tc.spec)
	}
}
