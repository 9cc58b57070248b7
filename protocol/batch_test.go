package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestBatchRoundTrip(t *testing.T) {
	t.Parallel()
	in := protocol.Batch{JobID: "job-1", Tasks: []protocol.BatchTask{
		{TaskID: 3, Payload: json.RawMessage(`{"n":3}`)},
		{TaskID: 4},
		{TaskID: 9, Payload: json.RawMessage(`"x"`)},
	}}
	body, err := protocol.EncodeBatch(in)
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"job-1","tasks":[{"task_id":3,"payload":{"n":3}},{"task_id":4,"payload":null},{"task_id":9,"payload":"x"}]}`, string(body))
	tasks, batch, err := protocol.DecodeTasks(body)
	require.NoError(t, err)
	require.True(t, batch)
	require.Equal(t, []protocol.Task{
		{JobID: "job-1", TaskID: 3, Payload: json.RawMessage(`{"n":3}`)},
		{JobID: "job-1", TaskID: 4, Payload: json.RawMessage(`null`)},
		{JobID: "job-1", TaskID: 9, Payload: json.RawMessage(`"x"`)},
	}, tasks)
	require.Equal(t, "job-1:3+3", protocol.BatchMessageID("job-1", 3, 3))
}

func TestDecodeTasksReadsASingleTaskToo(t *testing.T) {
	t.Parallel()
	tasks, batch, err := protocol.DecodeTasks([]byte(`{"job_id":"j","task_id":7,"payload":[1]}`))
	require.NoError(t, err)
	require.False(t, batch)
	require.Equal(t, []protocol.Task{{JobID: "j", TaskID: 7, Payload: json.RawMessage(`[1]`)}}, tasks)
}

func TestDecodeTasksRejectsMalformedBatches(t *testing.T) {
	t.Parallel()
	tooMany := `{"job_id":"j","tasks":[` + strings.TrimSuffix(strings.Repeat(`{"task_id":1},`, protocol.MaxBatchSize+1), ",") + `]}`
	for _, body := range []string{
		`{"tasks":[{"task_id":1}]}`,                            // no job
		`{"job_id":"j","tasks":[]}`,                            // empty
		`{"job_id":"j","tasks":[{"task_id":0}]}`,               // bad id
		`{"job_id":"j","tasks":[{"task_id":2},{"task_id":2}]}`, // repeated id
		`{"job_id":"j","tasks":[{"task_id":3},{"task_id":2}]}`, // out of order
		`{"job_id":"j","task_id":1,"tasks":[{"task_id":1}]}`,   // both shapes
		`{"job_id":"j","tasks":{"task_id":1}}`,                 // not an array
		tooMany,
	} {
		_, _, err := protocol.DecodeTasks([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
	}
	_, err := protocol.EncodeBatch(protocol.Batch{JobID: "j"})
	require.ErrorIs(t, err, protocol.ErrMalformed)
}

func TestResultBatchRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	in := protocol.ResultBatch{JobID: "job-1", Results: []protocol.Result{
		{TaskID: 1, Result: json.RawMessage(`2`), Worker: "w", Attempt: 1, StartedAt: &at, FinishedAt: &at},
		{JobID: "job-1", TaskID: 2, Status: protocol.StatusFailed, Error: "bad input", Attempt: 1},
	}}
	body, err := protocol.EncodeResultBatch(in)
	require.NoError(t, err)
	require.NotContains(t, string(body), `"results":[{"job_id"`, "elements leave the job id to the batch")
	out, err := protocol.DecodeResults(body)
	require.NoError(t, err)
	require.Equal(t, []protocol.Result{
		{JobID: "job-1", TaskID: 1, Result: json.RawMessage(`2`), Status: protocol.StatusCompleted, Worker: "w", Attempt: 1, StartedAt: &at, FinishedAt: &at},
		{JobID: "job-1", TaskID: 2, Result: json.RawMessage(`null`), Status: protocol.StatusFailed, Error: "bad input", Attempt: 1},
	}, out)
}

func TestDecodeResultsReadsAPlainResultToo(t *testing.T) {
	t.Parallel()
	out, err := protocol.DecodeResults([]byte(`{"job_id":"j","task_id":5,"result":10}`))
	require.NoError(t, err)
	require.Equal(t, []protocol.Result{{JobID: "j", TaskID: 5, Result: json.RawMessage(`10`), Status: protocol.StatusCompleted}}, out)
}

func TestDecodeResultsRejectsMalformedBatches(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"job_id":"j","results":[]}`,
		`{"results":[{"task_id":1,"result":1}]}`,
		`{"job_id":"j","results":[{"job_id":"other","task_id":1,"result":1}]}`,
		`{"job_id":"j","results":[{"task_id":1,"status":"maybe"}]}`,
		`{"job_id":"j","results":[{"task_id":1},{"task_id":1}]}`,
		`{"job_id":"j","task_id":1,"results":[{"task_id":1}]}`,
	} {
		_, err := protocol.DecodeResults([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
	}
	_, err := protocol.EncodeResultBatch(protocol.ResultBatch{JobID: "j", Results: []protocol.Result{{JobID: "k", TaskID: 1}}})
	require.ErrorIs(t, err, protocol.ErrMalformed)
}
