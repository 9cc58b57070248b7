// Package outcomes answers the outcomes RPC of reduce tasks: a worker
// running a job's reduce task asks, page by page, for the outcomes of the
// job's tasks in task id order (docs/protocol.md, "Reduce tasks"). Every
// server consumes the one request queue, so any server answers; each
// answer is one page read from the store as a stream and cut to the
// maximum message size, so neither side ever holds a job's outcomes whole.
package outcomes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// Store is what the responder reads.
type Store interface {
	// GetJob returns a job; warren.ErrNotFound when there is none.
	GetJob(ctx context.Context, id string) (warren.Job, error)
	// GetTask returns one task of a job (task 0 is the reduce task).
	GetTask(ctx context.Context, jobID string, taskID int64) (warren.TaskRecord, error)
	// ScanOutcomes streams a job's map task outcomes after a task id.
	ScanOutcomes(ctx context.Context, jobID string, after int64, fn func(warren.TaskOutcome) error) error
}

// Config configures a Responder.
type Config struct {
	// Conn is the connection to consume and answer on; the caller keeps
	// it open.
	Conn *amqp.Connection
	// Queue is the request queue (protocol.Names.OutcomesQueue), declared
	// with the topology.
	Queue string
	// Store is the job store.
	Store Store
	// MaxMessageBytes bounds the body of each answer; a page holds at
	// least one outcome, so it must exceed the per-task result limit.
	MaxMessageBytes int
	// Prefetch is how many requests the responder holds at once (each
	// is at most one page in memory); 0 means 4.
	Prefetch int
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Responder consumes outcome requests and answers them.
type Responder struct {
	cfg        Config
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
}

// maxRequestBytes bounds a request body: three small fields.
const maxRequestBytes = 4096

// New opens a channel on cfg.Conn and starts consuming cfg.Queue; Run
// answers what arrives.
func New(cfg Config) (*Responder, error) {
	if cfg.Conn == nil || cfg.Store == nil || cfg.Queue == "" || cfg.MaxMessageBytes <= 0 {
		return nil, errors.New("outcomes: New needs a Conn, a Queue, a Store and MaxMessageBytes")
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ch, err := cfg.Conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("outcomes: open a channel: %w", err)
	}
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("outcomes: set prefetch: %w", err)
	}
	d, err := ch.Consume(cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("outcomes: consume %s: %w", cfg.Queue, err)
	}
	return &Responder{cfg: cfg, ch: ch, deliveries: d}, nil
}

// Run answers requests until ctx is done (nil) or the channel closes (an
// error).
func (r *Responder) Run(ctx context.Context) error {
	defer r.ch.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-r.deliveries:
			if !ok {
				return errors.New("outcomes: the request channel closed")
			}
			r.handle(ctx, d)
		}
	}
}

// handle answers one request, then acks it. A request without reply_to
// has nobody to answer and is dropped; an answer that cannot be published
// means a closed channel, which Run sees next.
func (r *Responder) handle(ctx context.Context, d amqp.Delivery) {
	defer func() { _ = d.Ack(false) }()
	if d.ReplyTo == "" {
		r.cfg.Logger.Warn("outcomes: a request without reply_to was dropped", "message_id", d.MessageId)
		return
	}
	body := r.answer(ctx, d.Body)
	err := r.ch.PublishWithContext(ctx, "", d.ReplyTo, false, false, amqp.Publishing{
		ContentType: protocol.ContentType, CorrelationId: d.CorrelationId, Body: body,
		DeliveryMode: amqp.Transient, Expiration: protocol.OutcomesExpiration,
	})
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("outcomes: answering a request failed", "reply_to", d.ReplyTo, "error", err)
	}
}

// errPageFull stops a scan when the page is full.
var errPageFull = errors.New("page full")

// answer returns the answer to a request body.
func (r *Responder) answer(ctx context.Context, body []byte) []byte {
	if len(body) > maxRequestBytes {
		return errorAnswer(protocol.OutcomesBadRequest, fmt.Sprintf("request over %d bytes", maxRequestBytes))
	}
	req, err := protocol.DecodeOutcomesRequest(body)
	if err != nil {
		return errorAnswer(protocol.OutcomesBadRequest, err.Error())
	}
	code, msg := r.check(ctx, req)
	if code == "" {
		code, msg = r.page(ctx, req)
	}
	if code == protocol.OutcomesUnavailable && ctx.Err() == nil {
		r.cfg.Logger.Warn("outcomes: the store could not be read; the reduce task is retried", "job_id", req.JobID,
			"generation", req.Generation, "after", req.After, "error", msg)
	}
	if code != "" {
		return errorAnswer(code, msg)
	}
	return []byte(msg)
}

// check reports whether the job is reducing at the request's generation:
// "" when it is, else the error code and message.
func (r *Responder) check(ctx context.Context, req protocol.OutcomesRequest) (code, msg string) {
	job, err := r.cfg.Store.GetJob(ctx, req.JobID)
	switch {
	case errors.Is(err, warren.ErrNotFound):
		return protocol.OutcomesStale, "job " + req.JobID + " does not exist"
	case err != nil:
		return protocol.OutcomesUnavailable, "reading the job: " + err.Error()
	case job.State.Terminal() || job.ReduceState != warren.ReduceRunning:
		return protocol.OutcomesStale, fmt.Sprintf("job %s is not reducing (state %s, reduce_state %q)", req.JobID, job.State, job.ReduceState)
	}
	task, err := r.cfg.Store.GetTask(ctx, req.JobID, warren.ReduceTaskID)
	switch {
	case errors.Is(err, warren.ErrNotFound):
		return protocol.OutcomesStale, "job " + req.JobID + " has no reduce task"
	case err != nil:
		return protocol.OutcomesUnavailable, "reading the reduce task: " + err.Error()
	case task.State.Terminal():
		return protocol.OutcomesStale, fmt.Sprintf("the reduce task of job %s is %s already", req.JobID, task.State)
	case req.Generation != 0 && req.Generation != task.Generation:
		return protocol.OutcomesStale, fmt.Sprintf("the reduce task of job %s is at generation %d, not %d", req.JobID, task.Generation, req.Generation)
	}
	return "", ""
}

// pageOverhead is room for the answer's envelope and its "next".
const pageOverhead = 64

// page reads the outcomes after req.After into one answer no larger than
// MaxMessageBytes (at least one outcome, whatever its size): code "" and
// the answer's body, or an error code and its message.
func (r *Responder) page(ctx context.Context, req protocol.OutcomesRequest) (code, body string) {
	var (
		buf  bytes.Buffer
		n    int
		last int64
		full bool
	)
	buf.WriteString(`{"outcomes":[`)
	err := r.cfg.Store.ScanOutcomes(ctx, req.JobID, req.After, func(o warren.TaskOutcome) error {
		item, err := encodeOutcome(o)
		if err != nil {
			return fmt.Errorf("task %d: %w", o.TaskID, err)
		}
		if n > 0 && buf.Len()+1+len(item)+pageOverhead > r.cfg.MaxMessageBytes {
			full = true
			return errPageFull
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item)
		n++
		last = o.TaskID
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return protocol.OutcomesUnavailable, "reading the outcomes: " + err.Error()
	}
	buf.WriteString(`]`)
	if full {
		buf.WriteString(`,"next":`)
		buf.WriteString(strconv.FormatInt(last, 10))
	}
	buf.WriteString(`}`)
	return "", buf.String()
}

// encodeOutcome is one outcome of a page. Marshalling validates the
// result once; one that is not JSON (a store keeps results byte for
// byte; warren's workers only ever send JSON) goes as a JSON string.
func encodeOutcome(o warren.TaskOutcome) ([]byte, error) {
	w := protocol.TaskOutcome{TaskID: o.TaskID, State: string(o.State), Error: o.Error}
	if len(o.Result) > 0 {
		w.Result = o.Result
	}
	item, err := json.Marshal(w)
	if err == nil || w.Result == nil {
		return item, err
	}
	w.Result, _ = json.Marshal(string(o.Result))
	return json.Marshal(w)
}

// errorAnswer is an error answer's body.
func errorAnswer(code, msg string) []byte {
	b, _ := json.Marshal(protocol.OutcomesReply{Error: &protocol.OutcomesError{Code: code, Message: msg}})
	return b
}
