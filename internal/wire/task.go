package wire

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// TaskMessage is what one task message carries: one task, or consecutive
// tasks of one job sent as a task batch, with the properties and headers
// they share.
type TaskMessage struct {
	// JobID is the job of every task.
	JobID string
	// Type is the job's type: which handler runs the tasks.
	Type string
	// Tasks are the tasks in increasing id order: one makes a single task
	// message, more a task batch message.
	Tasks []protocol.BatchTask
	// Retries is the tasks' retries so far (x-retry), the same for all.
	Retries int
	// MaxRetries is the job's retry budget (x-max-retries).
	MaxRetries int
	// Generation is the tasks' generation (x-generation), the same for
	// all; 0 leaves the header out.
	Generation int
	// Timeout is the limit of each run of the tasks (x-task-timeout, in
	// whole milliseconds, rounded up and at most math.MaxInt32): the
	// job's task timeout. 0 leaves the header out.
	Timeout time.Duration
	// Queue is the job's work queue; "" or protocol.DefaultQueue routes
	// to the default one and leaves x-queue out.
	Queue string
	// Reduce makes the message the job's reduce task: its one task must
	// be protocol.ReduceTaskID, the body says "reduce": true and
	// ExpectedTasks, and the header x-reduce is 1.
	Reduce bool
	// ExpectedTasks is the job's number of map tasks (Reduce only).
	ExpectedTasks int64
}

// Tasks returns the publishing of m for the work queue: persistent,
// JSON, with the ids, properties and headers of docs/protocol.md. The
// error says why the tasks cannot be encoded (it wraps
// protocol.ErrMalformed).
func Tasks(names protocol.Names, m TaskMessage) (Outbound, error) {
	if len(m.Tasks) == 0 {
		return Outbound{}, fmt.Errorf("%w: a task message needs a task", protocol.ErrMalformed)
	}
	first := m.Tasks[0]
	var (
		body []byte
		err  error
		id   string
	)
	if m.Reduce && len(m.Tasks) > 1 {
		return Outbound{}, fmt.Errorf("%w: a reduce task is never batched", protocol.ErrMalformed)
	}
	if len(m.Tasks) == 1 {
		body, err = protocol.EncodeTask(protocol.Task{JobID: m.JobID, TaskID: first.TaskID, Payload: first.Payload,
			Reduce: m.Reduce, ExpectedTasks: m.ExpectedTasks})
		id = protocol.MessageID(m.JobID, first.TaskID)
	} else {
		body, err = protocol.EncodeBatch(protocol.Batch{JobID: m.JobID, Tasks: m.Tasks})
		id = protocol.BatchMessageID(m.JobID, first.TaskID, len(m.Tasks))
	}
	if err != nil {
		return Outbound{}, err
	}
	out := Outbound{Exchange: names.JobsExchange, Key: protocol.TaskRoutingKey(m.Queue), Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     id,
		CorrelationId: m.JobID,
		Type:          m.Type,
		Timestamp:     time.Now().UTC(),
		Headers: amqp.Table{
			protocol.HeaderRetry:      int64(m.Retries),
			protocol.HeaderMaxRetries: int64(m.MaxRetries),
		},
		Body: body,
	}}
	setGeneration(out.Msg.Headers, m.Generation)
	if m.Reduce {
		out.Msg.Headers[protocol.HeaderReduce] = int64(1)
	}
	if m.Queue != "" && m.Queue != protocol.DefaultQueue {
		out.Msg.Headers[protocol.HeaderQueue] = m.Queue
	}
	if m.Timeout > 0 {
		ms := (m.Timeout + time.Millisecond - 1) / time.Millisecond
		out.Msg.Headers[protocol.HeaderTaskTimeout] = int64(min(ms, math.MaxInt32))
	}
	return out, nil
}

// TaskDelivery is a delivery of the work queue as a worker reads it,
// once, where it receives it: its tasks and what its properties and
// headers say about them. It also builds the copies that settle its
// tasks (Retry, DeadLetter, Split, Results), from the delivery as it came.
type TaskDelivery struct {
	// Tasks are the message's tasks: one for a single task message, each
	// task of a batch in order. Empty when Malformed is set.
	Tasks []protocol.Task
	// Batch says the body was a task batch: each task is settled with a
	// single task message of its own, and a redelivered batch is split.
	Batch bool
	// Reduce says the message is a job's reduce task (its one task has
	// Reduce set and task id protocol.ReduceTaskID): a reducer runs it
	// over the outcomes RPC, and its result is the job's.
	Reduce bool
	// Malformed is why the body is not a task message (it wraps
	// protocol.ErrMalformed); nil for a task message.
	Malformed error
	// Type is the type property: which handler runs the tasks.
	Type string
	// Retries is x-retry, the tasks' retries so far; 0 when absent or not
	// a non-negative integer.
	Retries int
	// MaxRetries is x-max-retries, the job's retry budget;
	// warren.DefaultMaxRetries when absent or not a non-negative integer.
	MaxRetries int
	// Redelivered is the broker's redelivered flag: an earlier delivery
	// of this message was not settled (its worker died, lost its
	// connection, or shut down mid-way).
	Redelivered bool
	// Generation is x-generation, the tasks' generation; 0 (unknown) when
	// absent. The copies that settle the tasks carry it.
	Generation int
	// Timeout is x-task-timeout, the limit of each run of the tasks; 0
	// (no limit) when absent or not a positive integer. The copies that
	// settle the tasks carry it.
	Timeout time.Duration
	// Queue is x-queue, the tasks' work queue: protocol.DefaultQueue when
	// absent or not a valid queue name. A retry goes to its delay tiers.
	Queue string
	// Trace is the trace context of the span that published the message
	// (traceparent, tracestate); invalid when it carries none (see Trace).
	// The copies that settle the tasks carry it, unless the worker puts
	// its own span's there (SetTrace).
	Trace trace.SpanContext
	// Bounces is x-unserved: how many times workers put the tasks back
	// for want of a handler (Unserved); 0 when absent.
	Bounces int
	// FirstUnservedAt is x-first-unserved-at: when a worker first put the
	// tasks back for want of a handler; zero when absent or not a time.
	FirstUnservedAt time.Time
	// Holds is x-held: how many times workers put the tasks back because
	// their job or queue was paused (Held); 0 when absent.
	Holds int

	d amqp.Delivery // the source of every copy
}

// ErrTooLarge is wrapped by the Malformed error of a message larger than
// its reader takes (ReadTaskWithin): it was not read at all.
var ErrTooLarge = errors.New("message too large")

// ReadTaskWithin is ReadTask for a reader that takes bodies of at most
// maxBytes: a larger body is not decoded, and is reported in Malformed,
// wrapping ErrTooLarge, for the worker to dead-letter whole.
func ReadTaskWithin(d amqp.Delivery, maxBytes int) TaskDelivery {
	if len(d.Body) <= maxBytes {
		return ReadTask(d)
	}
	m := readTaskHeaders(d)
	m.Malformed = fmt.Errorf("%w: the task message is %d bytes, over this worker's limit of %d (MaxMessageBytes; "+
		"keep it equal to the server's --max-message-bytes)", ErrTooLarge, len(d.Body), maxBytes)
	return m
}

// ReadTask reads a delivery of the work queue. It never fails: a body
// that is not a task message is reported in Malformed, for the worker to
// dead-letter.
func ReadTask(d amqp.Delivery) TaskDelivery {
	m := readTaskHeaders(d)
	m.Tasks, m.Batch, m.Malformed = protocol.DecodeTasks(d.Body)
	if m.Malformed != nil {
		m.Batch = false // it is dead-lettered whole, as it came
	}
	m.Reduce = m.Malformed == nil && m.Tasks[0].Reduce
	return m
}

// readTaskHeaders is what ReadTask reads from d's properties and headers.
func readTaskHeaders(d amqp.Delivery) TaskDelivery {
	m := TaskDelivery{
		Type:        d.Type,
		Retries:     headerInt(d.Headers, protocol.HeaderRetry),
		MaxRetries:  warren.DefaultMaxRetries,
		Redelivered: d.Redelivered,
		Generation:  Generation(d),
		Trace:       Trace(d),
		d:           d,
	}
	if n, ok := lookupInt(d.Headers, protocol.HeaderMaxRetries); ok {
		m.MaxRetries = n
	}
	m.Timeout = time.Duration(headerInt(d.Headers, protocol.HeaderTaskTimeout)) * time.Millisecond
	m.Queue = headerQueue(d.Headers)
	m.Bounces = headerInt(d.Headers, protocol.HeaderUnserved)
	m.FirstUnservedAt = headerTime(d.Headers, protocol.HeaderFirstUnservedAt)
	m.Holds = headerInt(d.Headers, protocol.HeaderHeld)
	return m
}

// headerQueue is the work queue x-queue names: protocol.DefaultQueue when
// it is absent or not a valid queue name.
func headerQueue(h amqp.Table) string {
	if q := headerString(h, protocol.HeaderQueue); protocol.CheckQueueName(q) == nil {
		return q
	}
	return protocol.DefaultQueue
}

// Attempt is the number of the run the delivery is for: Retries + 1.
func (m TaskDelivery) Attempt() int { return m.Retries + 1 }

// Retry returns the copy of task t of m that schedules its next run after
// delay: x-retry incremented, the other headers kept, no expiration (a
// per-message TTL would cut the tier's delay short), for the retry
// exchange with the routing key of delay's tier. The tier's queue holds
// it for delay and the broker dead-letters it back to the work queue.
func (m TaskDelivery) Retry(names protocol.Names, t protocol.Task, delay time.Duration) Outbound {
	msg := m.copyOf(t)
	msg.Headers[protocol.HeaderRetry] = int64(m.Retries + 1)
	msg.Expiration = ""
	return Outbound{Exchange: names.RetryExchange, Key: protocol.RetryRoutingKey(m.Queue, protocol.RetryTierName(delay)), Msg: msg}
}

// Unserved returns the copy of task t of m that a worker without a
// handler for its type puts back for another worker after delay: for the
// retry exchange with the routing key of delay's tier, as Retry, but
// with x-retry kept (no run happened), x-unserved incremented and
// x-first-unserved-at set to now unless m has it already (the clear end
// is measured from the first time), and without x-delivery-count (the
// copy is a new message, so the queues' delivery limit never counts the
// bounces).
func (m TaskDelivery) Unserved(names protocol.Names, t protocol.Task, delay time.Duration, now time.Time) Outbound {
	msg := m.copyOf(t)
	msg.Expiration = ""
	delete(msg.Headers, headerDeliveryCount)
	msg.Headers[protocol.HeaderUnserved] = int64(m.Bounces + 1)
	first := m.FirstUnservedAt
	if first.IsZero() {
		first = now
	}
	msg.Headers[protocol.HeaderFirstUnservedAt] = formatTime(first)
	return Outbound{Exchange: names.RetryExchange, Key: protocol.RetryRoutingKey(m.Queue, protocol.RetryTierName(delay)), Msg: msg}
}

// Held returns the copy of task t of m that puts it back, for delay,
// because its job or work queue is paused (protocol.ControlPause): to
// m's queue's retry tier of delay, as Unserved does, with x-retry kept
// (no run happened), x-held incremented, the unserved headers as they
// are (a hold is not a bounce, and does not bring the clear end of an
// unserved task closer), and without x-delivery-count.
func (m TaskDelivery) Held(names protocol.Names, t protocol.Task, delay time.Duration) Outbound {
	msg := m.copyOf(t)
	msg.Expiration = ""
	delete(msg.Headers, headerDeliveryCount)
	msg.Headers[protocol.HeaderHeld] = int64(m.Holds + 1)
	return Outbound{Exchange: names.RetryExchange, Key: protocol.RetryRoutingKey(m.Queue, protocol.RetryTierName(delay)), Msg: msg}
}

// Results returns the result message of the completed tasks of m (Results
// with m's shape: a result batch for a batch message), carrying m's
// generation, so that warren can tell it from an outcome of an earlier
// copy of the tasks.
func (m TaskDelivery) Results(names protocol.Names, results []protocol.Result) (Outbound, error) {
	out, err := Results(names, results, m.Batch)
	if err != nil {
		return Outbound{}, err
	}
	if m.Generation > 0 {
		out.Msg.Headers = amqp.Table{protocol.HeaderGeneration: int64(m.Generation)}
	}
	return out, nil
}

// ResultsWithin returns the result messages of the completed tasks of m:
// the one Results returns when its body holds within maxBytes, else, for
// a batch message, result batches of consecutive parts of results, each
// within maxBytes (halved until they fit; a part of one result is sent
// whatever its size, and the worker's result limit keeps it under).
func (m TaskDelivery) ResultsWithin(names protocol.Names, results []protocol.Result, maxBytes int) ([]Outbound, error) {
	out, err := m.Results(names, results)
	if err != nil {
		return nil, err
	}
	if len(out.Msg.Body) <= maxBytes || !m.Batch || len(results) == 1 {
		return []Outbound{out}, nil
	}
	half := len(results) / 2
	first, err := m.ResultsWithin(names, results[:half], maxBytes)
	if err != nil {
		return nil, err
	}
	rest, err := m.ResultsWithin(names, results[half:], maxBytes)
	if err != nil {
		return nil, err
	}
	return append(first, rest...), nil
}

// Failure is why and where a worker dead-letters a task.
type Failure struct {
	// Reason is one of the protocol Reason constants.
	Reason string
	// Error is the failure's text; the header keeps its first 4096 bytes.
	Error string
	// Worker names the worker.
	Worker string
	// StartedAt is when the failed run started; zero when it did not run.
	StartedAt time.Time
	// FailedAt is when the task was dead-lettered.
	FailedAt time.Time
	// Traceback is where the failure came from, when the worker knows;
	// the header keeps its last protocol.MaxTracebackBytes, "" none.
	Traceback string
}

// DeadLetter returns the copy of task t of m for the dead-letter exchange,
// with f in its failure headers and x-retry the retries so far. For a
// message that is not a task (m.Malformed), t is the zero Task and the
// copy is the whole message. Like the broker's own dead-lettering, it
// drops the expiration, so that the dead letter does not expire from the
// dead-letter queues.
func (m TaskDelivery) DeadLetter(names protocol.Names, t protocol.Task, f Failure) Outbound {
	msg := m.copyOf(t)
	msg.Expiration = ""
	msg.Headers[protocol.HeaderError] = truncate(f.Error, maxHeaderError)
	msg.Headers[protocol.HeaderReason] = f.Reason
	msg.Headers[protocol.HeaderWorker] = f.Worker
	msg.Headers[protocol.HeaderFailedAt] = formatTime(f.FailedAt)
	if f.StartedAt.IsZero() {
		delete(msg.Headers, protocol.HeaderStartedAt)
	} else {
		msg.Headers[protocol.HeaderStartedAt] = formatTime(f.StartedAt)
	}
	msg.Headers[protocol.HeaderRetry] = int64(m.Retries)
	if f.Traceback == "" {
		delete(msg.Headers, protocol.HeaderTraceback)
	} else {
		msg.Headers[protocol.HeaderTraceback] = TailBytes(f.Traceback, protocol.MaxTracebackBytes)
	}
	return Outbound{Exchange: names.DeadLetterExchange, Key: protocol.RoutingKeyTaskFailed, Msg: msg}
}

// RetriedAttempt returns the attempt message of a run of task r.TaskID of m
// that failed and is retried (r.Status protocol.StatusRetried), for the
// results exchange with protocol.RoutingKeyAttempt: a single result,
// with m's generation, its traceback cut to its last
// protocol.MaxTracebackBytes. The error says why it cannot be encoded.
func (m TaskDelivery) RetriedAttempt(names protocol.Names, r protocol.Result) (Outbound, error) {
	r.Status = protocol.StatusRetried
	r.Traceback = TailBytes(r.Traceback, protocol.MaxTracebackBytes)
	single := m
	single.Batch = false
	out, err := single.Results(names, []protocol.Result{r})
	if err != nil {
		return Outbound{}, err
	}
	out.Key, out.Optional = protocol.RoutingKeyAttempt, true
	return out, nil
}

// TailBytes returns the last n bytes of s at most, cut at a character's
// boundary: the end of a traceback is where its failure is.
func TailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// Split returns task t of a batch m as a single task message, with the
// batch's properties and headers but x-delivery-count (the copy is a new
// message; the broker counts its own deliveries), for the exchange and
// routing key the batch was delivered with.
func (m TaskDelivery) Split(t protocol.Task) Outbound {
	msg := m.copyOf(t)
	delete(msg.Headers, headerDeliveryCount)
	return Outbound{Exchange: m.d.Exchange, Key: m.d.RoutingKey, Msg: msg}
}

// copyOf returns a persistent copy of task t of m, with a copy of its
// headers that the caller may change: the message itself for a single
// task message (or one that is not a task), else a single task message of
// t with the batch's properties and headers.
func (m TaskDelivery) copyOf(t protocol.Task) amqp.Publishing {
	msg := copyOf(m.d, t)
	if !m.Batch {
		return msg
	}
	body, err := protocol.EncodeTask(t)
	if err != nil {
		// Only a bug can get here: t was decoded from a valid batch.
		panic(fmt.Sprintf("wire: encode task %s of a batch: %v", protocol.MessageID(t.JobID, t.TaskID), err))
	}
	msg.Body = body
	msg.MessageId = protocol.MessageID(t.JobID, t.TaskID)
	return msg
}

// copyOf returns a persistent copy of the task message d, with its body,
// properties and a copy of its headers. Its message id is d's, else
// task t's, else (a malformed message without one) an id unique on d's
// channel: the publisher needs an id to match a return to its message.
func copyOf(d amqp.Delivery, t protocol.Task) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+5)
	for k, v := range d.Headers {
		headers[k] = v
	}
	id := d.MessageId
	switch {
	case id != "":
	case t.JobID != "":
		id = protocol.MessageID(t.JobID, t.TaskID)
	default:
		id = fmt.Sprintf("malformed:%s:%d", d.ConsumerTag, d.DeliveryTag)
	}
	// UserId is left out: the broker closes the channel of a publish whose
	// user_id is not the publishing connection's user.
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       id,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
