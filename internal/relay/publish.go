package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/store"
)

// MaxRefusals is how many times in a row the broker may refuse a task's
// message, published alone, before the relay fails the task. A refusal
// (the broker closes the channel with PRECONDITION_FAILED) says the
// message itself is at fault, so a few tries are enough to rule out
// anything passing.
const MaxRefusals = 3

// failure is a task whose message cannot be published, and why.
type failure struct {
	task store.OutboxTask
	err  string
}

// round is what publishing one claim came to.
type round struct {
	confirmed []store.TaskRef
	sizes     []int // tasks per confirmed message
	failed    []failure
	err       error // the first error that left tasks pending
	// spans are the recording spans of the round's messages: endSpans
	// ends those that neither a confirm nor a failure ended.
	spans []trace.Span
}

func (rd *round) confirm(m message) {
	m.span.End()
	rd.sizes = append(rd.sizes, len(m.tasks))
	for _, t := range m.tasks {
		rd.confirmed = append(rd.confirmed, t.Ref())
	}
}

func (rd *round) note(err error) {
	if rd.err == nil {
		rd.err = err
	}
}

func (rd *round) fail(log *slog.Logger, t store.OutboxTask, size int, reason string) {
	log.Error("relay: failing a task whose message cannot be published", "job_id", t.JobID, "task_id", t.TaskID,
		"bytes", size, "error", reason)
	rd.failed = append(rd.failed, failure{task: t, err: reason})
}

// result is what RelayBatch's publish returns: the confirmed tasks, or
// the first error when there are none. Failed tasks are neither: they
// stay pending until the relay fails them.
// errNotConfirmed ends the span of a message the broker did not confirm
// for want of an error of its own: the round stopped before.
var errNotConfirmed = errors.New("relay: not confirmed; the tasks stay pending")

// endSpans ends the spans of the round's messages that are not ended yet,
// as failures: their messages were not confirmed, and their tasks stay
// pending (a span ended already is left as it is).
func (rd *round) endSpans() {
	err := cmp.Or(rd.err, errNotConfirmed)
	for _, span := range rd.spans {
		spans.Fail(span, err)
		span.End()
	}
}

func (rd *round) result(log *slog.Logger, claimed int) ([]store.TaskRef, error) {
	if len(rd.confirmed) == 0 && rd.err != nil {
		return nil, rd.err
	}
	if rd.err != nil {
		log.Warn("relay: some tasks were not confirmed; they stay pending",
			"confirmed", len(rd.confirmed), "claimed", claimed, "error", rd.err)
	}
	return rd.confirmed, nil
}

// pending is a message out on the shared channel, waiting for its
// confirm.
type pending struct {
	m message
	c *broker.Confirmation
}

// publish publishes the claimed tasks and waits for the broker's
// confirms. Messages over MaxMessageBytes go out alone, each on a channel
// of its own; the others share the publisher's channel. If the broker
// closes that channel over a message it refuses (its max_message_size is
// below MaxMessageBytes), every message unconfirmed on it fails alike, so
// each is published again alone to tell the refused one from the others.
//
// groups are the claimed tasks as group cut them into messages, less
// those hold kept back.
func (r *Relay) publish(ctx context.Context, groups [][]store.OutboxTask) *round {
	rd := &round{}
	var (
		shared []pending
		alone  []message
	)
publishing:
	for _, g := range groups {
		for _, m := range r.encode(g, rd) {
			if m.size() > r.cfg.MaxMessageBytes {
				alone = append(alone, m)
				continue
			}
			c, err := r.cfg.Publisher.Publish(ctx, m.out.Exchange, m.out.Key, m.out.Msg)
			if err != nil {
				rd.note(err)
				break publishing // the channel is gone or ctx is done: wait for what is out
			}
			shared = append(shared, pending{m: m, c: c})
		}
	}
	r.publishAlone(ctx, rd, alone)
	var refused []message
	for _, p := range shared {
		switch err := p.c.Wait(ctx); {
		case err == nil:
			rd.confirm(p.m)
		case errors.Is(err, broker.ErrRefused):
			refused = append(refused, p.m)
		default:
			rd.note(err)
		}
	}
	if len(refused) > 0 {
		r.cfg.Logger.Warn("relay: the broker refused a task message and closed the relay's channel; publishing its unconfirmed messages alone to find which (is the broker's max_message_size below the relay's max message bytes?)",
			"max_message_bytes", r.cfg.MaxMessageBytes, "messages", len(refused))
		r.publishAlone(ctx, rd, refused)
	}
	rd.endSpans()
	return rd
}

// publishAlone publishes each message on a channel of its own, in order.
// A message the broker refuses MaxRefusals times in a row fails its task,
// or, when it carries several, is split into single task messages that
// are tried the same way. Any other error stops it, leaving the rest
// pending. It reports whether it got through every message.
func (r *Relay) publishAlone(ctx context.Context, rd *round, msgs []message) bool {
	for _, m := range msgs {
		refusal, err := r.sendAlone(ctx, m)
		switch {
		case err != nil:
			rd.note(err)
			return false
		case refusal == nil:
			rd.confirm(m)
		case len(m.tasks) > 1:
			spans.Fail(m.span, fmt.Errorf("refused by the broker; its tasks go alone: %w", refusal))
			m.span.End()
			var singles []message
			for _, t := range m.tasks {
				singles = append(singles, r.encode([]store.OutboxTask{t}, rd)...)
			}
			if !r.publishAlone(ctx, rd, singles) {
				return false
			}
		default:
			reason := refusalError(m.size(), refusal)
			spans.Fail(m.span, errors.New(reason))
			m.span.End()
			rd.fail(r.cfg.Logger, m.tasks[0], m.size(), reason)
		}
	}
	return true
}

// sendAlone publishes m alone until the broker confirms it (nil, nil),
// refuses it MaxRefusals times (the last refusal, nil) or fails otherwise
// (nil, the error).
func (r *Relay) sendAlone(ctx context.Context, m message) (refusal, err error) {
	for range MaxRefusals {
		err := r.cfg.Publisher.PublishAlone(ctx, m.out.Exchange, m.out.Key, m.out.Msg)
		if !errors.Is(err, broker.ErrRefused) {
			return nil, err
		}
		refusal = err
	}
	return refusal, nil
}

// refusalError is the error recorded for a task whose message of size
// bytes the broker refused with err: RabbitMQ says "message size N is
// larger than (configured) max size M" for one over its max_message_size.
func refusalError(size int, err error) string {
	reason := err.Error()
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		reason = amqpErr.Reason
	}
	if strings.Contains(reason, "message size") {
		return fmt.Sprintf("task message too large for the broker (%d bytes): %s", size, reason)
	}
	return fmt.Sprintf("task message refused by the broker (%d bytes): %s", size, reason)
}

// fail records each task whose message cannot be published as failed,
// with its reason, so that its job can close; a task that is not pending
// any more (its job was closed meanwhile) is left as it is.
func (r *Relay) fail(ctx context.Context, failed []failure) error {
	if len(failed) == 0 {
		return nil
	}
	now := time.Now().UTC()
	outcomes := make([]store.Outcome, len(failed))
	for i, f := range failed {
		outcomes[i] = store.Outcome{JobID: f.task.JobID, TaskID: f.task.TaskID, State: warren.TaskFailed,
			Error: f.err, Attempts: f.task.Attempts, Generation: f.task.Generation, FinishedAt: &now}
	}
	report, err := r.cfg.Store.ApplyOutcomes(ctx, outcomes)
	if err != nil {
		return fmt.Errorf("relay: fail %d tasks whose message cannot be published (they stay pending): %w", len(failed), err)
	}
	if r.cfg.OnFailed != nil && report.AppliedFailed > 0 {
		r.cfg.OnFailed(report.AppliedFailed)
	}
	if r.cfg.OnReadyToClose != nil {
		for _, id := range report.ReadyToClose {
			r.cfg.OnReadyToClose(id)
		}
	}
	return nil
}
