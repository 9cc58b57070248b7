package aggregator

// A model-based test of exact accounting: random interleavings of outcome
// batches (duplicates, failures, dead letters), relay rounds, redrives,
// dead-letter replays, cancels, reconciler passes and closes from two
// servers, run against the real stores and checked after every step
// against a model that says what exactly-once means. A failing case is
// printed with its seed and saved by rapid under testdata/rapid, where
// every later run replays it first: commit the file to keep it as a
// regression case.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
)

func TestModelSQLite(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "model.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rapid.Check(t, func(rt *rapid.T) { runModel(rt, st) })
}

func TestModelPostgres(t *testing.T) {
	t.Parallel()
	st, err := postgres.Open(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rapid.Check(t, func(rt *rapid.T) { runModel(rt, st) })
}

// modelTask is what the model knows of one task.
type modelTask struct {
	state    warren.TaskState
	attempts int
	// gen counts the task's runs that a redrive, replay or reconciler
	// requeue started; an outcome of an older one must change nothing.
	gen int
	// result is the accepted result of a completed task.
	result string
}

// model is one job as exactly-once accounting says it must be.
type model struct {
	ctx    context.Context
	st     *interleaving
	agg    [2]*Aggregator // two servers closing the same job
	job    warren.Job
	policy warren.Policy
	tasks  []modelTask // tasks[i] is task i+1
	state  warren.JobState
	// sent holds outcomes already delivered once, for duplicates.
	sent []store.Outcome
	// outcomeGen remembers, per outcome sent, the run it came from.
	outcomeGen []int
}

// interleaving is a store whose FinishJob first runs another step, as a
// second server or an operator would between a close's read and its
// finish.
type interleaving struct {
	store.Store
	beforeFinish func()
}

func (s *interleaving) FinishJob(ctx context.Context, jobID string, version int64, state warren.JobState, result []byte, errMsg string) (bool, error) {
	if f := s.beforeFinish; f != nil {
		s.beforeFinish = nil
		f()
	}
	return s.Store.FinishJob(ctx, jobID, version, state, result, errMsg)
}

func runModel(rt *rapid.T, base store.Store) {
	ctx := context.Background()
	n := rapid.IntRange(1, 5).Draw(rt, "tasks")
	policy := warren.Policy{
		Reduce:     "collect",
		MaxRetries: rapid.IntRange(0, 2).Draw(rt, "max_retries"),
		FailFast:   rapid.Bool().Draw(rt, "fail_fast"),
	}
	if rapid.Bool().Draw(rt, "tolerant") {
		policy.ToleratedFailures = int64(rapid.IntRange(0, n).Draw(rt, "tolerated_failures"))
		policy.ToleratedFailurePercent = 100
	}
	payloads := func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(strconv.Itoa(i+1)), nil) {
				return
			}
		}
	}
	st := &interleaving{Store: base}
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "model", Policy: policy}, payloads)
	if err != nil {
		rt.Fatalf("create job: %v", err)
	}
	m := &model{ctx: ctx, st: st, job: job, policy: policy, tasks: make([]modelTask, n), state: warren.JobPending}
	for i := range m.tasks {
		m.tasks[i] = modelTask{state: warren.TaskPending, gen: 1}
	}
	quiet := slog.New(slog.DiscardHandler)
	for i := range m.agg {
		m.agg[i] = &Aggregator{cfg: Config{Store: st, Reducers: reduce.NewRegistry(), Logger: quiet}.withDefaults()}
	}
	defer func() { _, _ = base.CancelJob(ctx, job.ID) }() // leave nothing open for the next check

	rt.Repeat(map[string]func(*rapid.T){
		"relay":     m.relay,
		"outcome":   m.outcome,
		"duplicate": m.duplicate,
		"redrive":   m.redrive,
		"replay":    m.replay,
		"cancel":    m.cancel,
		"reconcile": m.reconcile,
		"close":     m.close,
		"":          m.check,
	})
}

func (m *model) open() bool { return m.state == warren.JobPending || m.state == warren.JobRunning }

// relay publishes every pending task of the model's job.
func (m *model) relay(rt *rapid.T) {
	_, err := m.st.RelayBatch(m.ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		var refs []store.TaskRef
		for _, t := range tasks {
			if t.JobID == m.job.ID {
				refs = append(refs, t.Ref())
			}
		}
		return refs, nil
	})
	if err != nil {
		rt.Fatalf("relay: %v", err)
	}
	if !m.open() {
		return
	}
	all := true
	for i := range m.tasks {
		if m.tasks[i].state == warren.TaskPending {
			m.tasks[i].state = warren.TaskQueued
		}
		all = all && m.tasks[i].state != warren.TaskPending
	}
	if all && m.state == warren.JobPending {
		m.state = warren.JobRunning
	}
}

// outcome delivers one task's outcome: a result or a failure, from its
// current run or, after a requeue, possibly from an earlier one.
func (m *model) outcome(rt *rapid.T) {
	i := rapid.IntRange(0, len(m.tasks)-1).Draw(rt, "task")
	t := &m.tasks[i]
	gen := t.gen
	switch {
	case t.state == warren.TaskPending && gen == 1:
		return // never published: no worker has it
	case t.state == warren.TaskPending || (gen > 1 && rapid.Bool().Draw(rt, "stale")):
		// A copy of an earlier run: still queued somewhere, or redelivered.
		gen = rapid.IntRange(1, gen-1).Draw(rt, "stale_gen")
	case rapid.IntRange(0, 9).Draw(rt, "no_generation") == 0:
		// A worker that copies no header: the outcome counts for the
		// current run.
		gen = 0
	}
	o := store.Outcome{JobID: m.job.ID, TaskID: int64(i + 1), State: warren.TaskCompleted, Attempts: t.attempts + 1,
		Worker: "w", Generation: gen}
	if rapid.Bool().Draw(rt, "fails") {
		o.State, o.Error = warren.TaskFailed, "failed in run "+strconv.Itoa(gen)
	} else {
		o.Result = json.RawMessage(strconv.Itoa(100*t.gen + 10*gen + i + 1))
	}
	m.apply(rt, o, gen)
	m.sent = append(m.sent, o)
	m.outcomeGen = append(m.outcomeGen, gen)
}

// duplicate delivers an outcome again, as a redelivery would.
func (m *model) duplicate(rt *rapid.T) {
	if len(m.sent) == 0 {
		return
	}
	k := rapid.IntRange(0, len(m.sent)-1).Draw(rt, "which")
	m.apply(rt, m.sent[k], m.outcomeGen[k])
}

// apply records o through the store and moves the model as exactly-once
// says: only an open job's non-terminal task of the same run changes.
func (m *model) apply(rt *rapid.T, o store.Outcome, gen int) {
	if _, err := m.st.ApplyOutcomes(m.ctx, []store.Outcome{o}); err != nil {
		rt.Fatalf("apply: %v", err)
	}
	t := &m.tasks[o.TaskID-1]
	if !m.open() || t.state.Terminal() || (gen != 0 && gen != t.gen) {
		return
	}
	t.state = o.State
	t.attempts = max(t.attempts, o.Attempts)
	t.result = string(o.Result)
}

func (m *model) counts() (completed, failed int64) {
	for _, t := range m.tasks {
		switch t.state {
		case warren.TaskCompleted:
			completed++
		case warren.TaskFailed:
			failed++
		}
	}
	return completed, failed
}

// redrive requeues a closed job's failed tasks.
func (m *model) redrive(rt *rapid.T) {
	_, n, err := m.st.RedriveJob(m.ctx, m.job.ID)
	_, failed := m.counts()
	allowed := (m.state == warren.JobFailed || m.state == warren.JobCompleted) && failed > 0
	if !allowed {
		if !errors.Is(err, warren.ErrConflict) {
			rt.Fatalf("redrive of a %s job with %d failed tasks: want a conflict, got %v", m.state, failed, err)
		}
		return
	}
	var cancelled int64
	for _, t := range m.tasks {
		if t.state == warren.TaskCancelled {
			cancelled++
		}
	}
	if err != nil || int64(n) != failed+cancelled {
		rt.Fatalf("redrive: requeued %d tasks, want the %d failed and the %d the close cancelled: %v", n, failed, cancelled, err)
	}
	for i := range m.tasks {
		if m.tasks[i].state == warren.TaskFailed {
			m.tasks[i].state = warren.TaskPending
			m.tasks[i].gen++
		}
	}
	m.requeueCancelled()
	m.state = warren.JobRunning
}

// requeueCancelled sends back to the outbox, at their next run, the tasks
// a close cancelled: reopening a closed job must let it close again with
// every task accounted for.
func (m *model) requeueCancelled() {
	for i := range m.tasks {
		if m.tasks[i].state == warren.TaskCancelled {
			m.tasks[i].state = warren.TaskPending
			m.tasks[i].gen++
		}
	}
}

// replay reopens one failed task, as a dead-letter replay does.
func (m *model) replay(rt *rapid.T) {
	i := rapid.IntRange(0, len(m.tasks)-1).Draw(rt, "task")
	gen, ok, err := m.st.ReopenTask(m.ctx, m.job.ID, int64(i+1))
	if err != nil {
		rt.Fatalf("reopen: %v", err)
	}
	t := &m.tasks[i]
	want := t.state == warren.TaskFailed && m.state != warren.JobCancelled
	if ok != want {
		rt.Fatalf("reopen of a %s task of a %s job: got %v, want %v", t.state, m.state, ok, want)
	}
	if ok {
		t.state = warren.TaskQueued
		t.gen++
		t.attempts = 0 // the replayed message carries x-retry 0
		if gen != t.gen {
			rt.Fatalf("reopen gave generation %d, the model says %d", gen, t.gen)
		}
		if !m.open() {
			m.requeueCancelled()
		}
		m.state = warren.JobRunning
	}
}

func (m *model) cancel(rt *rapid.T) {
	_, err := m.st.CancelJob(m.ctx, m.job.ID)
	if !m.open() {
		if !errors.Is(err, warren.ErrConflict) {
			rt.Fatalf("cancel of a %s job: want a conflict, got %v", m.state, err)
		}
		return
	}
	if err != nil {
		rt.Fatalf("cancel: %v", err)
	}
	m.state = warren.JobCancelled
	for i := range m.tasks {
		if !m.tasks[i].state.Terminal() {
			m.tasks[i].state = warren.TaskCancelled
		}
	}
}

// reconcile runs a reconciler pass as if every task timeout had passed.
func (m *model) reconcile(rt *rapid.T) {
	if _, err := m.st.ReconcileStale(m.ctx, store.Staleness{Now: time.Now().Add(24 * time.Hour)}, 1000); err != nil {
		rt.Fatalf("reconcile: %v", err)
	}
	if !m.open() {
		return
	}
	for i := range m.tasks {
		t := &m.tasks[i]
		if t.state != warren.TaskQueued {
			continue
		}
		t.attempts++
		if t.attempts <= m.policy.MaxRetries {
			t.state = warren.TaskPending
			t.gen++
		} else {
			t.state = warren.TaskFailed
		}
	}
}

// close closes the job from one of the two servers; sometimes another
// step runs between the close's read and its finish.
func (m *model) close(rt *rapid.T) {
	a := m.agg[rapid.IntRange(0, 1).Draw(rt, "server")]
	if rapid.Bool().Draw(rt, "interleave") {
		step := rapid.SampledFrom([]string{"replay", "redrive", "outcome", "close"}).Draw(rt, "between")
		m.st.beforeFinish = func() {
			switch step {
			case "replay":
				m.replay(rt)
			case "redrive":
				m.redrive(rt)
			case "outcome":
				m.outcome(rt)
			case "close":
				m.closeNow(rt, m.agg[0])
			}
		}
	}
	m.closeNow(rt, a)
	m.st.beforeFinish = nil
}

// closeNow closes through a, then reads what the store decided: the model
// only says whether the job could close, and checks the rest in check.
func (m *model) closeNow(rt *rapid.T, a *Aggregator) {
	if err := a.CloseJob(m.ctx, m.job.ID); err != nil {
		rt.Fatalf("close: %v", err)
	}
	job, err := m.st.GetJob(m.ctx, m.job.ID)
	if err != nil {
		rt.Fatalf("get job: %v", err)
	}
	if job.State.Terminal() && !m.state.Terminal() {
		m.state = job.State
		// A close cancels what never finished.
		for i := range m.tasks {
			if !m.tasks[i].state.Terminal() {
				m.tasks[i].state = warren.TaskCancelled
			}
		}
	}
}

// check compares the store with the model after every step.
func (m *model) check(rt *rapid.T) {
	job, err := m.st.GetJob(m.ctx, m.job.ID)
	if err != nil {
		rt.Fatalf("get job: %v", err)
	}
	tasks, _, err := m.st.ListTasks(m.ctx, m.job.ID, store.ListTasksOpts{Limit: 100})
	if err != nil {
		rt.Fatalf("list tasks: %v", err)
	}
	var completed, failed int64
	for i, tr := range tasks {
		want := m.tasks[i]
		if tr.State != want.state {
			rt.Fatalf("task %d is %s, the model says %s (job %s)", i+1, tr.State, want.state, job.State)
		}
		switch tr.State {
		case warren.TaskCompleted:
			completed++
			if string(tr.Result) != want.result {
				rt.Fatalf("task %d's result is %s, want %s: an outcome counted that should not have", i+1, tr.Result, want.result)
			}
		case warren.TaskFailed:
			failed++
		}
	}
	if job.CompletedTasks != completed || job.FailedTasks != failed {
		rt.Fatalf("counters %d completed, %d failed; the rows say %d, %d", job.CompletedTasks, job.FailedTasks, completed, failed)
	}
	if job.State != m.state {
		rt.Fatalf("job is %s, the model says %s", job.State, m.state)
	}
	switch job.State {
	case warren.JobCompleted:
		if completed+failed != job.ExpectedTasks {
			rt.Fatalf("job closed completed with %d+%d of %d tasks", completed, failed, job.ExpectedTasks)
		}
		raw, err := m.st.JobResult(m.ctx, m.job.ID)
		if err != nil {
			rt.Fatalf("result: %v", err)
		}
		if want := m.collect(); string(raw) != want {
			rt.Fatalf("stored result %s, the terminal outcomes reduce to %s", raw, want)
		}
	case warren.JobFailed:
		if completed+failed != job.ExpectedTasks && !(m.policy.FailFast && !m.policy.Tolerates(failed, job.ExpectedTasks)) {
			rt.Fatalf("job closed failed with %d+%d of %d tasks, not by fail-fast", completed, failed, job.ExpectedTasks)
		}
	}
}

// collect is the collect reducer over the model's terminal outcomes.
func (m *model) collect() string {
	out := "["
	for i, t := range m.tasks {
		if i > 0 {
			out += ","
		}
		if t.state == warren.TaskCompleted {
			out += t.result
		} else {
			out += "null"
		}
	}
	return out + "]"
}
