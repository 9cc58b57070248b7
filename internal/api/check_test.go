package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
)

// CheckSpec and CheckNDJSONSpec answer what POST /v1/jobs answers, code
// and message, for every spec the server refuses before judging the job;
// and nil for a spec only the server's rules can refuse.
func TestCheckSpecAnswersAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, body := range []string{
		`{"type":"echo" "tasks":[1]}`,
		`{"type":"echo","tasks":[1,{"a":}]}`,
		`{"type":"echo","tasks":[1,2`,
		`[1,2]`,
		`{"type":5,"tasks":[1]}`,
		`{"type":"echo","tasks":[1],"max_retries":"3"}`,
		`{"type":"echo","tasks":[1],"task_timeout":"1 hour"}`,
		`{"type":"echo","tasks":[1],"webhook":{"url":1}}`,
		`{"type":"echo","tasks":[1],"colour":"blue"}`,
		`{"type":"echo","type":"echo","tasks":[1]}`,
		`{"type":"echo","tasks":"all"}`,
		`{"type":"echo","tasks":[1]} x`,
		`{"type":"echo","tasks":[1],"then":{"type":"echo","retention":true}}`,
	} {
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(body), "Content-Type", "application/json")
		var spec *api.SpecError
		require.True(t, errors.As(api.CheckSpec([]byte(body)), &spec), body)
		requireError(t, resp, http.StatusBadRequest, spec.Code)
		require.Equal(t, errorMessage(t, resp), spec.Message, body)
	}
	for _, head := range []string{
		`{"type":"echo","tasks":[1]}`,
		`{"type":"echo","max_retries":"x"}`,
		`{"type":"echo","retention":"forever"}`,
		`{"type":"echo",}`,
	} {
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(head+"\n1\n"), "Content-Type", "application/x-ndjson")
		var spec *api.SpecError
		require.True(t, errors.As(api.CheckNDJSONSpec([]byte(head)), &spec), head)
		requireError(t, resp, http.StatusBadRequest, spec.Code)
		require.Equal(t, errorMessage(t, resp), spec.Message, head)
	}
	// Only the server knows its reducers and limits.
	require.NoError(t, api.CheckSpec([]byte(`{"type":"echo","reduce":"avg","task_timeout":"90s","tasks":[1]}`)))
	require.NoError(t, api.CheckNDJSONSpec([]byte(`{"type":"echo","reduce":"avg"}`)))
}
