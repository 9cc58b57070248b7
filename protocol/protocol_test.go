package protocol_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestTaskRoundTrip(t *testing.T) {
	t.Parallel()
	in := protocol.Task{JobID: "job-1", TaskID: 42, Payload: json.RawMessage(`{"key":"a.jpg"}`)}
	body, err := protocol.EncodeTask(in)
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"job-1","task_id":42,"payload":{"key":"a.jpg"}}`, string(body))
	out, err := protocol.DecodeTask(body)
	require.NoError(t, err)
	require.Equal(t, in, out)
}

func TestDecodeTaskRejectsMalformedMessages(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		``, `not json`, `[1,2]`, `{"task_id": 1}`, `{"job_id": "j"}`, `{"job_id": "j", "task_id": 0}`,
		`{"job_id": "j", "task_id": -3}`, `{"job_id": "j", "task_id": 1.5}`, `{"job_id": "j", "task_id": "1"}`,
		`{"job_id": 7, "task_id": 1}`,
	} {
		_, err := protocol.DecodeTask([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "body %q", body)
	}
}

func TestDecodeTaskWithoutPayloadIsNull(t *testing.T) {
	t.Parallel()
	task, err := protocol.DecodeTask([]byte(`{"job_id": "j", "task_id": 1}`))
	require.NoError(t, err)
	require.Equal(t, json.RawMessage("null"), task.Payload)
}

// A plain worker in any language publishes just three fields: that is a
// completed task.
func TestThreeFieldResultIsCompleted(t *testing.T) {
	t.Parallel()
	r, err := protocol.DecodeResult([]byte(`{"job_id": "j", "task_id": 3, "result": [1, 2]}`))
	require.NoError(t, err)
	require.Equal(t, protocol.StatusCompleted, r.Status)
	require.False(t, r.Failed())
	require.JSONEq(t, `[1,2]`, string(r.Result))
}

func TestResultRoundTripWithAllFields(t *testing.T) {
	t.Parallel()
	body := `{"job_id":"j","task_id":3,"result":null,"status":"failed","error":"boom","worker":"w1","attempt":2,` +
		`"started_at":"2026-01-02T03:04:05.123456Z","finished_at":"2026-01-02T03:04:06Z"}`
	r, err := protocol.DecodeResult([]byte(body))
	require.NoError(t, err)
	require.True(t, r.Failed())
	require.Equal(t, "boom", r.Error)
	require.Equal(t, 2, r.Attempt)
	require.Equal(t, 123456000, r.StartedAt.Nanosecond())
	again, err := protocol.EncodeResult(r)
	require.NoError(t, err)
	require.JSONEq(t, body, string(again))
}

func TestDecodeResultRejectsUnknownStatus(t *testing.T) {
	t.Parallel()
	_, err := protocol.DecodeResult([]byte(`{"job_id": "j", "task_id": 1, "status": "maybe"}`))
	require.ErrorIs(t, err, protocol.ErrMalformed)
}

func TestMessageIDRoundTrip(t *testing.T) {
	t.Parallel()
	id := protocol.MessageID("01JOB:with:colons", 17)
	require.Equal(t, "01JOB:with:colons:17", id)
	job, task, err := protocol.ParseMessageID(id)
	require.NoError(t, err)
	require.Equal(t, "01JOB:with:colons", job)
	require.Equal(t, int64(17), task)
	for _, bad := range []string{"", "nocolon", ":1", "j:-1", "j:x"} { // "j:0" is a reduce task
		_, _, err := protocol.ParseMessageID(bad)
		require.ErrorIs(t, err, protocol.ErrMalformed, bad)
	}
}

func TestNamesArePrefixed(t *testing.T) {
	t.Parallel()
	n := protocol.NamesFor("acme.")
	for _, name := range []string{n.JobsExchange, n.TasksQueue, n.ResultsExchange, n.ResultsQueue,
		n.DeadLetterExchange, n.TasksDLQ, n.DeadQueue, n.ResultsDLQ} {
		require.Regexp(t, `^acme\.`, name)
	}
	require.Equal(t, "tasks.q", protocol.NamesFor("").TasksQueue)
}

func TestRetryTierNames(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 5 * time.Second: "5s", 30 * time.Second: "30s", 2 * time.Minute: "2m",
		10 * time.Minute: "10m", 90 * time.Minute: "1h30m", time.Hour: "1h", 250 * time.Millisecond: "250ms",
		90 * time.Second: "1m30s",
	} {
		require.Equal(t, want, protocol.RetryTierName(d), d.String())
	}
	require.Equal(t, "p.retry.5s.q", protocol.NamesFor("p.").RetryQueue("5s"))
	require.Equal(t, 0, protocol.RetryTier(1, 5))
	require.Equal(t, 4, protocol.RetryTier(9, 5))
	require.Equal(t, 0, protocol.RetryTier(0, 5))
}

func TestControlRoundTrip(t *testing.T) {
	t.Parallel()
	body, err := protocol.EncodeControl(protocol.Control{Type: protocol.ControlCancel, JobID: "j1"})
	require.NoError(t, err)
	c, err := protocol.DecodeControl(body)
	require.NoError(t, err)
	require.Equal(t, protocol.Control{Type: "cancel", JobID: "j1"}, c)
	_, err = protocol.DecodeControl([]byte(`{"type":"cancel"}`))
	require.ErrorIs(t, err, protocol.ErrMalformed)
}

// A pause names a job or a queue, never both, and its body leaves out
// the one it does not name.
func TestControlPauseNamesAJobOrAQueue(t *testing.T) {
	t.Parallel()
	body, err := protocol.EncodeControl(protocol.Control{Type: protocol.ControlPause, Queue: "q1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"pause","queue":"q1"}`, string(body))
	c, err := protocol.DecodeControl(body)
	require.NoError(t, err)
	require.Equal(t, protocol.Control{Type: "pause", Queue: "q1"}, c)
	body, err = protocol.EncodeControl(protocol.Control{Type: protocol.ControlResume, JobID: "j1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"resume","job_id":"j1"}`, string(body))
	for _, bad := range []string{`{"type":"pause","job_id":"j1","queue":"q1"}`, `{"type":"pause"}`, `{"type":"pause","queue":""}`} {
		_, err = protocol.DecodeControl([]byte(bad))
		require.ErrorIs(t, err, protocol.ErrMalformed, bad)
	}
	_, err = protocol.EncodeControl(protocol.Control{Type: protocol.ControlPause, JobID: "j1", Queue: "q1"})
	require.ErrorIs(t, err, protocol.ErrMalformed)
	require.Greater(t, protocol.PauseLease, 2*protocol.PauseRefresh, "one or two lost refreshes end no pause")
}

// An attempt outside what a task can have run (the store keeps attempts
// in 32 bits) is malformed, never truncated or passed on to the store.
func TestDecodeResultRangeChecksAttempt(t *testing.T) {
	t.Parallel()
	for _, attempt := range []string{"1099511627776", "-1", "2147483648"} {
		_, err := protocol.DecodeResult([]byte(`{"job_id": "j", "task_id": 1, "attempt": ` + attempt + `}`))
		require.ErrorIs(t, err, protocol.ErrMalformed, "attempt %s", attempt)
		_, err = protocol.DecodeResults([]byte(`{"job_id": "j", "results": [{"task_id": 1, "attempt": ` + attempt + `}]}`))
		require.ErrorIs(t, err, protocol.ErrMalformed, "attempt %s in a result batch", attempt)
	}
	r, err := protocol.DecodeResult([]byte(`{"job_id": "j", "task_id": 1, "attempt": 2147483647}`))
	require.NoError(t, err)
	require.Equal(t, 2147483647, r.Attempt)
}
