package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSubmitMaxConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	capped := b.mustSubmit(t, `{"type":"echo","tasks":[1,2],"max_concurrency":10000}`)
	job, err := b.store.GetJob(context.Background(), capped)
	require.NoError(t, err)
	require.Equal(t, 10000, job.Policy.MaxConcurrency, "the documented maximum is valid")
	require.Equal(t, 10000.0, b.get(t, "/v1/jobs/"+capped).json(t)["max_concurrency"])

	uncapped := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	require.Equal(t, 0.0, b.get(t, "/v1/jobs/"+uncapped).json(t)["max_concurrency"], "0: no cap")

	for _, bad := range []string{"0", "-1", "10001"} {
		resp := b.submit(t, `{"type":"echo","tasks":[1],"max_concurrency":`+bad+`}`)
		requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
		require.Contains(t, errorMessage(t, resp), "max_concurrency must be between 1 and 10000, got "+bad)
	}
}
