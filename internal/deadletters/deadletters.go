// Package deadletters operates on the dead-letter queue for people
// (protocol.Names.TasksDLQ): it lists the dead-lettered tasks without
// removing them, replays them to the work queue with their retries reset,
// and purges them.
//
// Every operation takes the messages it needs on a channel of its own,
// with manual acknowledgement, and removes a message (acks it) only once
// it is done with it: a replayed task only after its republish was
// confirmed. Whatever it took and did not remove goes back to the queue
// when the channel closes, which also happens when the operation's
// context is done or the channel fails mid-way: nothing is lost. An
// operation sees at most the messages that were in the queue when it
// started, and none that another operation holds at the time.
//
// The broker does not put the messages back in their order, so the
// operations work in dead-letter time order (then job and task id), the
// order List shows.
package deadletters

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// DefaultSettleTimeout is Config.SettleTimeout when it is 0.
const DefaultSettleTimeout = 5 * time.Second

// compensateTimeout bounds the store writes that put a task back after its
// replay could not be published.
const compensateTimeout = 10 * time.Second

// Config configures a Queue.
type Config struct {
	// Conn is the broker connection; each operation opens (and closes) a
	// channel of its own on it. Required.
	Conn *amqp.Connection
	// Publisher republishes replayed tasks and reports their confirms.
	// Required.
	Publisher *broker.Publisher
	// Names are the installation's exchange and queue names: the
	// operations work on Names.TasksDLQ and replay to Names.JobsExchange.
	// Required.
	Names protocol.Names
	// Store reopens the task of each replayed message. Required.
	Store store.Store
	// Logger receives a line per replayed message and the problems. nil
	// means slog.Default().
	Logger *slog.Logger
	// SettleTimeout bounds how long an operation waits, after closing its
	// channel, for the broker to make the messages it took back and did
	// not remove visible again, so that the next operation sees them (the
	// broker returns them asynchronously). 0 means DefaultSettleTimeout.
	SettleTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = DefaultSettleTimeout
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Conn == nil:
		return errors.New("dlq: Config.Conn is required")
	case c.Publisher == nil:
		return errors.New("dlq: Config.Publisher is required")
	case c.Names.TasksDLQ == "" || c.Names.JobsExchange == "":
		return errors.New("dlq: Config.Names is required (see protocol.NamesFor)")
	case c.Store == nil:
		return errors.New("dlq: Config.Store is required")
	case c.SettleTimeout < 0:
		return fmt.Errorf("dlq: Config.SettleTimeout must be >= 0, got %s", c.SettleTimeout)
	}
	return nil
}

// Filter selects the messages of an operation.
type Filter struct {
	// JobID keeps only the messages of that job when not empty.
	JobID string
	// Limit is the most messages listed, replayed or purged; 0 means all.
	Limit int
	// Pending keeps, for List, only the pending dead letters (their
	// Message.Settled is ""): what still asks for a replay or a purge.
	Pending bool
	// Settled keeps, for Purge, only the settled dead letters: those a
	// redrive, a replay or a delete already dealt with, whose removal
	// loses nothing the store does not hold.
	Settled bool
}

func (f Filter) match(m Message) bool { return f.JobID == "" || m.JobID == f.JobID }

// Report says what Replay did.
type Report struct {
	// Replayed counts the messages republished and removed.
	Replayed int
	// Skipped counts the matching messages left in the queue: their task
	// is not failed any more (or unknown, or its job cancelled), or the
	// message is not a task.
	Skipped int
}

// Queue operates on the people's dead-letter queue. It is safe for
// concurrent use.
type Queue struct {
	cfg Config
	log *slog.Logger
}

// New returns a Queue, or an error naming the Config field that is wrong.
func New(cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Queue{cfg: cfg, log: cfg.Logger}, nil
}

// List returns the matching messages, oldest dead letter first, up to
// f.Limit, and leaves every message in the queue. A message whose body
// is not a task is listed with what can be read and reason "malformed".
// Each message says whether it is settled (Message.Settled), as the
// store has its job and tasks now.
func (q *Queue) List(ctx context.Context, f Filter) ([]Message, error) {
	o, err := q.open(ctx)
	if err != nil {
		return nil, err
	}
	defer o.finish(ctx)
	entries, err := o.fetch(ctx, f, false)
	if err != nil {
		return nil, err
	}
	if !f.Pending {
		entries = limit(entries, f.Limit)
	}
	if err := q.standing(ctx, entries); err != nil {
		return nil, err
	}
	out := make([]Message, 0, len(entries))
	for _, e := range entries {
		if f.Pending && e.msg.Settled != "" {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		out = append(out, e.msg)
	}
	return out, nil
}

// standing fills in the Settled of each entry's message from the store,
// each job and task read once. A batch is settled when all its tasks
// are, by the reason of its first; a message that is not a task is
// pending (someone must look at it).
func (q *Queue) standing(ctx context.Context, entries []entry) error {
	jobs := make(map[string]*warren.Job)
	for i := range entries {
		e := &entries[i]
		if e.dead.Malformed != nil || len(e.dead.Tasks) == 0 {
			continue
		}
		why := ""
		for n, t := range e.dead.Tasks {
			w, err := q.taskStanding(ctx, jobs, t.JobID, t.TaskID, e.dead.Generation)
			if err != nil {
				return fmt.Errorf("dlq: read task %d of job %s: %w", t.TaskID, t.JobID, err)
			}
			if w == "" {
				why = ""
				break
			}
			if n == 0 {
				why = w
			}
		}
		e.msg.Settled = why
	}
	return nil
}

// taskStanding says why the dead letter of task (jobID, taskID) at
// generation (0: unknown) is settled, "" when it is pending. jobs caches
// the jobs read (nil: the store has none). An unknown generation settles
// only what is settled whatever the generation: a task that completed
// since, or its job gone; a task still queued at the dead letter's
// generation is pending (its failure is on its way to the store).
func (q *Queue) taskStanding(ctx context.Context, jobs map[string]*warren.Job, jobID string, taskID int64, generation int) (string, error) {
	job, seen := jobs[jobID]
	if !seen {
		j, err := q.cfg.Store.GetJob(ctx, jobID)
		switch {
		case errors.Is(err, warren.ErrNotFound):
		case err != nil:
			return "", err
		default:
			job = &j
		}
		jobs[jobID] = job
	}
	switch {
	case job == nil:
		return SettledJobDeleted, nil
	case job.State == warren.JobCancelled:
		return SettledJobCancelled, nil
	}
	task, err := q.cfg.Store.GetTask(ctx, jobID, taskID)
	switch {
	case errors.Is(err, warren.ErrNotFound):
		return SettledUnknownTask, nil
	case err != nil:
		return "", err
	case generation > 0 && task.Generation > generation:
		return SettledResent, nil
	case task.State == warren.TaskCompleted:
		return SettledCompleted, nil
	}
	return "", nil
}

// Replay republishes the matching messages' tasks to the work queue,
// oldest dead letter first, until f.Limit were replayed. For each, it
// first reopens the task in the store: when the store says no (the task
// is not failed any more, or its job was cancelled or is unknown) the
// message stays where it is and counts as skipped, and so does a message
// that is not a task. Otherwise the task is published with its body and
// properties, x-retry 0 and the failure headers dropped, and the message
// is removed only once the broker confirmed the publish.
//
// On an error the report says what was done before it. If the broker
// surely did not take a reopened task (nacked, returned, never sent), the
// store is put back as it was before the reopen, a closed job closed
// again (see giveBack), and its message stays; a task the broker may have
// taken stays reopened, for the reconciler to republish if it was lost.
func (q *Queue) Replay(ctx context.Context, f Filter) (Report, error) {
	var rep Report
	o, err := q.open(ctx)
	if err != nil {
		return rep, err
	}
	defer o.finish(ctx)
	entries, err := o.fetch(ctx, f, true)
	if err != nil {
		return rep, err
	}
	for _, e := range entries {
		if f.Limit > 0 && rep.Replayed == f.Limit {
			break
		}
		replayed, err := q.replay(ctx, e)
		if replayed {
			rep.Replayed++
			o.removed++
		} else if err == nil {
			rep.Skipped++
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// replay replays one message. It reports whether a task was republished
// (the message is then acked, or the error says it could not be). A batch
// the broker dead-lettered whole is replayed as single task messages of
// those of its tasks the store reopened.
//
// The store reopens the tasks before they are published, so that the
// generation each message carries is committed before the message can
// exist: whatever happens after (a crash included), the outcome of a
// message the broker took counts. What the broker surely did not take is
// put back (giveBack).
func (q *Queue) replay(ctx context.Context, e entry) (bool, error) {
	log := q.log.With("job_id", e.msg.JobID, "task_id", e.msg.TaskID, "message_id", e.msg.MessageID)
	if e.dead.Malformed != nil {
		log.Info("dlq: not replaying a message that is not a task", "error", e.dead.Malformed)
		return false, nil
	}
	var (
		reopenings []store.Reopening
		tasks      []reopenedTask
	)
	for jobID, group := range byJob(e.dead.Tasks) {
		r, err := q.cfg.Store.ReopenTasks(ctx, jobID, taskIDs(group))
		switch {
		case errors.Is(err, warren.ErrNotFound):
			log.Info("dlq: not replaying the tasks of a job the store does not know", "job", jobID)
			continue
		case err != nil:
			q.giveBack(e, reopenings, tasks)
			return false, fmt.Errorf("dlq: reopen tasks of job %s: %w", jobID, err)
		}
		for _, id := range r.Unknown {
			log.Info("dlq: not replaying a task the store does not know", "task", id)
		}
		reopened := make(map[int64]int, len(r.Tasks))
		for _, rt := range r.Tasks {
			reopened[rt.TaskID] = rt.Generation
		}
		for _, t := range group {
			if generation, ok := reopened[t.TaskID]; ok {
				tasks = append(tasks, reopenedTask{t, generation})
			} else if !slices.Contains(r.Unknown, t.TaskID) {
				log.Info("dlq: not replaying a task that is not failed any more, or whose job was cancelled", "task", t.TaskID)
			}
		}
		if len(r.Tasks) > 0 {
			reopenings = append(reopenings, r)
		}
	}
	if len(tasks) == 0 {
		return false, nil
	}
	lost, err := q.republish(ctx, e, tasks)
	q.giveBack(e, reopenings, lost)
	if err != nil {
		return false, err
	}
	if err := e.d.Ack(false); err != nil {
		// The task is on its way; its dead letter comes back to the queue,
		// and a later replay skips it since the task is not failed.
		return true, fmt.Errorf("dlq: remove the replayed message %s: %w", e.msg.MessageID, err)
	}
	log.Info("dlq: replayed a dead-lettered task", "reason", e.msg.Reason, "tasks", len(tasks))
	return true, nil
}

// byJob yields the tasks of a dead letter grouped by job, in the order of
// each job's first task (a batch's tasks are all of one job).
func byJob(tasks []protocol.Task) iter.Seq2[string, []protocol.Task] {
	return func(yield func(string, []protocol.Task) bool) {
		seen := make(map[string]bool)
		for _, t := range tasks {
			if seen[t.JobID] {
				continue
			}
			seen[t.JobID] = true
			var group []protocol.Task
			for _, u := range tasks {
				if u.JobID == t.JobID {
					group = append(group, u)
				}
			}
			if !yield(t.JobID, group) {
				return
			}
		}
	}
}

// taskIDs lists the ids of tasks.
func taskIDs(tasks []protocol.Task) []int64 {
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.TaskID
	}
	return ids
}

// reopenedTask is a task the store reopened for a replay, and the
// generation it reopened it at: the replayed message's.
type reopenedTask struct {
	protocol.Task
	generation int
}

// republish publishes the reopened tasks of e and waits for the confirms.
// It returns the tasks the broker surely did not take (not published,
// nacked or returned as unroutable) and the first error. A task whose
// confirm did not come (the context ended, the channel failed) may be in
// the broker: it is not returned, and stays reopened.
func (q *Queue) republish(ctx context.Context, e entry, tasks []reopenedTask) ([]reopenedTask, error) {
	confs := make([]*broker.Confirmation, 0, len(tasks))
	var (
		err  error
		lost []reopenedTask
	)
	for _, t := range tasks {
		var out wire.Outbound
		if out, err = e.dead.Replay(q.cfg.Names, t.Task, t.generation); err != nil {
			break
		}
		var c *broker.Confirmation
		if c, err = q.cfg.Publisher.Publish(ctx, out.Exchange, out.Key, out.Msg); err != nil {
			break
		}
		confs = append(confs, c)
	}
	if err != nil {
		// Nothing more goes out: those not published are given back, and
		// the ones published are waited for below.
		lost = append(lost, tasks[len(confs):]...)
		err = fmt.Errorf("dlq: replay %s: %w", e.msg.MessageID, err)
	}
	for i, c := range confs {
		werr := c.Wait(ctx)
		switch {
		case werr == nil:
		case errors.Is(werr, broker.ErrNacked) || errors.Is(werr, broker.ErrUnroutable):
			lost = append(lost, tasks[i])
			fallthrough
		default:
			// Otherwise the broker may have the task: leave it queued in
			// the store. If it was lost, the reconciler republishes it
			// once its task timeout passes.
			if err == nil {
				err = fmt.Errorf("dlq: replay %s: %w", e.msg.MessageID, werr)
			}
		}
	}
	return lost, err
}

// giveBack puts the store back as it was before reopenings, for the tasks
// in lost, which the broker surely did not take, so that the store
// matches the queue, which still holds e. A reopening whose tasks were
// all lost is undone whole (Store.UndoReopen): a job it reopened is
// closed again as it was, the tasks its close had cancelled cancelled
// again. When some of its tasks went out, or the job moved since the
// reopen (an outcome of another of its tasks, a cancel), the lost tasks
// are failed again as outcomes of their generation instead, and the job
// goes on from there.
func (q *Queue) giveBack(e entry, reopenings []store.Reopening, lost []reopenedTask) {
	if len(lost) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), compensateTimeout)
	defer cancel()
	isLost := make(map[store.TaskRef]bool, len(lost))
	for _, t := range lost {
		isLost[store.TaskRef{JobID: t.JobID, TaskID: t.TaskID}] = true
	}
	var refail []reopenedTask
	for _, r := range reopenings {
		var rLost []reopenedTask
		for _, rt := range r.Tasks {
			if isLost[store.TaskRef{JobID: r.JobID, TaskID: rt.TaskID}] {
				rLost = append(rLost, reopenedTask{protocol.Task{JobID: r.JobID, TaskID: rt.TaskID}, rt.Generation})
			}
		}
		if len(rLost) == 0 {
			continue
		}
		if len(rLost) == len(r.Tasks) {
			undone, err := q.cfg.Store.UndoReopen(ctx, r)
			if err == nil && undone {
				continue
			}
			if err != nil {
				q.log.Error("dlq: could not undo the reopen of tasks whose replay was not published; failing them again",
					"job_id", r.JobID, "task_ids", reopenedIDs(rLost), "message_id", e.msg.MessageID, "error", err)
			}
		}
		refail = append(refail, rLost...)
	}
	q.refail(ctx, e, refail)
}

// refail records tasks of e as failed again, with the error of its dead
// letter, at the generation they were reopened at.
func (q *Queue) refail(ctx context.Context, e entry, tasks []reopenedTask) {
	if len(tasks) == 0 {
		return
	}
	// No FinishedAt: the store stamps its own clock, the one retention
	// compares with.
	outcomes := make([]store.Outcome, len(tasks))
	for i, t := range tasks {
		outcomes[i] = store.Outcome{JobID: t.JobID, TaskID: t.TaskID, State: warren.TaskFailed,
			Error: e.dead.TaskError(), Attempts: e.dead.Attempts(), Generation: t.generation}
	}
	if _, err := q.cfg.Store.ApplyOutcomes(ctx, outcomes); err != nil {
		q.log.Error("dlq: replayed tasks were not published and could not be failed again; the reconciler will republish them",
			"job_id", e.msg.JobID, "task_ids", reopenedIDs(tasks), "message_id", e.msg.MessageID, "error", err)
	}
}

// reopenedIDs lists the task ids of tasks, for a log line.
func reopenedIDs(tasks []reopenedTask) []int64 {
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.TaskID
	}
	return ids
}

// Purge removes the matching messages, oldest dead letter first, up to
// f.Limit, and returns how many it removed: with f.Settled only the
// settled ones (Message.Settled), as the store has them now. With
// neither a job nor a limit nor Settled it purges the whole queue at
// once.
func (q *Queue) Purge(ctx context.Context, f Filter) (int, error) {
	if f.JobID == "" && f.Limit == 0 && !f.Settled {
		return q.purgeAll(ctx)
	}
	o, err := q.open(ctx)
	if err != nil {
		return 0, err
	}
	defer o.finish(ctx)
	entries, err := o.fetch(ctx, f, false)
	if err != nil {
		return 0, err
	}
	if f.Settled {
		if err := q.standing(ctx, entries); err != nil {
			return 0, err
		}
		entries = slices.DeleteFunc(entries, func(e entry) bool { return e.msg.Settled == "" })
	}
	for _, e := range limit(entries, f.Limit) {
		if err := e.d.Ack(false); err != nil {
			return o.removed, o.fail(ctx, "remove a message", err)
		}
		o.removed++
	}
	q.log.Info("dlq: purged dead letters", "job_id", f.JobID, "settled_only", f.Settled, "purged", o.removed)
	return o.removed, nil
}

func (q *Queue) purgeAll(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dlq: %w", err)
	}
	ch, err := q.cfg.Conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("dlq: open a channel: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	defer func() {
		stop()
		_ = ch.Close()
	}()
	n, err := ch.QueuePurge(q.cfg.Names.TasksDLQ, false)
	if err != nil {
		return 0, wrap(ctx, fmt.Sprintf("purge %q", q.cfg.Names.TasksDLQ), err)
	}
	q.log.Info("dlq: purged dead letters", "purged", n)
	return n, nil
}

// limit returns the first n entries, or all when n is 0.
func limit(entries []entry, n int) []entry {
	if n > 0 && len(entries) > n {
		return entries[:n]
	}
	return entries
}

// entry is a message an operation took, unacknowledged on its channel.
type entry struct {
	d    amqp.Delivery // to ack it
	dead wire.DeadLetter
	msg  Message
}

// op is one operation's hold on the queue: a channel on which it takes
// messages without acknowledging them.
type op struct {
	q       *Queue
	ch      *amqp.Channel
	stop    func() bool // stops closing ch when the context is done
	depth   int         // ready messages when the operation started
	taken   int
	removed int // messages acked
}

// open opens the operation's channel, closed when ctx is done, and reads
// the queue's depth.
func (q *Queue) open(ctx context.Context) (*op, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	ch, err := q.cfg.Conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("dlq: open a channel: %w", err)
	}
	o := &op{q: q, ch: ch}
	o.stop = context.AfterFunc(ctx, func() { _ = ch.Close() })
	st, err := ch.QueueDeclarePassive(q.cfg.Names.TasksDLQ, true, false, false, false, nil)
	if err != nil {
		o.stop()
		_ = ch.Close()
		return nil, wrap(ctx, fmt.Sprintf("inspect queue %q (is the topology declared?)", q.cfg.Names.TasksDLQ), err)
	}
	o.depth = st.Messages
	return o, nil
}

// fetch takes up to the queue's starting depth of messages and returns
// the entries that match f, oldest dead letter first; the others stay
// taken until the channel closes. Only with bodies are the entries'
// bodies kept.
func (o *op) fetch(ctx context.Context, f Filter, bodies bool) ([]entry, error) {
	var out []entry
	for o.taken < o.depth {
		d, ok, err := o.ch.Get(o.q.cfg.Names.TasksDLQ, false)
		if err != nil {
			return nil, o.fail(ctx, "get a message", err)
		}
		if !ok {
			break
		}
		o.taken++
		dead := wire.ReadDeadLetter(d)
		msg := message(dead)
		if !f.match(msg) {
			continue
		}
		if !bodies {
			d.Body = nil
			dead = dead.WithoutBodies()
		}
		out = append(out, entry{d: d, dead: dead, msg: msg})
	}
	slices.SortStableFunc(out, func(a, b entry) int { return compare(a.msg, b.msg) })
	return out, nil
}

// fail wraps an error of the operation's channel.
func (o *op) fail(ctx context.Context, what string, err error) error {
	return wrap(ctx, fmt.Sprintf("%s from %q", what, o.q.cfg.Names.TasksDLQ), err)
}

// finish closes the channel, which gives back every message taken and
// not removed, and waits (boundedly) until the broker shows them again.
func (o *op) finish(ctx context.Context) {
	back := o.taken - o.removed
	var ready int
	if back > 0 && ctx.Err() == nil {
		// What is ready while this operation still holds its messages;
		// they come back on top of it.
		if st, err := o.ch.QueueDeclarePassive(o.q.cfg.Names.TasksDLQ, true, false, false, false, nil); err == nil {
			ready = st.Messages
		} else {
			back = 0 // the channel failed: nothing to wait for that can be measured
		}
	}
	o.stop()
	_ = o.ch.Close()
	if back > 0 && ctx.Err() == nil {
		o.q.settle(ctx, ready+back)
	}
}

// settle waits until the queue has at least want ready messages, ctx is
// done or SettleTimeout passed. The broker takes messages back after a
// channel closes asynchronously; without this wait, an operation right
// after this one would not see them. Another operation holding messages
// at the same time can keep the count short: the wait then just ends.
func (q *Queue) settle(ctx context.Context, want int) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.SettleTimeout)
	defer cancel()
	ch, err := q.cfg.Conn.Channel()
	if err != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	defer func() {
		stop()
		_ = ch.Close()
	}()
	pause := time.Millisecond
	for {
		st, err := ch.QueueDeclarePassive(q.cfg.Names.TasksDLQ, true, false, false, false, nil)
		if err != nil || st.Messages >= want {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			q.log.Debug("dlq: the broker had not given back every message in time", "ready", st.Messages, "want", want)
			return
		case <-t.C:
		}
		pause = min(pause*2, 50*time.Millisecond)
	}
}

// wrap names what failed, and the context's error when it was the
// context that closed the channel.
func wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("dlq: %s: %w", what, ctxErr)
	}
	return fmt.Errorf("dlq: %s: %w", what, err)
}
