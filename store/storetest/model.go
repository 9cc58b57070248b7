package storetest

// A model-based test of exact accounting: random interleavings of outcome
// batches (duplicates, failures, outcomes of earlier runs), relay rounds,
// redrives, dead-letter replays, cancels, reconciler passes and closes
// (one of them sometimes inside another's read and finish, as from a
// second server), run against the driver and checked after every step
// against a model that says what exactly-once means.
//
// Each case draws its steps from a PCG generator seeded with the case's
// seed. A failing case prints its seed and its steps; ModelSeedEnv set to
// that seed runs that case alone, as it ran.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// ModelSeedEnv names the environment variable that replays one case of
// the model test: set to the seed a failure printed (decimal, or 0x hex),
// the test runs that case alone instead of its random ones.
const ModelSeedEnv = "WARREN_MODEL_SEED"

const (
	// modelCases is how many random cases one run checks (a fifth of it
	// under -short): as many as the test ran when it lived in the
	// aggregator.
	modelCases = 100
	// modelSteps is the average number of steps of a case; a case runs
	// between 1 and twice as many, so some reach deep states.
	modelSteps = 30
	// closeTries bounds how often a close starts over when the job changed
	// between its read and its finish, as the aggregator's does.
	closeTries = 5
)

func testModel(t *testing.T, newStore func(t *testing.T) store.Store) {
	// One store for every case, as a server's store holds job after job:
	// each case cancels its job when it ends, so that the next case's
	// relay, reconciler and JobsToClose see only its own job open.
	s := newStore(t)
	for _, seed := range modelSeeds(t) {
		runModelCase(t, s, seed)
	}
}

// modelSeeds returns the seeds of the cases to run: the one ModelSeedEnv
// names, or fresh random ones.
func modelSeeds(t *testing.T) []uint64 {
	if v := os.Getenv(ModelSeedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 0, 64)
		require.NoError(t, err, "%s must be a seed a failing case printed", ModelSeedEnv)
		return []uint64{seed}
	}
	n := modelCases
	if testing.Short() {
		n /= 5
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	return seeds
}

// runModelCase creates a job with a random policy and runs random steps on
// it, checking the store against the model after each.
func runModelCase(t *testing.T, base store.Store, seed uint64) {
	m := &model{t: t, ctx: t.Context(), rng: rand.New(rand.NewPCG(seed, seed)), reducers: reduce.NewRegistry()}
	m.st = &interleaving{Store: base}
	defer func() {
		if t.Failed() {
			t.Logf("model case with seed %d failed; replay it with %s=%d. Its steps:\n%s",
				seed, ModelSeedEnv, seed, strings.Join(m.trace, "\n"))
		}
	}()
	m.createJob()
	// Leave nothing open for the next case.
	defer func() { _, _ = base.CancelJob(m.ctx, m.job.ID) }()

	steps := []struct {
		name string
		run  func()
	}{
		{"relay", m.relay},
		{"outcome", m.outcome},
		{"duplicate", m.duplicate},
		{"redrive", m.redrive},
		{"replay", m.replay},
		{"cancel", m.cancel},
		{"reconcile", m.reconcile},
		{"close", m.close},
	}
	m.check()
	for range 1 + m.rng.IntN(2*modelSteps) {
		steps[m.rng.IntN(len(steps))].run()
		m.check()
	}
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
	t        *testing.T
	ctx      context.Context
	st       *interleaving
	rng      *rand.Rand
	reducers *reduce.Registry
	job      warren.Job
	policy   warren.Policy
	tasks    []modelTask // tasks[i] is task i+1
	state    warren.JobState
	// sent holds outcomes already delivered once, for duplicates.
	sent []store.Outcome
	// outcomeGen remembers, per outcome sent, the run it came from.
	outcomeGen []int
	// trace lists the steps run so far, with what they drew, for a
	// failure to print.
	trace []string
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

// note records a step for the trace a failure prints.
func (m *model) note(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%3d. ", len(m.trace)+1)+fmt.Sprintf(format, args...))
}

// intn draws an int in [0, n).
func (m *model) intn(n int) int { return m.rng.IntN(n) }

// coin draws a bool.
func (m *model) coin() bool { return m.rng.IntN(2) == 0 }

// createJob creates the case's job: 1 to 5 tasks, a random retry limit,
// fail-fast and tolerance.
func (m *model) createJob() {
	n := 1 + m.intn(5)
	m.policy = warren.Policy{Reduce: "collect", MaxRetries: m.intn(3), FailFast: m.coin()}
	if m.coin() {
		m.policy.ToleratedFailures = int64(m.intn(n + 1))
		m.policy.ToleratedFailurePercent = 100
	}
	m.note("create a job of %d tasks, max retries %d, fail fast %v, %d failures tolerated",
		n, m.policy.MaxRetries, m.policy.FailFast, m.policy.ToleratedFailures)
	payloads := func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(strconv.Itoa(i+1)), nil) {
				return
			}
		}
	}
	job, _, err := m.st.CreateJob(m.ctx, store.NewJob{Type: "model", Policy: m.policy}, payloads)
	require.NoError(m.t, err, "create job")
	m.job, m.state, m.tasks = job, warren.JobPending, make([]modelTask, n)
	for i := range m.tasks {
		m.tasks[i] = modelTask{state: warren.TaskPending, gen: 1}
	}
}

func (m *model) open() bool { return m.state == warren.JobPending || m.state == warren.JobRunning }

// relay publishes every pending task of the model's job.
func (m *model) relay() {
	m.note("relay")
	_, err := m.st.RelayBatch(m.ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		var refs []store.TaskRef
		for _, t := range tasks {
			if t.JobID == m.job.ID {
				refs = append(refs, t.Ref())
			}
		}
		return refs, nil
	})
	require.NoError(m.t, err, "relay")
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
func (m *model) outcome() {
	i := m.intn(len(m.tasks))
	t := &m.tasks[i]
	gen := t.gen
	switch {
	case t.state == warren.TaskPending && gen == 1:
		m.note("outcome of task %d: never published, no worker has it", i+1)
		return
	case t.state == warren.TaskPending || (gen > 1 && m.coin()):
		// A copy of an earlier run: still queued somewhere, or redelivered.
		gen = 1 + m.intn(gen-1)
	case m.intn(10) == 0:
		// A worker that copies no header: the outcome counts for the
		// current run.
		gen = 0
	}
	o := store.Outcome{JobID: m.job.ID, TaskID: int64(i + 1), State: warren.TaskCompleted, Attempts: t.attempts + 1,
		Worker: "w", Generation: gen}
	if m.coin() {
		o.State, o.Error = warren.TaskFailed, "failed in run "+strconv.Itoa(gen)
	} else {
		o.Result = json.RawMessage(strconv.Itoa(100*t.gen + 10*gen + i + 1))
	}
	m.note("outcome %d: task %d %s, generation %d (the task's is %d), attempts %d", len(m.sent)+1, i+1, o.State, gen, t.gen, o.Attempts)
	m.apply(o, gen)
	m.sent = append(m.sent, o)
	m.outcomeGen = append(m.outcomeGen, gen)
}

// duplicate delivers an outcome again, as a redelivery would.
func (m *model) duplicate() {
	if len(m.sent) == 0 {
		m.note("duplicate: no outcome sent yet")
		return
	}
	k := m.intn(len(m.sent))
	m.note("duplicate of outcome %d", k+1)
	m.apply(m.sent[k], m.outcomeGen[k])
}

// apply records o through the store and moves the model as exactly-once
// says: only an open job's non-terminal task of the same run changes.
func (m *model) apply(o store.Outcome, gen int) {
	_, err := m.st.ApplyOutcomes(m.ctx, []store.Outcome{o})
	require.NoError(m.t, err, "apply")
	t := &m.tasks[o.TaskID-1]
	if !m.open() || t.state.Terminal() || (gen != 0 && gen != t.gen) {
		return
	}
	t.state = o.State
	t.attempts = max(t.attempts, o.Attempts)
	t.result = string(o.Result)
}

// count returns how many of the model's tasks are in state.
func (m *model) count(state warren.TaskState) int64 {
	var n int64
	for _, t := range m.tasks {
		if t.state == state {
			n++
		}
	}
	return n
}

// redrive requeues a closed job's failed tasks.
func (m *model) redrive() {
	m.note("redrive")
	_, n, err := m.st.RedriveJob(m.ctx, m.job.ID)
	failed := m.count(warren.TaskFailed)
	allowed := (m.state == warren.JobFailed || m.state == warren.JobCompleted) && failed > 0
	if !allowed {
		require.ErrorIs(m.t, err, warren.ErrConflict, "redrive of a %s job with %d failed tasks", m.state, failed)
		return
	}
	cancelled := m.count(warren.TaskCancelled)
	require.NoError(m.t, err, "redrive")
	require.Equal(m.t, failed+cancelled, int64(n), "redrive requeues the %d failed tasks and the %d the close cancelled", failed, cancelled)
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
func (m *model) replay() {
	i := m.intn(len(m.tasks))
	m.note("replay task %d", i+1)
	gen, ok, err := m.st.ReopenTask(m.ctx, m.job.ID, int64(i+1))
	require.NoError(m.t, err, "reopen")
	t := &m.tasks[i]
	want := t.state == warren.TaskFailed && m.state != warren.JobCancelled
	require.Equal(m.t, want, ok, "reopen of a %s task of a %s job", t.state, m.state)
	if !ok {
		return
	}
	t.state = warren.TaskQueued
	t.gen++
	t.attempts = 0 // the replayed message carries x-retry 0
	require.Equal(m.t, t.gen, gen, "the reopened task's generation")
	if !m.open() {
		m.requeueCancelled()
	}
	m.state = warren.JobRunning
}

func (m *model) cancel() {
	m.note("cancel")
	_, err := m.st.CancelJob(m.ctx, m.job.ID)
	if !m.open() {
		require.ErrorIs(m.t, err, warren.ErrConflict, "cancel of a %s job", m.state)
		return
	}
	require.NoError(m.t, err, "cancel")
	m.state = warren.JobCancelled
	for i := range m.tasks {
		if !m.tasks[i].state.Terminal() {
			m.tasks[i].state = warren.TaskCancelled
		}
	}
}

// reconcile runs a reconciler pass as if every task timeout had passed.
func (m *model) reconcile() {
	m.note("reconcile")
	_, err := m.st.ReconcileStale(m.ctx, store.Staleness{Now: time.Now().Add(24 * time.Hour)}, 1000)
	require.NoError(m.t, err, "reconcile")
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

// close closes the job; sometimes another step runs between the close's
// read and its finish: a replay, a redrive, an outcome, or a second
// server's close.
func (m *model) close() {
	if !m.coin() {
		m.note("close")
		m.closeNow()
		return
	}
	between := []func(){m.replay, m.redrive, m.outcome, m.closeNow}
	names := []string{"a replay", "a redrive", "an outcome", "another close"}
	k := m.intn(len(between))
	m.note("close; should it reach its finish, %s runs between its read and its finish", names[k])
	m.st.beforeFinish = between[k]
	m.closeNow()
	m.st.beforeFinish = nil
}

// closeNow closes the job as a server's close does, then reads what the
// store decided: the model only says whether the job could close, and
// checks the rest in check.
func (m *model) closeNow() {
	m.closeJob()
	job, err := m.st.GetJob(m.ctx, m.job.ID)
	require.NoError(m.t, err, "get job")
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

// closeJob is a server's close: it reads the job and, when it is open and
// ready to close, finishes it at the version read with the state and
// result its terminal outcomes give; when the job changed in between, it
// starts over, at most closeTries times.
func (m *model) closeJob() {
	for range closeTries {
		job, err := m.st.GetJob(m.ctx, m.job.ID)
		require.NoError(m.t, err, "get job")
		ready := readyToClose(job)
		listed, err := m.st.JobsToClose(m.ctx, 10)
		require.NoError(m.t, err, "jobs to close")
		require.Equal(m.t, ready, slices.Contains(listed, job.ID),
			"JobsToClose lists the %s job with %d+%d of %d tasks finished exactly when it is ready to close",
			job.State, job.CompletedTasks, job.FailedTasks, job.ExpectedTasks)
		if !ready {
			return
		}
		state, result, msg := m.closing(job)
		closed, err := m.st.FinishJob(m.ctx, job.ID, job.Version, state, result, msg)
		require.NoError(m.t, err, "finish job")
		if closed {
			return
		}
	}
	require.Failf(m.t, "close", "job %s changed under each of %d closes", m.job.ID, closeTries)
}

// readyToClose says whether a server closes job now: it is open and every
// task finished, or it fails fast and its failures are over the
// tolerance.
func readyToClose(job warren.Job) bool {
	if job.State.Terminal() {
		return false
	}
	return job.Finished() || (job.Policy.FailFast && !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks))
}

// closing is the state, result and error a close of job records: failed
// over the tolerance, or completed with what the job's reducer makes of
// its terminal outcomes, scanned from the store.
func (m *model) closing(job warren.Job) (warren.JobState, []byte, string) {
	if !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks) {
		return warren.JobFailed, nil, fmt.Sprintf("%d of %d tasks failed, over the tolerance", job.FailedTasks, job.ExpectedTasks)
	}
	result, err := m.reducers.Reduce(job.Policy.Reduce, func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
		return m.st.ScanResults(m.ctx, job.ID, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			return fn(taskID, state != warren.TaskCompleted, result)
		})
	})
	require.NoError(m.t, err, "reduce the job's results")
	return warren.JobCompleted, result, ""
}

// check compares the store with the model after every step.
func (m *model) check() {
	job, err := m.st.GetJob(m.ctx, m.job.ID)
	require.NoError(m.t, err, "get job")
	tasks := allTasks(m.t, m.st, m.job.ID, "")
	require.Len(m.t, tasks, len(m.tasks), "the job's tasks")
	var completed, failed int64
	for i, tr := range tasks {
		want := m.tasks[i]
		require.Equal(m.t, want.state, tr.State, "task %d's state (job %s)", i+1, job.State)
		switch tr.State {
		case warren.TaskCompleted:
			completed++
			require.Equal(m.t, want.result, string(tr.Result), "task %d's result: an outcome counted that should not have", i+1)
		case warren.TaskFailed:
			failed++
		}
	}
	require.Equal(m.t, [2]int64{completed, failed}, [2]int64{job.CompletedTasks, job.FailedTasks},
		"the job's completed and failed counters are what its task rows say")
	require.Equal(m.t, m.state, job.State, "the job's state")
	switch job.State {
	case warren.JobCompleted:
		require.Equal(m.t, job.ExpectedTasks, completed+failed, "a job closes completed only with every task finished")
		raw, err := m.st.JobResult(m.ctx, m.job.ID)
		require.NoError(m.t, err, "result")
		require.Equal(m.t, m.collect(), string(raw), "the stored result is what the terminal outcomes reduce to")
	case warren.JobFailed:
		if !(m.policy.FailFast && !m.policy.Tolerates(failed, job.ExpectedTasks)) {
			require.Equal(m.t, job.ExpectedTasks, completed+failed, "a job closes failed before every task finished only by fail-fast")
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
