package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestReduceTaskRoundTrip(t *testing.T) {
	t.Parallel()
	in := protocol.Task{JobID: "j", TaskID: protocol.ReduceTaskID, Reduce: true, ExpectedTasks: 1000, Payload: json.RawMessage(`{"k":1}`)}
	body, err := protocol.EncodeTask(in)
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"j","task_id":0,"reduce":true,"expected_tasks":1000,"payload":{"k":1}}`, string(body))
	tasks, batch, err := protocol.DecodeTasks(body)
	require.NoError(t, err)
	require.False(t, batch)
	require.Equal(t, []protocol.Task{in}, tasks)
	one, err := protocol.DecodeTask(body)
	require.NoError(t, err)
	require.Equal(t, in, one)
}

func TestTaskIDZeroNeedsReduce(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"job_id": "j", "task_id": 0}`,
		`{"job_id": "j", "task_id": 0, "reduce": false}`,
	} {
		_, _, err := protocol.DecodeTasks([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
		_, err = protocol.DecodeTask([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
	}
	for _, body := range []string{
		`{"job_id": "j", "task_id": 3, "reduce": true}`,
		`{"job_id": "", "task_id": 0, "reduce": true}`,
		`{"job_id": "j", "task_id": 0, "reduce": 1}`,
		`{"job_id": "j", "task_id": 0, "reduce": true, "expected_tasks": -1}`,
		`{"job_id": "j", "reduce": true, "tasks": [{"task_id": 1}]}`,
	} {
		_, _, err := protocol.DecodeTasks([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
	}
	_, err := protocol.EncodeTask(protocol.Task{JobID: "j"})
	require.ErrorIs(t, err, protocol.ErrMalformed, "task 0 without Reduce")
}

func TestReduceResultIsTaskZero(t *testing.T) {
	t.Parallel()
	body, err := protocol.EncodeResult(protocol.Result{JobID: "j", TaskID: protocol.ReduceTaskID, Result: json.RawMessage(`6`)})
	require.NoError(t, err)
	rs, err := protocol.DecodeResults(body)
	require.NoError(t, err)
	require.Equal(t, int64(0), rs[0].TaskID)
	require.JSONEq(t, `6`, string(rs[0].Result))
	_, err = protocol.DecodeResults([]byte(`{"job_id":"j","results":[{"task_id":0,"result":1}]}`))
	require.ErrorIs(t, err, protocol.ErrMalformed, "a result batch never holds task 0")
	job, id, err := protocol.ParseMessageID("j:0")
	require.NoError(t, err)
	require.Equal(t, "j", job)
	require.Equal(t, int64(0), id)
}

func TestOutcomesRequestRoundTrip(t *testing.T) {
	t.Parallel()
	body, err := protocol.EncodeOutcomesRequest(protocol.OutcomesRequest{JobID: "j", Generation: 2, After: 0})
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"j","generation":2,"after":0}`, string(body))
	r, err := protocol.DecodeOutcomesRequest(body)
	require.NoError(t, err)
	require.Equal(t, protocol.OutcomesRequest{JobID: "j", Generation: 2}, r)
	for _, bad := range []string{`{}`, `{"job_id":""}`, `{"job_id":"j","after":-1}`, `{"job_id":"j","generation":-1}`, `[]`} {
		_, err := protocol.DecodeOutcomesRequest([]byte(bad))
		require.ErrorIs(t, err, protocol.ErrMalformed, bad)
	}
}

func TestOutcomesReplyPagesAndErrors(t *testing.T) {
	t.Parallel()
	r, err := protocol.DecodeOutcomesReply([]byte(`{"outcomes":[{"task_id":1,"state":"completed","result":2},
		{"task_id":2,"state":"failed","error":"boom"}],"next":2}`), 0)
	require.NoError(t, err)
	require.Len(t, r.Outcomes, 2)
	require.Equal(t, int64(2), *r.Next)
	require.Equal(t, "boom", r.Outcomes[1].Error)

	r, err = protocol.DecodeOutcomesReply([]byte(`{"outcomes":[{"task_id":5,"state":"completed","result":null}],"next":null}`), 4)
	require.NoError(t, err)
	require.Nil(t, r.Next, "null next: the last page")

	r, err = protocol.DecodeOutcomesReply([]byte(`{"error":{"code":"stale","message":"job closed"}}`), 0)
	require.NoError(t, err)
	require.Equal(t, protocol.OutcomesStale, r.Error.Code)

	for _, bad := range []string{
		`{}`, `{"outcomes":[]}`, `{"error":{"message":"x"}}`,
		`{"outcomes":[{"task_id":1,"state":"pending"}]}`,
		`{"outcomes":[{"task_id":2,"state":"completed"},{"task_id":2,"state":"completed"}]}`,
		`{"outcomes":[{"task_id":3,"state":"completed"}],"next":2}`,
	} {
		_, err := protocol.DecodeOutcomesReply([]byte(bad), 0)
		require.ErrorIs(t, err, protocol.ErrMalformed, bad)
	}
	_, err = protocol.DecodeOutcomesReply([]byte(`{"outcomes":[{"task_id":3,"state":"completed"}]}`), 3)
	require.ErrorIs(t, err, protocol.ErrMalformed, "a page starts above after")

	next := int64(1)
	body, err := protocol.EncodeOutcomesReply(protocol.OutcomesReply{Outcomes: []protocol.TaskOutcome{{TaskID: 1, State: "completed", Result: json.RawMessage(`1`)}}, Next: &next}, 0)
	require.NoError(t, err)
	require.JSONEq(t, `{"outcomes":[{"task_id":1,"state":"completed","result":1}],"next":1}`, string(body))
}

func TestOutcomesQueueName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "p.outcomes.q", protocol.NamesFor("p.").OutcomesQueue)
}
