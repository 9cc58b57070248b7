package wire

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// ReasonUnknown is DeadLetter.Reason when neither a worker nor the broker
// said why the message was dead-lettered.
const ReasonUnknown = "unknown"

// DeadLetter is a delivery of a dead-letter queue (the aggregator's
// dead.q or the people's tasks.dlq) as its consumer reads it, once: its
// tasks, and why, when and after how many runs they failed. The aggregator
// and the dead-letter operations read every dead letter the same way.
type DeadLetter struct {
	// Tasks are the message's tasks: one, or every task of a batch the
	// broker dead-lettered whole. Empty when Malformed is set.
	Tasks []protocol.Task
	// Batch says the body was a task batch.
	Batch bool
	// Malformed is why the body is not a task message (it wraps
	// protocol.ErrMalformed); nil for a task message.
	Malformed error
	// JobID and TaskID name the message's (first) task; for a malformed
	// body, what could be read of them from the body or the message id,
	// possibly nothing.
	JobID  string
	TaskID int64
	// TaskIDs are, for a malformed body, the ids of the tasks of job JobID
	// that the message was for, as far as they can be told (see
	// ReadDeadLetter); empty when nothing tells them. Nil for a task
	// message: Tasks has them.
	TaskIDs []int64
	// MessageID is the message_id property.
	MessageID string
	// RoutingKey is the key the message was dead-lettered with.
	RoutingKey string

	// Reason is why the task was dead-lettered: the worker's
	// x-failure-reason, else the reason of the broker's most recent
	// dead-lettering (Death), else ReasonUnknown. A body that is not a
	// task makes it protocol.ReasonMalformed whatever the headers say.
	Reason string
	// Error is the failure's text: the worker's x-error, else a sentence
	// naming the queue the broker dead-lettered the message from, else
	// (for a malformed body) why it is not a task; "" when nothing says.
	Error string
	// ByBroker says the broker dead-lettered the message (Reason is then
	// Death.Reason), not a worker.
	ByBroker bool
	// Worker is x-worker: the worker that dead-lettered the task.
	Worker string
	// Traceback is x-traceback: where the failure came from, when the
	// worker sent it; "" otherwise.
	Traceback string
	// StartedAt is x-started-at, when the failed run started; zero when it
	// did not run or no header says.
	StartedAt time.Time
	// FailedAt is when the task was dead-lettered: x-failed-at, else the
	// time of the broker's most recent dead-lettering; zero when nothing
	// says.
	FailedAt time.Time
	// Generation is x-generation, the generation of the dead-lettered
	// task(s); 0 (unknown) when absent.
	Generation int
	// Retries is x-retry, the task's retries before it was dead-lettered.
	// The queue's own x-delivery-count is not counted: it counts the
	// deliveries of the dead letter, not runs of the task.
	Retries int
	// Death is the broker's most recent dead-lettering of the message;
	// zero when it has none.
	Death Death

	d amqp.Delivery // the source of a replay
}

// Death is one dead-lettering by the broker, as its x-death header (or
// x-last-death-* and x-first-death-*) records it.
type Death struct {
	// Reason is the broker's reason: protocol.ReasonDeliveryLimit,
	// ReasonRejected or ReasonExpired.
	Reason string
	// Queue is the queue the message was dead-lettered from.
	Queue string
	// Time is when; zero when only the x-*-death-* headers say.
	Time time.Time
}

// ReadDeadLetter reads a delivery of a dead-letter queue. It never fails:
// a body that is not a task message is reported in Malformed, with what
// could be read. The tasks of a malformed body (TaskIDs) are those its
// job_id and task_id, or job_id and tasks' task_ids, name, read without
// its payloads (a payload too deep to decode, say, does not hide them);
// else the task of a message id <job_id>:<task_id>, or tasks <first> to
// <first>+<count>-1 of a batch's message id <job_id>:<first>+<count>.
func ReadDeadLetter(d amqp.Delivery) DeadLetter {
	h := d.Headers
	dl := DeadLetter{
		MessageID:  d.MessageId,
		RoutingKey: d.RoutingKey,
		Reason:     headerString(h, protocol.HeaderReason),
		Worker:     headerString(h, protocol.HeaderWorker),
		Traceback:  headerString(h, protocol.HeaderTraceback),
		StartedAt:  headerTime(h, protocol.HeaderStartedAt),
		FailedAt:   headerTime(h, protocol.HeaderFailedAt),
		Retries:    headerInt(h, protocol.HeaderRetry),
		Generation: Generation(d),
		Death:      lastDeath(h),
		d:          d,
	}
	switch {
	case dl.Reason != "":
		dl.Error = headerString(h, protocol.HeaderError)
	case dl.Death.Reason != "":
		dl.Reason, dl.ByBroker = dl.Death.Reason, true
		dl.Error = fmt.Sprintf("dead-lettered by the broker from %q: %s", dl.Death.Queue, dl.Death.Reason)
	default:
		dl.Reason = ReasonUnknown
	}
	if dl.FailedAt.IsZero() {
		dl.FailedAt = dl.Death.Time
	}
	dl.Tasks, dl.Batch, dl.Malformed = protocol.DecodeTasks(d.Body)
	if dl.Malformed != nil {
		dl.Batch = false
		dl.JobID, dl.TaskIDs = readIDs(d)
		if len(dl.TaskIDs) > 0 {
			dl.TaskID = dl.TaskIDs[0]
		}
		dl.Reason = protocol.ReasonMalformed
		dl.Error = cmp.Or(dl.Error, dl.Malformed.Error())
		return dl
	}
	dl.JobID, dl.TaskID = dl.Tasks[0].JobID, dl.Tasks[0].TaskID
	return dl
}

// Attempts is the number of runs the task had: Retries + 1.
func (dl DeadLetter) Attempts() int { return dl.Retries + 1 }

// TaskError is the error a task failed by this dead letter records: the
// reason and the worker's text, or the broker's sentence (with a hint
// when the task kept being delivered without an ack).
func (dl DeadLetter) TaskError() string {
	if !dl.ByBroker {
		return dl.Reason + ": " + cmp.Or(dl.Error, dl.Reason)
	}
	if dl.Reason == protocol.ReasonDeliveryLimit {
		return dl.Error + " (the task was delivered too many times without an ack; it may crash its worker)"
	}
	return dl.Error
}

// WithoutBodies returns dl without its message body and task payloads,
// for callers that hold many dead letters only to show them. Replay needs
// them.
func (dl DeadLetter) WithoutBodies() DeadLetter {
	dl.d.Body = nil
	tasks := make([]protocol.Task, len(dl.Tasks))
	for i, t := range dl.Tasks {
		t.Payload = nil
		tasks[i] = t
	}
	dl.Tasks = tasks
	return dl
}

// failureHeaders are dropped from a replayed task: they describe the
// failure that the replay undoes, and the broker's would make a later
// dead-lettering of the replayed task look like an older one.
var failureHeaders = []string{
	protocol.HeaderReason, protocol.HeaderError, protocol.HeaderWorker, protocol.HeaderFailedAt, protocol.HeaderTraceback,
	"x-death",
	"x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange",
	headerDeliveryCount,
}

// Replay returns the task message that runs task t of dl again, for the
// work queue: the dead letter's body (for a task of a batch, the task's
// own single task message) and properties, x-retry 0, x-generation
// generation (the one the store reopened the task at) and the failure
// headers dropped. It fails only when t cannot be encoded.
func (dl DeadLetter) Replay(names protocol.Names, t protocol.Task, generation int) (Outbound, error) {
	if t.JobID == "" {
		return Outbound{}, fmt.Errorf("%w: a replay needs a task", protocol.ErrMalformed)
	}
	msg := copyOf(dl.d, t)
	if dl.Batch {
		body, err := protocol.EncodeTask(t)
		if err != nil {
			return Outbound{}, err
		}
		msg.Body, msg.MessageId = body, protocol.MessageID(t.JobID, t.TaskID)
	}
	for _, k := range failureHeaders {
		delete(msg.Headers, k)
	}
	msg.Headers[protocol.HeaderRetry] = int64(0)
	setGeneration(msg.Headers, generation)
	msg.ContentType = cmp.Or(msg.ContentType, protocol.ContentType)
	return Outbound{Exchange: names.JobsExchange, Key: protocol.TaskRoutingKey(headerQueue(dl.d.Headers)), Msg: msg}, nil
}

// lastDeath returns the broker's most recent dead-lettering: the first
// x-death entry (RabbitMQ keeps them most recent first), else the
// x-last-death or x-first-death headers. A task that waited in a retry
// tier carries an "expired" entry for it, so the first death is not
// necessarily the one that brought it here.
func lastDeath(h amqp.Table) Death {
	if deaths, ok := h["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			d := Death{Reason: headerString(t, "reason"), Queue: headerString(t, "queue")}
			if at, ok := t["time"].(time.Time); ok {
				d.Time = at.UTC()
			}
			if d.Reason != "" {
				return d
			}
		}
	}
	for _, prefix := range []string{"x-last-death-", "x-first-death-"} {
		if reason := headerString(h, prefix+"reason"); reason != "" {
			return Death{Reason: reason, Queue: headerString(h, prefix+"queue")}
		}
	}
	return Death{}
}

// readIDs reads what it can of a malformed task message's ids: from the
// body when it names a job and its tasks, else from the message id (when
// the body names a job, only if the message id names the same one), else
// the body's job alone. ids are in increasing order, each once, and empty
// when nothing names a task.
func readIDs(d amqp.Delivery) (jobID string, ids []int64) {
	jobID, ids = bodyIDs(d.Body)
	if len(ids) > 0 {
		slices.Sort(ids)
		return jobID, slices.Compact(ids)
	}
	if job, fromID := messageIDs(d.MessageId); jobID == "" || job == jobID {
		return job, fromID
	}
	return jobID, nil
}

// bodyIDs reads the job_id and the task ids of a task message body, single
// or batch, token by token, skipping the payloads without decoding them.
// jobID is "" when the body is not a JSON object with a string job_id;
// ids are empty when the object does not end, or names no task or more
// than a batch may hold, or names them in a way no task message does.
func bodyIDs(body []byte) (jobID string, ids []int64) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if !delim(dec, '{') {
		return "", nil
	}
	var (
		single        int64
		batch, broken bool
	)
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return jobID, nil
		}
		switch key {
		case "job_id":
			jobID = readString(dec)
		case "task_id":
			single = readTaskID(dec)
		case "tasks":
			batch = true
			if ids, broken = batchIDs(dec); broken {
				return jobID, nil
			}
		default:
			if !skip(dec) {
				return jobID, nil
			}
		}
	}
	if !delim(dec, '}') {
		return jobID, nil
	}
	switch {
	case jobID == "":
		return "", nil
	case batch && single == 0:
		return jobID, ids
	case !batch && single > 0:
		return jobID, []int64{single}
	}
	return jobID, nil
}

// batchIDs reads a batch body's tasks array, and returns its task ids;
// broken says it is not an array of objects or holds more tasks than a
// batch may, or a task without a usable id.
func batchIDs(dec *json.Decoder) (ids []int64, broken bool) {
	if !delim(dec, '[') {
		return nil, true
	}
	for dec.More() {
		if !delim(dec, '{') || len(ids) == protocol.MaxBatchSize {
			return nil, true
		}
		var id int64
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return nil, true
			}
			if key == "task_id" {
				id = readTaskID(dec)
			} else if !skip(dec) {
				return nil, true
			}
		}
		if !delim(dec, '}') || id == 0 {
			return nil, true
		}
		ids = append(ids, id)
	}
	return ids, !delim(dec, ']')
}

// readTaskID reads a task id: a positive whole number; 0 when the value is
// anything else (which it skips).
func readTaskID(dec *json.Decoder) int64 {
	tok, err := dec.Token()
	if err != nil {
		return 0
	}
	switch v := tok.(type) {
	case float64:
		if v >= 1 && v <= math.MaxInt64 && v == math.Trunc(v) {
			return int64(v)
		}
	case json.Delim:
		skipRest(dec) // if it cannot, the caller's next read fails
	}
	return 0
}

// readString reads a string; "" when the value is anything else (which it
// skips).
func readString(dec *json.Decoder) string {
	tok, err := dec.Token()
	if err != nil {
		return ""
	}
	switch v := tok.(type) {
	case string:
		return v
	case json.Delim:
		skipRest(dec) // if it cannot, the caller's next read fails
	}
	return ""
}

// delim reads the next token and reports whether it is d.
func delim(dec *json.Decoder, d json.Delim) bool {
	tok, err := dec.Token()
	return err == nil && tok == d
}

// skip reads the next value whole, however deep, and reports whether it
// could.
func skip(dec *json.Decoder) bool {
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	if _, ok := tok.(json.Delim); ok {
		return skipRest(dec)
	}
	return true
}

// skipRest reads the rest of an array or object whose opening token was
// just read, and reports whether it could.
func skipRest(dec *json.Decoder) bool {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
	return true
}

// TaskMessageIDs returns the job and tasks a task message's message id
// names: <job_id>:<task_id>, or a batch's <job_id>:<first>+<count>, whose
// tasks are first..first+count-1. ids are empty when the id is neither.
// A dead letter keeps the id of the task message it copies, so it names
// the dead letter's tasks without reading its body.
func TaskMessageIDs(id string) (jobID string, ids []int64) { return messageIDs(id) }

// messageIDs reads a task message's message id: <job_id>:<task_id>, or a
// batch's <job_id>:<first>+<count>, whose tasks are first..first+count-1.
// ids are empty when the id is neither, or counts more tasks than a batch
// may hold.
func messageIDs(id string) (jobID string, ids []int64) {
	if jobID, taskID, err := protocol.ParseMessageID(id); err == nil {
		return jobID, []int64{taskID}
	}
	i := strings.LastIndexByte(id, ':')
	first, count, ok := strings.Cut(id[i+1:], "+")
	if i <= 0 || !ok {
		return "", nil
	}
	f, err := strconv.ParseInt(first, 10, 64)
	n, err2 := strconv.Atoi(count)
	if err != nil || err2 != nil || f < 1 || n < 1 || n > protocol.MaxBatchSize || f-1 > math.MaxInt64-int64(n) {
		return "", nil
	}
	ids = make([]int64, n)
	for k := range ids {
		ids[k] = f + int64(k)
	}
	return id[:i], ids
}
