// Package protocol is warren's wire format: the task and result messages,
// their AMQP properties and headers, and the exchange and queue names. It
// is documented for other languages in docs/protocol.md; change both
// together.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ContentType is the content type of every warren message body.
const ContentType = "application/json"

// AMQP header names carried by task and dead-letter messages.
const (
	// HeaderRetry is the number of retries a task message has had so far
	// (0 on its first run).
	HeaderRetry = "x-retry"
	// HeaderMaxRetries is the job's retry budget, copied onto every task
	// message so that stateless workers can decide on a retry.
	HeaderMaxRetries = "x-max-retries"
	// HeaderError is the error text of a task dead-lettered by a worker.
	HeaderError = "x-error"
	// HeaderReason is why a message was dead-lettered; one of the Reason
	// constants.
	HeaderReason = "x-failure-reason"
	// HeaderWorker names the worker that dead-lettered a message.
	HeaderWorker = "x-worker"
	// HeaderFailedAt is the RFC 3339 time a worker dead-lettered a message.
	HeaderFailedAt = "x-failed-at"
	// HeaderStartedAt is the RFC 3339 time the failed run of a
	// dead-lettered task started, when it ran.
	HeaderStartedAt = "x-started-at"
	// HeaderTraceback is where the failure of a dead-lettered task came
	// from, when its worker knows (a Python traceback, a Go panic's
	// stack): its last MaxTracebackBytes. An older server ignores it.
	HeaderTraceback = "x-traceback"
)

// MaxTracebackBytes is the most of a traceback a worker sends (its last
// bytes, where the failure is; of a Go panic's stack, whose top is the
// panic's site, its first): in Result.Traceback and HeaderTraceback.
const MaxTracebackBytes = 16 << 10

// Dead-letter reasons carried in HeaderReason.
const (
	// ReasonPermanent: the handler returned a permanent error.
	ReasonPermanent = "permanent"
	// ReasonRetriesExhausted: the task failed transiently 1+max_retries times.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUnknownType: no handler on the queue serves the task's type.
	ReasonUnknownType = "unknown_type"
	// ReasonMalformed: the message is not a valid task or result.
	ReasonMalformed = "malformed"
	// ReasonDeliveryLimit: the broker dead-lettered the message after the
	// quorum queue's delivery limit (the task kept crashing its worker).
	ReasonDeliveryLimit = "delivery_limit"
	// ReasonRejected: the broker dead-lettered a rejected message.
	ReasonRejected = "rejected"
	// ReasonExpired: the broker dead-lettered an expired message.
	ReasonExpired = "expired"
	// ReasonTimeout: the task's last run overran its time limit (the job's
	// task_timeout) and it had no retries left.
	ReasonTimeout = "timeout"
	// ReasonTooLarge: the task message is larger than its worker accepts
	// (its MaxMessageBytes); the tasks were not run.
	ReasonTooLarge = "too_large"
	// ReasonResultTooLarge: the handler's result is larger than its
	// worker may publish (its MaxResultBytes). The task failed for good:
	// the same input would give the same result.
	ReasonResultTooLarge = "result_too_large"
)

// Message size limits. A component publishes no message body larger than
// its MaxMessageBytes and takes none: with RabbitMQ's prefetch, which
// counts messages, that is what bounds the bytes a process holds.
const (
	// DefaultMaxMessageBytes is the default largest message body, 4 MiB:
	// well under RabbitMQ's max_message_size (16 MiB by default on 4.x,
	// 128 MiB on 3.x). Servers and workers should agree on it.
	DefaultMaxMessageBytes = 4 << 20
	// DefaultMaxResultBytes is the default largest result of one task, as
	// JSON, 1 MiB: like a payload, a result travels through the broker;
	// large data belongs in object storage, with a reference in the result.
	DefaultMaxResultBytes = 1 << 20
	// EnvelopeBytes is the room a message keeps around the largest
	// payload or result it carries: ids, worker, timestamps. A worker's
	// MaxResultBytes, and a server's MaxTaskBytes, may be at most their
	// MaxMessageBytes less this.
	EnvelopeBytes = 16 << 10
)

// Result statuses. A result without a status is a completed task.
const (
	// StatusCompleted marks a task that succeeded.
	StatusCompleted = "completed"
	// StatusFailed marks a task that failed permanently.
	StatusFailed = "failed"
	// StatusRetried marks an attempt message (RoutingKeyAttempt): a run
	// that failed and is retried, with its Error, Traceback and Attempt.
	// It records the attempt and never changes the task.
	StatusRetried = "retried"
)

// ErrMalformed is wrapped by every decode error: the message can never be
// processed and must be dead-lettered, not redelivered.
var ErrMalformed = errors.New("malformed message")

// Task is the body of a task message.
type Task struct {
	// JobID is the job the task belongs to.
	JobID string `json:"job_id"`
	// TaskID is the task's position in its job, 1..N, or ReduceTaskID
	// (0) for the job's reduce task, which has Reduce set.
	TaskID int64 `json:"task_id"`
	// Payload is the task's whole input.
	Payload json.RawMessage `json:"payload"`
	// Reduce marks the job's reduce task (see ReduceTaskID): it runs a
	// reducer over the outcomes of the job's map tasks, read through the
	// outcomes RPC, and its result is the job's. Only a single task
	// message carries it, and only with TaskID ReduceTaskID.
	Reduce bool `json:"reduce,omitempty"`
	// ExpectedTasks is the number of map tasks of the job, on a reduce
	// task only.
	ExpectedTasks int64 `json:"expected_tasks,omitempty"`
}

// Result is the body of a result message. Only JobID, TaskID and Result
// are required; a worker in any language may publish just those three.
type Result struct {
	// JobID is the task's job. It is left out of the elements of a
	// ResultBatch body, and only there can it be empty.
	JobID  string          `json:"job_id,omitempty"`
	TaskID int64           `json:"task_id"`
	Result json.RawMessage `json:"result"`
	// Status is StatusCompleted (the default when empty) or StatusFailed;
	// StatusRetried only in an attempt message (RoutingKeyAttempt).
	Status string `json:"status,omitempty"`
	// Error is the failure's text when Status is StatusFailed or
	// StatusRetried.
	Error string `json:"error,omitempty"`
	// Traceback is where the failure came from, when the worker knows:
	// its last MaxTracebackBytes. An older server ignores it.
	Traceback string `json:"traceback,omitempty"`
	// Worker identifies the worker process that ran the task.
	Worker string `json:"worker,omitempty"`
	// Attempt is the run that produced this result, starting at 1.
	Attempt int `json:"attempt,omitempty"`
	// StartedAt and FinishedAt bound the handler's run.
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Spawn are the payloads of the tasks the run adds to its job
	// (spawned tasks), in order: recorded with a completed result only,
	// in the same transaction, with the job's next task ids. A failed
	// result's spawn is ignored; a reduce task's is refused (its outcome
	// is recorded failed). A server older than spawn ignores the field.
	Spawn []json.RawMessage `json:"spawn,omitempty"`
	// SpawnParts, when not 0, is the number of messages (2 or more) a
	// spawn too large for one message travels in: this one holds its part
	// SpawnPart (1..SpawnParts) in Spawn. The last part carries the run's
	// result; the others' result is null. SpawnRun names the run, the
	// same in each of its parts, so that parts of two runs of a task never
	// mix. The result is recorded, with every part's tasks in part order,
	// once every part is.
	SpawnRun   string `json:"spawn_run,omitempty"`
	SpawnPart  int    `json:"spawn_part,omitempty"`
	SpawnParts int    `json:"spawn_parts,omitempty"`
}

// MaxSpawnParts is the most messages one run's spawn may travel in.
const MaxSpawnParts = 10000

// Failed reports whether the result records a permanent failure.
func (r Result) Failed() bool { return r.Status == StatusFailed }

// MessageID is the AMQP message_id of a task and of its result:
// "<job_id>:<task_id>". It is also the task's idempotency key.
func MessageID(jobID string, taskID int64) string {
	return jobID + ":" + strconv.FormatInt(taskID, 10)
}

// ParseMessageID splits a MessageID back into its job and task ids. The
// task id is positive, or ReduceTaskID for a reduce task's "<job_id>:0".
func ParseMessageID(id string) (string, int64, error) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: message id %q is not job_id:task_id", ErrMalformed, id)
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || n < ReduceTaskID {
		return "", 0, fmt.Errorf("%w: message id %q has no task id", ErrMalformed, id)
	}
	return id[:i], n, nil
}

// EncodeTask returns the JSON body of a task message.
func EncodeTask(t Task) ([]byte, error) {
	if err := checkTask(t); err != nil {
		return nil, err
	}
	if len(t.Payload) == 0 {
		t.Payload = json.RawMessage("null")
	}
	return json.Marshal(t)
}

// DecodeTask parses and validates a task message body; a payload nested
// deeper than MaxPayloadDepth is malformed. Every error wraps ErrMalformed.
func DecodeTask(body []byte) (Task, error) {
	var t Task
	if err := decodeStrict(body, &t); err != nil {
		return Task{}, err
	}
	if err := checkTask(t); err != nil {
		return Task{}, err
	}
	if err := checkPayloadDepth(t.TaskID, t.Payload); err != nil {
		return Task{}, err
	}
	if len(t.Payload) == 0 {
		t.Payload = json.RawMessage("null")
	}
	return t, nil
}

// checkPayloadDepth refuses a payload nested deeper than MaxPayloadDepth.
func checkPayloadDepth(taskID int64, payload json.RawMessage) error {
	if d := Depth(payload); d > MaxPayloadDepth {
		return fmt.Errorf("%w: task %d: the payload is nested %d levels deep, more than the protocol's %d", ErrMalformed, taskID, d, MaxPayloadDepth)
	}
	return nil
}

// EncodeResult returns the JSON body of a result message: of a task, or
// of a reduce task (TaskID ReduceTaskID), whose result is the job's.
func EncodeResult(r Result) ([]byte, error) {
	if err := checkResultIDs(r.JobID, r.TaskID); err != nil {
		return nil, err
	}
	if len(r.Result) == 0 {
		r.Result = json.RawMessage("null")
	}
	return json.Marshal(r)
}

// DecodeResult parses and validates a single result message body (not a
// result batch). A result without a status is completed. Every error
// wraps ErrMalformed.
func DecodeResult(body []byte) (Result, error) {
	var r Result
	if err := decodeStrict(body, &r); err != nil {
		return Result{}, err
	}
	if err := checkReduceResult(body, r.TaskID); err != nil {
		return Result{}, err
	}
	return checkResult(r)
}

// checkReduceResult refuses a single result body whose task_id is 0 by
// omission: only a reduce task's result names task 0, and it names it.
func checkReduceResult(body []byte, taskID int64) error {
	if taskID != ReduceTaskID {
		return nil
	}
	var m struct {
		TaskID *int64 `json:"task_id"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.TaskID == nil {
		return fmt.Errorf("%w: task_id is missing", ErrMalformed)
	}
	return nil
}

// decodeStrict unmarshals one JSON object. Unknown fields are allowed so
// that newer senders can add optional fields.
func decodeStrict(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// checkTask validates a single task's ids: a positive task id, or
// ReduceTaskID on a reduce task; a reduce task has no other id.
func checkTask(t Task) error {
	if t.Reduce {
		if t.JobID == "" {
			return fmt.Errorf("%w: job_id is missing", ErrMalformed)
		}
		if t.TaskID != ReduceTaskID {
			return fmt.Errorf("%w: a reduce task's task_id must be %d, got %d", ErrMalformed, ReduceTaskID, t.TaskID)
		}
		if t.ExpectedTasks < 0 {
			return fmt.Errorf("%w: expected_tasks must not be negative, got %d", ErrMalformed, t.ExpectedTasks)
		}
		return nil
	}
	if t.TaskID == ReduceTaskID && t.JobID != "" {
		return fmt.Errorf("%w: task_id %d is only valid with \"reduce\": true", ErrMalformed, ReduceTaskID)
	}
	return checkIDs(t.JobID, t.TaskID)
}

// checkResultIDs validates the ids of a single result: a positive task
// id, or ReduceTaskID for a reduce task's result.
func checkResultIDs(jobID string, taskID int64) error {
	if taskID == ReduceTaskID && jobID != "" {
		return nil
	}
	return checkIDs(jobID, taskID)
}

func checkIDs(jobID string, taskID int64) error {
	if jobID == "" {
		return fmt.Errorf("%w: job_id is missing", ErrMalformed)
	}
	if taskID < 1 {
		return fmt.Errorf("%w: task_id must be a positive integer, got %d", ErrMalformed, taskID)
	}
	return nil
}

// MaxBatchSize is the most tasks one task batch message may carry.
const MaxBatchSize = 1000

// BatchTask is one task inside a task batch message.
type BatchTask struct {
	// TaskID is the task's position in its job, 1..N.
	TaskID int64 `json:"task_id"`
	// Payload is the task's whole input.
	Payload json.RawMessage `json:"payload"`
}

// Batch is the body of a task batch message: several tasks of one job,
// sent as one message when the job's batch_size is above 1. Each task
// keeps its own id, payload and outcome; see docs/protocol.md.
type Batch struct {
	// JobID is the job all the tasks belong to.
	JobID string `json:"job_id"`
	// Tasks are the batch's tasks, in task id order, each id once.
	Tasks []BatchTask `json:"tasks"`
}

// BatchMessageID is the AMQP message_id of a task batch message and of
// its result batch: "<job_id>:<first_task_id>+<count>".
func BatchMessageID(jobID string, first int64, count int) string {
	return jobID + ":" + strconv.FormatInt(first, 10) + "+" + strconv.Itoa(count)
}

// EncodeBatch returns the JSON body of a task batch message.
func EncodeBatch(b Batch) ([]byte, error) {
	if err := checkBatch(b.JobID, len(b.Tasks), func(i int) int64 { return b.Tasks[i].TaskID }); err != nil {
		return nil, err
	}
	for i := range b.Tasks {
		if len(b.Tasks[i].Payload) == 0 {
			b.Tasks[i].Payload = json.RawMessage("null")
		}
	}
	return json.Marshal(b)
}

// DecodeTasks parses and validates the body of a task message, single or
// batch, and returns its tasks (one for a single task message) and whether
// the body was a batch. A payload nested deeper than MaxPayloadDepth makes
// the whole body malformed. Every error wraps ErrMalformed.
func DecodeTasks(body []byte) ([]Task, bool, error) {
	var m struct {
		Task
		Tasks []BatchTask `json:"tasks"`
	}
	if err := decodeStrict(body, &m); err != nil {
		return nil, false, err
	}
	if m.Tasks == nil {
		if err := checkTask(m.Task); err != nil {
			return nil, false, err
		}
		if err := checkPayloadDepth(m.TaskID, m.Payload); err != nil {
			return nil, false, err
		}
		m.Payload = orNull(m.Payload)
		return []Task{m.Task}, false, nil
	}
	if m.TaskID != 0 {
		return nil, true, fmt.Errorf("%w: a batch has tasks, not a task_id", ErrMalformed)
	}
	if m.Reduce {
		return nil, true, fmt.Errorf("%w: a reduce task is never batched", ErrMalformed)
	}
	if err := checkBatch(m.JobID, len(m.Tasks), func(i int) int64 { return m.Tasks[i].TaskID }); err != nil {
		return nil, true, err
	}
	tasks := make([]Task, len(m.Tasks))
	for i, t := range m.Tasks {
		if err := checkPayloadDepth(t.TaskID, t.Payload); err != nil {
			return nil, true, err
		}
		tasks[i] = Task{JobID: m.JobID, TaskID: t.TaskID, Payload: orNull(t.Payload)}
	}
	return tasks, true, nil
}

// ResultBatch is the body of a result batch message: the outcomes of some
// or all of the tasks of one task batch message. Each element is a Result
// whose job_id may be left out (it is the batch's).
type ResultBatch struct {
	// JobID is the job all the results belong to.
	JobID string `json:"job_id"`
	// Results are the tasks' outcomes, each task id once.
	Results []Result `json:"results"`
}

// EncodeResultBatch returns the JSON body of a result batch message. The
// results' own JobID fields are left out of the body.
func EncodeResultBatch(b ResultBatch) ([]byte, error) {
	if err := checkBatch(b.JobID, len(b.Results), func(i int) int64 { return b.Results[i].TaskID }); err != nil {
		return nil, err
	}
	out := ResultBatch{JobID: b.JobID, Results: make([]Result, len(b.Results))}
	for i, r := range b.Results {
		if r.JobID != "" && r.JobID != b.JobID {
			return nil, fmt.Errorf("%w: result %d belongs to job %q, not the batch's %q", ErrMalformed, i, r.JobID, b.JobID)
		}
		r.JobID = "" // left out: it is the batch's
		r.Result = orNull(r.Result)
		out.Results[i] = r
	}
	return json.Marshal(out)
}

// DecodeResults parses and validates the body of a result message, single
// or batch, and returns its results with their JobID set. A result without
// a status is completed. Every error wraps ErrMalformed.
func DecodeResults(body []byte) ([]Result, error) {
	var m struct {
		Result
		Results []Result `json:"results"`
	}
	if err := decodeStrict(body, &m); err != nil {
		return nil, err
	}
	if m.Results == nil {
		if err := checkReduceResult(body, m.TaskID); err != nil {
			return nil, err
		}
		r, err := checkResult(m.Result)
		if err != nil {
			return nil, err
		}
		return []Result{r}, nil
	}
	if m.TaskID != 0 {
		return nil, fmt.Errorf("%w: a result batch has results, not a task_id", ErrMalformed)
	}
	if err := checkBatch(m.JobID, len(m.Results), func(i int) int64 { return m.Results[i].TaskID }); err != nil {
		return nil, err
	}
	for i, r := range m.Results {
		if r.JobID != "" && r.JobID != m.JobID {
			return nil, fmt.Errorf("%w: result %d belongs to job %q, not the batch's %q", ErrMalformed, i, r.JobID, m.JobID)
		}
		r.JobID = m.JobID
		r, err := checkResult(r)
		if err != nil {
			return nil, err
		}
		m.Results[i] = r
	}
	return m.Results, nil
}

// checkResult validates a decoded result and fills in its defaults.
func checkResult(r Result) (Result, error) {
	if err := checkResultIDs(r.JobID, r.TaskID); err != nil {
		return Result{}, err
	}
	switch r.Status {
	case "":
		r.Status = StatusCompleted
	case StatusCompleted, StatusFailed, StatusRetried:
	default:
		return Result{}, fmt.Errorf("%w: unknown status %q", ErrMalformed, r.Status)
	}
	if r.Attempt < 0 || r.Attempt > math.MaxInt32 {
		return Result{}, fmt.Errorf("%w: attempt must be between 0 and %d, got %d", ErrMalformed, math.MaxInt32, r.Attempt)
	}
	if err := checkSpawnParts(r); err != nil {
		return Result{}, err
	}
	r.Result = orNull(r.Result)
	return r, nil
}

// checkBatch validates a batch's job id and its n task ids (id(i) is the
// i-th): 1..MaxBatchSize of them, each positive, in increasing order.
func checkBatch(jobID string, n int, id func(i int) int64) error {
	if jobID == "" {
		return fmt.Errorf("%w: job_id is missing", ErrMalformed)
	}
	if n == 0 || n > MaxBatchSize {
		return fmt.Errorf("%w: a batch must hold 1 to %d tasks, got %d", ErrMalformed, MaxBatchSize, n)
	}
	var prev int64
	for i := range n {
		t := id(i)
		if t < 1 {
			return fmt.Errorf("%w: task_id must be a positive integer, got %d", ErrMalformed, t)
		}
		if t <= prev {
			return fmt.Errorf("%w: a batch's task ids must increase, got %d after %d", ErrMalformed, t, prev)
		}
		prev = t
	}
	return nil
}

// orNull returns raw, or JSON null when it is empty.
func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// checkSpawnParts validates the spawn part fields of a result: none, or
// a part 1..SpawnParts of 2..MaxSpawnParts, of a named run (at most 64
// bytes), of a completed result.
func checkSpawnParts(r Result) error {
	switch {
	case r.SpawnParts == 0 && r.SpawnPart == 0 && r.SpawnRun == "":
		return nil
	case r.SpawnParts < 2 || r.SpawnParts > MaxSpawnParts:
		return fmt.Errorf("%w: spawn_parts must be between 2 and %d, got %d", ErrMalformed, MaxSpawnParts, r.SpawnParts)
	case r.SpawnPart < 1 || r.SpawnPart > r.SpawnParts:
		return fmt.Errorf("%w: spawn_part must be between 1 and spawn_parts (%d), got %d", ErrMalformed, r.SpawnParts, r.SpawnPart)
	case r.SpawnRun == "" || len(r.SpawnRun) > 64:
		return fmt.Errorf("%w: spawn_run must be 1 to 64 bytes, got %d", ErrMalformed, len(r.SpawnRun))
	case r.Status != StatusCompleted:
		return fmt.Errorf("%w: only a completed result spawns in parts, got status %q", ErrMalformed, r.Status)
	case r.TaskID == ReduceTaskID:
		return fmt.Errorf("%w: a reduce task cannot spawn", ErrMalformed)
	}
	return nil
}
