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
//
// A case whose seed is odd gives its job a reduce task (task 0,
// warren.ReduceTaskID): its close starts the reduce (StartReduce) instead
// of finishing, the relay publishes task 0, outcomes and duplicates reach
// it too, and the model says the job's reduce state, task 0's row and
// the job's result (task 0's last applied one). An even seed's case has
// no reduce task and runs its steps as it did before reduce tasks.
//
// Some completed outcomes of map tasks spawn tasks (store.Outcome.Spawn),
// some failed ones carry a spawn that must be ignored, and some cases
// give their spawns a limit of tasks per job: the model says which
// spawns add tasks (an applied completed outcome's, within the limit),
// which fail their task (over it), and that the job's expected tasks are
// always its task rows.

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
	m := &model{t: t, ctx: t.Context(), rng: rand.New(rand.NewPCG(seed, seed)), reducers: reduce.NewRegistry(),
		reduce: seed&1 == 1}
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
		{"pause", m.pauseOrResume},
	}
	pick := func() int { return m.rng.IntN(len(steps)) }
	n := 1 + m.rng.IntN(2*modelSteps)
	if m.reduce {
		// A job reaches its reduce only once every task finished within
		// its tolerance and a close ran: a case with a reduce task
		// draws the steps that get it there more often, cancels less
		// often, and runs twice as long, so that it goes on to the
		// reduce's outcomes, redrives and replays. (A case without one
		// draws as it always did.)
		var weighted []int
		for i, w := range []int{6, 8, 2, 2, 2, 1, 2, 6, 1} { // the weights of steps, in order
			for range w {
				weighted = append(weighted, i)
			}
		}
		pick = func() int { return weighted[m.rng.IntN(len(weighted))] }
		n *= 2
	}
	m.check()
	for range n {
		steps[pick()].run()
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

// reduceTaskType is the type of a model job's reduce task.
const reduceTaskType = "model-reduce"

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
	// reduce says the job has a reduce task (odd seeds).
	reduce bool
	// submitted is the number of tasks the job was created with.
	submitted int
	// maxTasks, when > 0, is the limit of tasks per job its spawns are
	// held to (store.Outcome.MaxJobTasks).
	maxTasks int64
	// task0 is the reduce task's row: nil until the first StartReduce.
	task0 *modelTask
	// reduceState is the job's reduce state (warren.Job.ReduceState).
	reduceState string
	// sent holds outcomes already delivered once, for duplicates.
	sent []store.Outcome
	// outcomeGen remembers, per outcome sent, the run it came from.
	outcomeGen []int
	// trace lists the steps run so far, with what they drew, for a
	// failure to print.
	trace []string
	// paused says the job is paused (Store.PauseJob): the relay offers
	// none of its tasks and the reconciler takes none for lost. A close
	// clears it.
	paused bool
	// overCap says that a replay took the job over its concurrency cap
	// (warren.Policy.MaxConcurrency), which only a replay may do, until
	// its queued tasks are within the cap again.
	overCap bool
}

// interleaving is a store whose FinishJob or StartReduce first runs
// another step, as a second server or an operator would between a
// close's read and its finish (or its start of the reduce).
type interleaving struct {
	store.Store
	beforeFinish func()
}

func (s *interleaving) between() {
	if f := s.beforeFinish; f != nil {
		s.beforeFinish = nil
		f()
	}
}

func (s *interleaving) FinishJob(ctx context.Context, jobID string, version int64, state warren.JobState, result []byte, errMsg string) (bool, error) {
	s.between()
	return s.Store.FinishJob(ctx, jobID, version, state, result, errMsg)
}

func (s *interleaving) StartReduce(ctx context.Context, jobID string, version int64) (bool, error) {
	s.between()
	return s.Store.StartReduce(ctx, jobID, version)
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
	if m.coin() {
		m.policy.MaxConcurrency = 1 + m.intn(n)
	}
	with := "a reducer"
	if m.reduce {
		m.policy.Reduce = ""
		m.policy.ReduceTask = &warren.ReduceTask{Type: reduceTaskType, Payload: json.RawMessage(`{"k":1}`)}
		with = "a reduce task"
	}
	if m.coin() {
		m.maxTasks = int64(n + m.intn(4))
	}
	m.note("create a job of %d tasks with %s, max retries %d, fail fast %v, %d failures tolerated, max concurrency %d, spawns up to %d tasks (0: no limit)",
		n, with, m.policy.MaxRetries, m.policy.FailFast, m.policy.ToleratedFailures, m.policy.MaxConcurrency, m.maxTasks)
	payloads := func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(strconv.Itoa(i+1)), nil) {
				return
			}
		}
	}
	job, _, err := m.st.CreateJob(m.ctx, store.NewJob{Type: "model", Policy: m.policy}, payloads)
	require.NoError(m.t, err, "create job")
	m.job, m.state, m.tasks, m.submitted = job, warren.JobPending, make([]modelTask, n), n
	for i := range m.tasks {
		m.tasks[i] = modelTask{state: warren.TaskPending, gen: 1}
	}
}

func (m *model) open() bool { return m.state == warren.JobPending || m.state == warren.JobRunning }

// task returns the model's task of id: nil for a reduce task never started.
func (m *model) task(id int64) *modelTask {
	if id == warren.ReduceTaskID {
		return m.task0
	}
	return &m.tasks[id-1]
}

// ready says whether the job is ready to close (store.ReadyToClose): open
// and, before any reduce, every task finished or a fail-fast job over its
// tolerance; while its reduce task runs, never; once it has an outcome,
// always.
func (m *model) ready() bool {
	if !m.open() {
		return false
	}
	switch m.reduceState {
	case warren.ReduceRunning:
		return false
	case warren.ReduceCompleted, warren.ReduceFailed:
		return true
	}
	failed, n := m.count(warren.TaskFailed), int64(len(m.tasks))
	return m.count(warren.TaskCompleted)+failed == n || (m.policy.FailFast && !m.policy.Tolerates(failed, n))
}

// snapshot is what a close decides on, as a string, to tell whether a
// step between its read and its write moved the job: the job's state and
// reduce state and its tasks' outcomes. A requeue of a task that has
// none (the reconciler's) leaves it, and the job's version, as it was.
func (m *model) snapshot() string {
	s := fmt.Sprintf("%s %q", m.state, m.reduceState)
	all := slices.Clone(m.tasks)
	if m.task0 != nil {
		all = append(all, *m.task0)
	}
	for i, t := range all {
		if t.state.Terminal() {
			s += fmt.Sprintf(" %d:%s@%d=%s", i, t.state, t.gen, t.result)
		}
	}
	return s
}

// startReduce is StartReduce in the model: task 0 pending at its first
// generation, or its row left from an earlier reduce reset at the next.
func (m *model) startReduce() {
	m.reduceState = warren.ReduceRunning
	if m.task0 == nil {
		m.task0 = &modelTask{state: warren.TaskPending, gen: 1}
		return
	}
	*m.task0 = modelTask{state: warren.TaskPending, gen: m.task0.gen + 1}
}

// relay publishes every pending task of the model's job: the model's
// pending tasks, each at its generation and attempts, task 0 as the
// reduce task's own message.
func (m *model) relay() {
	m.note("relay")
	offered := map[int64]store.OutboxTask{}
	_, err := m.st.RelayBatch(m.ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		var refs []store.TaskRef
		for _, t := range tasks {
			if t.JobID == m.job.ID {
				refs = append(refs, t.Ref())
				offered[t.TaskID] = t
			}
		}
		return refs, nil
	})
	require.NoError(m.t, err, "relay")
	want := map[int64]int{} // task id: generation
	if m.open() && !m.paused {
		// A capped job gets the room its queued tasks leave, its pending
		// tasks in task id order (the reduce task is pending only once
		// every map task finished).
		room := len(m.tasks) + 1
		if c := m.policy.MaxConcurrency; c > 0 {
			room = max(0, c-m.queued())
		}
		for i, t := range m.tasks {
			if t.state == warren.TaskPending && len(want) < room {
				want[int64(i+1)] = t.gen
			}
		}
		if m.task0 != nil && m.task0.state == warren.TaskPending && len(want) < room {
			want[warren.ReduceTaskID] = m.task0.gen
		}
	}
	got := map[int64]int{}
	for id, o := range offered {
		got[id] = o.Generation
		require.Equal(m.t, m.task(id).attempts, o.Attempts, "task %d's attempts as the relay offers it", id)
		if id == warren.ReduceTaskID {
			require.Equal(m.t, [3]any{reduceTaskType, 1, int64(len(m.tasks))}, [3]any{o.Type, o.BatchSize, o.ExpectedTasks},
				"the reduce task's type, batch size and expected tasks as the relay offers it")
			require.JSONEq(m.t, `{"k":1}`, string(o.Payload), "the reduce task's payload")
		}
	}
	require.Equal(m.t, want, got, "the relay offers the job's pending tasks at their generations")
	if !m.open() {
		return
	}
	all := true
	for i := range m.tasks {
		if _, ok := want[int64(i+1)]; ok {
			m.tasks[i].state = warren.TaskQueued
		}
		all = all && m.tasks[i].state != warren.TaskPending
	}
	if _, ok := want[warren.ReduceTaskID]; ok && m.task0 != nil {
		m.task0.state = warren.TaskQueued
	}
	if all && m.state == warren.JobPending {
		m.state = warren.JobRunning
	}
}

// outcome delivers one task's outcome: a result or a failure, from its
// current run or, after a requeue, possibly from an earlier one.
func (m *model) outcome() {
	var id int64
	if m.reduce && m.drawReduceTask() {
		id = warren.ReduceTaskID
		if m.task0 == nil {
			m.unknownReduceOutcome()
			return
		}
	} else {
		id = int64(1 + m.intn(len(m.tasks)))
	}
	t := m.task(id)
	gen := t.gen
	switch {
	case t.state == warren.TaskPending && gen == 1:
		m.note("outcome of task %d: never published, no worker has it", id)
		return
	case t.state == warren.TaskPending || (gen > 1 && m.coin()):
		// A copy of an earlier run: still queued somewhere, or redelivered.
		gen = 1 + m.intn(gen-1)
	case m.intn(10) == 0:
		// A worker that copies no header: the outcome counts for the
		// current run.
		gen = 0
	}
	o := store.Outcome{JobID: m.job.ID, TaskID: id, State: warren.TaskCompleted, Attempts: t.attempts + 1,
		Worker: "w", Generation: gen}
	switch {
	case m.fails():
		o.State, o.Error = warren.TaskFailed, "failed in run "+strconv.Itoa(gen)
	case id == warren.ReduceTaskID:
		o.Result = json.RawMessage(strconv.Quote(fmt.Sprintf("reduced by run %d of %d", gen, t.gen)))
	default:
		o.Result = json.RawMessage(strconv.Itoa(100*t.gen + 10*gen + int(id)))
	}
	if id != warren.ReduceTaskID && m.intn(3) == 0 && len(m.tasks) < 16 {
		// A spawn, counted only with an applied completed outcome.
		for k := range 1 + m.intn(2) {
			o.Spawn = append(o.Spawn, json.RawMessage(fmt.Sprintf(`{"parent":%d,"k":%d}`, id, k)))
		}
		o.MaxJobTasks = m.maxTasks
	}
	m.note("outcome %d: task %d %s, generation %d (the task's is %d), attempts %d, spawning %d", len(m.sent)+1, id, o.State, gen, t.gen, o.Attempts, len(o.Spawn))
	m.apply(o, gen)
	m.sent = append(m.sent, o)
	m.outcomeGen = append(m.outcomeGen, gen)
}

// fails draws whether an outcome is a failure: half of them, or a
// quarter in a case with a reduce task, so that its job gets to reduce.
func (m *model) fails() bool {
	if m.reduce {
		return m.intn(4) == 0
	}
	return m.coin()
}

// drawReduceTask draws whether an outcome of a job with a reduce task is
// task 0's: often while task 0 runs, sometimes when it finished (a late
// copy), rarely before it exists.
func (m *model) drawReduceTask() bool {
	switch {
	case m.task0 == nil:
		return m.intn(8) == 0
	case !m.task0.state.Terminal():
		return m.coin()
	}
	return m.intn(4) == 0
}

// unknownReduceOutcome delivers an outcome of a reduce task that was
// never started: the store knows no such task and records nothing.
func (m *model) unknownReduceOutcome() {
	m.note("outcome of task 0 before any reduce started")
	report, err := m.st.ApplyOutcomes(m.ctx, []store.Outcome{{JobID: m.job.ID, TaskID: warren.ReduceTaskID,
		State: warren.TaskCompleted, Attempts: 1, Worker: "w", Generation: 1, Result: json.RawMessage(`"too early"`)}})
	require.NoError(m.t, err, "apply")
	require.Zero(m.t, report.Applied, "an outcome of a reduce task never started")
	if m.open() {
		require.Equal(m.t, []int{0}, report.Unknown, "an outcome of a reduce task never started is unknown")
	}
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
//
// Task 0's outcome applies only while the reduce runs; it moves no
// counter, and sets the reduce state to its own, which makes the job
// ready to close.
func (m *model) apply(o store.Outcome, gen int) {
	readyBefore := m.ready()
	batch := []store.Outcome{o}
	if len(o.Spawn) >= 2 && o.State == warren.TaskCompleted && m.coin() {
		// A spawn in parts, as a worker sends one too large for a message:
		// each delivery a run of its own, its parts in any order.
		batch = inParts(o, fmt.Sprintf("run-%d", len(m.trace)), len(o.Spawn))
		m.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		m.note("  (in %d spawn parts)", len(batch))
	}
	// Half the batches are recorded as the aggregator records them, with
	// the close of a job they make ready in their own transaction.
	var (
		report store.ApplyReport
		err    error
	)
	inline := m.coin()
	if inline {
		report, err = m.st.ApplyOutcomesClosing(m.ctx, batch, func(_ context.Context, job warren.Job, scan store.ResultScan) (store.Closing, bool, error) {
			state, result, msg := m.closingWith(job, scan)
			return store.Closing{State: state, Result: result, Error: msg}, true, nil
		})
	} else {
		report, err = m.st.ApplyOutcomes(m.ctx, batch)
	}
	require.NoError(m.t, err, "apply")
	t := m.task(o.TaskID)
	applies := m.open() && !t.state.Terminal() && (gen == 0 || gen == t.gen) &&
		(o.TaskID != warren.ReduceTaskID || m.reduceState == warren.ReduceRunning)
	require.Equal(m.t, applies, report.Applied == 1, "whether the outcome is applied (report %+v)", report)
	spawned, refused := 0, 0
	if applies {
		t.state = o.State
		// The run's attempts as the outcome reports them.
		t.attempts = o.Attempts
		t.result = string(o.Result)
		if o.State == warren.TaskCompleted && len(o.Spawn) > 0 {
			if o.MaxJobTasks > 0 && int64(len(m.tasks)+len(o.Spawn)) > o.MaxJobTasks {
				t.state, t.result, refused = warren.TaskFailed, "", 1
			} else {
				spawned = len(o.Spawn)
				for range o.Spawn {
					m.tasks = append(m.tasks, modelTask{state: warren.TaskPending, gen: 1})
				}
			}
		}
		if o.TaskID == warren.ReduceTaskID {
			m.reduceState = warren.ReduceCompleted
			if o.State == warren.TaskFailed {
				m.reduceState = warren.ReduceFailed
			}
		}
	}
	require.Equal(m.t, [2]int{spawned, refused}, [2]int{report.Spawned, report.SpawnRefused},
		"the tasks the outcome spawned, and whether its spawn was refused (report %+v)", report)
	closedInline := slices.ContainsFunc(report.ClosedJobs, func(c store.ClosedJob) bool { return c.Job.ID == m.job.ID })
	require.Equal(m.t, applies && !readyBefore && m.ready(), slices.Contains(report.ReadyToClose, m.job.ID) || closedInline,
		"the outcome's report lists the job ready to close (or closed) exactly when the outcome made it so (report %+v)", report)
	if inline && applies && !readyBefore && m.ready() {
		// Closed in the batch exactly when every task finished, the job
		// has no reduce task and is small enough.
		want := !m.reduce && m.reduceState == "" && m.count(warren.TaskPending)+m.count(warren.TaskQueued) == 0 &&
			len(m.tasks) <= store.InlineCloseTasks
		require.Equal(m.t, want, closedInline, "whether the batch closed the job (report %+v)", report)
	}
	if closedInline {
		m.note("  (the batch closed the job)")
		job, err := m.st.GetJob(m.ctx, m.job.ID)
		require.NoError(m.t, err, "get job")
		require.True(m.t, job.State.Terminal(), "the job the batch closed is closed")
		m.state = job.State
		m.cancelUnfinished()
	}
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
	allowed := (m.state == warren.JobFailed || m.state == warren.JobCompleted) &&
		(failed > 0 || m.reduceState == warren.ReduceFailed)
	if !allowed {
		require.ErrorIs(m.t, err, warren.ErrConflict, "redrive of a %s job with %d failed tasks, reduce state %q",
			m.state, failed, m.reduceState)
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
	// The reduce runs again on the new outcomes; task 0's row stays as
	// it is until then.
	m.reduceState = ""
}

// requeueCancelled sends back to the outbox, at their next run, the map
// tasks a close cancelled: reopening a closed job must let it close again
// with every task accounted for. A cancelled reduce task stays so.
func (m *model) requeueCancelled() {
	for i := range m.tasks {
		if m.tasks[i].state == warren.TaskCancelled {
			m.tasks[i].state = warren.TaskPending
			m.tasks[i].gen++
		}
	}
}

// replay reopens one failed task, as a dead-letter replay does.
//
// A map task is not reopened while the job's reduce runs or waits for
// its close (an open job whose reduce state is not ""), and reopening a
// closed job resets its reduce state; the reduce task is reopened only
// when its failure failed the job, which reopens reducing.
func (m *model) replay() {
	if m.reduce && m.intn(3) == 0 {
		m.replayReduce()
		return
	}
	i := m.intn(len(m.tasks))
	m.note("replay task %d", i+1)
	gen, ok, err := m.st.ReopenTask(m.ctx, m.job.ID, int64(i+1))
	require.NoError(m.t, err, "reopen")
	t := &m.tasks[i]
	want := t.state == warren.TaskFailed && m.state != warren.JobCancelled && !(m.open() && m.reduceState != "")
	require.Equal(m.t, want, ok, "reopen of a %s task of a %s job, reduce state %q", t.state, m.state, m.reduceState)
	if !ok {
		return
	}
	t.state = warren.TaskQueued
	t.gen++
	t.attempts = 0 // the replayed message carries x-retry 0
	require.Equal(m.t, t.gen, gen, "the reopened task's generation")
	m.noteReplayOverCap()
	if !m.open() {
		m.requeueCancelled()
		m.reduceState = ""
		m.state = warren.JobRunning
	}
	// An open job keeps its state: a capped job may still be pending,
	// with tasks its cap held back, when one of its tasks failed.
}

// replayReduce replays the reduce task's dead letter.
func (m *model) replayReduce() {
	m.note("replay task 0")
	gen, ok, err := m.st.ReopenTask(m.ctx, m.job.ID, warren.ReduceTaskID)
	switch {
	case m.task0 == nil && m.state == warren.JobCancelled:
		// A cancelled job's tasks are left as they are, unread.
		require.NoError(m.t, err, "reopen of a task of a cancelled job")
		require.False(m.t, ok, "reopen of a task of a cancelled job")
		return
	case m.task0 == nil:
		require.ErrorIs(m.t, err, warren.ErrNotFound, "reopen of a reduce task never started")
		return
	}
	require.NoError(m.t, err, "reopen")
	t := m.task0
	want := t.state == warren.TaskFailed && m.state == warren.JobFailed && m.reduceState == warren.ReduceFailed
	require.Equal(m.t, want, ok, "reopen of a %s reduce task of a %s job, reduce state %q", t.state, m.state, m.reduceState)
	if !ok {
		return
	}
	t.state, t.attempts, t.result = warren.TaskQueued, 0, ""
	t.gen++
	require.Equal(m.t, t.gen, gen, "the reopened reduce task's generation")
	m.requeueCancelled()
	m.state, m.reduceState = warren.JobRunning, warren.ReduceRunning
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
	m.cancelUnfinished()
}

// cancelUnfinished cancels the tasks that never finished, task 0 too, as
// a cancel or a close does.
func (m *model) cancelUnfinished() {
	for i := range m.tasks {
		if !m.tasks[i].state.Terminal() {
			m.tasks[i].state = warren.TaskCancelled
		}
	}
	if m.task0 != nil && !m.task0.state.Terminal() {
		m.task0.state = warren.TaskCancelled
	}
}

// pauseOrResume pauses or resumes the job, which must be open for
// either.
func (m *model) pauseOrResume() {
	pause := m.coin()
	m.note("pause=%t", pause)
	change := m.st.ResumeJob
	if pause {
		change = m.st.PauseJob
	}
	job, err := change(m.ctx, m.job.ID)
	if !m.open() {
		require.ErrorIs(m.t, err, warren.ErrConflict, "pause or resume of a %s job", m.state)
		return
	}
	require.NoError(m.t, err, "pause or resume")
	m.paused = pause
	require.Equal(m.t, pause, job.Paused(), "the answer's pause")
}

// reconcile runs a reconciler pass as if every task timeout had passed.
func (m *model) reconcile() {
	m.note("reconcile")
	readyBefore := m.ready()
	report, err := m.st.ReconcileStale(m.ctx, store.Staleness{Now: time.Now().Add(24 * time.Hour)}, 1000)
	require.NoError(m.t, err, "reconcile")
	var requeued, failed int
	if m.open() && !m.paused {
		settle := func(t *modelTask) {
			if t == nil || t.state != warren.TaskQueued {
				return
			}
			t.attempts++
			if t.attempts <= m.policy.MaxRetries {
				t.state = warren.TaskPending
				t.gen++
				requeued++
			} else {
				t.state = warren.TaskFailed
				t.result = ""
				failed++
			}
		}
		for i := range m.tasks {
			settle(&m.tasks[i])
		}
		settle(m.task0)
		if m.task0 != nil && m.task0.state == warren.TaskFailed && m.reduceState == warren.ReduceRunning {
			// A lost reduce task moves no counter: the reduce failed.
			m.reduceState = warren.ReduceFailed
		}
	}
	require.Equal(m.t, [2]int{requeued, failed}, [2]int{report.Requeued, report.Failed},
		"the pass requeues and fails as lost the job's queued tasks (report %+v)", report)
	require.Equal(m.t, failed > 0 && !readyBefore && m.ready(), slices.Contains(report.ReadyToClose, m.job.ID),
		"the pass lists the job ready to close exactly when it made it so (report %+v)", report)
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
	if m.reduce {
		between = append(between, m.cancel, m.reconcile)
		names = append(names, "a cancel", "a reconciler pass")
	}
	k := m.intn(len(between))
	m.note("close; should it reach its finish (or its start of the reduce), %s runs between its read and it", names[k])
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
		if m.reduce {
			// A reduce job closes as its reduce task's outcome says, or
			// failed over the tolerance before any reduce.
			want := warren.JobFailed
			if m.reduceState == warren.ReduceCompleted {
				want = warren.JobCompleted
			}
			require.Equal(m.t, want, job.State, "a job with a reduce task, reduce state %q, closes %s", m.reduceState, want)
		}
		m.state = job.State
		// A close cancels what never finished.
		m.cancelUnfinished()
	}
}

// closeJob is a server's close: it reads the job and, when it is open and
// ready to close, finishes it at the version read with the state and
// result its terminal outcomes give, or, when the job has a reduce task
// not started and is within its tolerance, starts the reduce at that
// version; when the job changed in between, it starts over, at most
// closeTries times.
func (m *model) closeJob() {
	for range closeTries {
		job, err := m.st.GetJob(m.ctx, m.job.ID)
		require.NoError(m.t, err, "get job")
		ready := readyToClose(job)
		listed, err := m.st.JobsToClose(m.ctx, 10)
		require.NoError(m.t, err, "jobs to close")
		require.Equal(m.t, ready, slices.Contains(listed, job.ID),
			"JobsToClose lists the %s job with %d+%d of %d tasks finished, reduce state %q, exactly when it is ready to close",
			job.State, job.CompletedTasks, job.FailedTasks, job.ExpectedTasks, job.ReduceState)
		require.Equal(m.t, m.ready(), ready, "the model and the store agree that the job is ready to close")
		if !ready {
			return
		}
		if job.Policy.ReduceTask != nil && job.ReduceState == "" && job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks) {
			before := m.snapshot()
			started, err := m.st.StartReduce(m.ctx, job.ID, job.Version)
			require.NoError(m.t, err, "start the reduce")
			// Only a step between the read and the start that changed
			// the job keeps the reduce from starting.
			require.Equal(m.t, before == m.snapshot(), started, "the reduce starts unless the job moved since the close read it")
			if started {
				m.startReduce()
				return
			}
			continue
		}
		state, result, msg := m.closing(job)
		before := m.snapshot()
		closed, err := m.st.FinishJob(m.ctx, job.ID, job.Version, state, result, msg)
		require.NoError(m.t, err, "finish job")
		// Only a step between the read and the finish that changed the
		// job keeps the close from closing it.
		require.Equal(m.t, before == m.snapshot(), closed, "the close closes the job unless it moved since the close read it")
		if closed {
			return
		}
	}
	require.Failf(m.t, "close", "job %s changed under each of %d closes", m.job.ID, closeTries)
}

// readyToClose says whether a server closes job now (or starts its
// reduce): it is open and its reduce task's outcome is recorded, or,
// before any reduce, every task finished or it fails fast and its
// failures are over the tolerance; never while its reduce task runs.
func readyToClose(job warren.Job) bool {
	if job.State.Terminal() {
		return false
	}
	switch job.ReduceState {
	case warren.ReduceRunning:
		return false
	case warren.ReduceCompleted, warren.ReduceFailed:
		return true
	}
	return job.Finished() || (job.Policy.FailFast && !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks))
}

// closing is the state, result and error a close of job records: failed
// over the tolerance, or completed with what the job's reducer makes of
// its terminal outcomes, scanned from the store.
//
// A job whose reduce task has an outcome closes as the aggregator closes
// it: completed with the task's result, or failed with its error.
func (m *model) closing(job warren.Job) (warren.JobState, []byte, string) {
	return m.closingWith(job, func(fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
		return m.st.ScanResults(m.ctx, job.ID, fn)
	})
}

// closingWith is closing with the job's results read by scan.
func (m *model) closingWith(job warren.Job, scan store.ResultScan) (warren.JobState, []byte, string) {
	if job.ReduceState == warren.ReduceCompleted || job.ReduceState == warren.ReduceFailed {
		task0, err := m.st.GetTask(m.ctx, job.ID, warren.ReduceTaskID)
		require.NoError(m.t, err, "get the reduce task")
		switch {
		case job.ReduceState == warren.ReduceFailed:
			return warren.JobFailed, nil, "reduce task failed: " + task0.Error
		case len(task0.Result) == 0:
			return warren.JobCompleted, []byte("null"), ""
		}
		return warren.JobCompleted, task0.Result, ""
	}
	if !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks) {
		return warren.JobFailed, nil, fmt.Sprintf("%d of %d tasks failed, over the tolerance", job.FailedTasks, job.ExpectedTasks)
	}
	require.Nil(m.t, job.Policy.ReduceTask, "a job with a reduce task closes before any reduce only over its tolerance")
	result, err := m.reducers.Reduce(job.Policy.Reduce, func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
		return scan(func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			return fn(taskID, state != warren.TaskCompleted, result)
		})
	})
	require.NoError(m.t, err, "reduce the job's results")
	return warren.JobCompleted, result, ""
}

// check compares the store with the model after every step.
// queued counts the job's queued tasks, its reduce task among them: what
// its concurrency cap bounds.
func (m *model) queued() int {
	n := int(m.count(warren.TaskQueued))
	if m.task0 != nil && m.task0.state == warren.TaskQueued {
		n++
	}
	return n
}

// noteReplayOverCap remembers that a replay took the job over its cap.
func (m *model) noteReplayOverCap() {
	if c := m.policy.MaxConcurrency; c > 0 && m.queued() > c {
		m.overCap = true
	}
}

// checkCap checks that the job's queued tasks (in the store) are within
// its concurrency cap, unless a replay took it over since it last was.
func (m *model) checkCap(tasks []warren.TaskRecord) {
	c := m.policy.MaxConcurrency
	if c == 0 {
		return
	}
	queued := 0
	for _, tr := range tasks {
		if tr.State == warren.TaskQueued {
			queued++
		}
	}
	if queued <= c {
		m.overCap = false
		return
	}
	require.True(m.t, m.overCap, "%d tasks queued, over the job's max concurrency %d, and no replay did it", queued, c)
}

func (m *model) check() {
	job, err := m.st.GetJob(m.ctx, m.job.ID)
	require.NoError(m.t, err, "get job")
	tasks := allTasks(m.t, m.st, m.job.ID, "")
	m.checkCap(tasks)
	if m.task0 != nil {
		require.NotEmpty(m.t, tasks, "the job's tasks")
		m.checkReduceTask(tasks[0])
		tasks = tasks[1:]
	}
	require.Len(m.t, tasks, len(m.tasks), "the job's tasks")
	var completed, failed int64
	for i, tr := range tasks {
		want := m.tasks[i]
		require.Equal(m.t, int64(i+1), tr.TaskID, "the map tasks in task id order")
		require.Equal(m.t, want.state, tr.State, "task %d's state (job %s)", i+1, job.State)
		require.Equal(m.t, want.gen, tr.Generation, "task %d's generation", i+1)
		require.Equal(m.t, want.attempts, tr.Attempts, "task %d's attempts", i+1)
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
	require.Equal(m.t, int64(len(m.tasks)), job.ExpectedTasks, "the job's expected tasks are its task rows, spawned ones included")
	require.Equal(m.t, int64(len(m.tasks)-m.submitted), job.SpawnedTasks, "the job's spawned tasks are those beyond its submitted ones")
	require.Equal(m.t, m.state, job.State, "the job's state")
	if !m.open() {
		m.paused = false // a close clears the pause
	}
	require.Equal(m.t, m.paused, job.Paused(), "the job's pause")
	require.Equal(m.t, m.reduceState, job.ReduceState, "the job's reduce state")
	if m.reduce {
		m.checkReduceReads(tasks)
	}
	switch job.State {
	case warren.JobCompleted:
		require.Equal(m.t, job.ExpectedTasks, completed+failed, "a job closes completed only with every task finished")
		raw, err := m.st.JobResult(m.ctx, m.job.ID)
		require.NoError(m.t, err, "result")
		if m.reduce {
			require.Equal(m.t, warren.ReduceCompleted, m.reduceState, "a job with a reduce task completes by its reduce task")
			require.Equal(m.t, m.task0.result, string(raw), "the stored result is the reduce task's last applied result")
			break
		}
		require.Equal(m.t, m.collect(), string(raw), "the stored result is what the terminal outcomes reduce to")
	case warren.JobFailed:
		if !(m.policy.FailFast && !m.policy.Tolerates(failed, job.ExpectedTasks)) {
			require.Equal(m.t, job.ExpectedTasks, completed+failed, "a job closes failed before every task finished only by fail-fast")
		}
	}
}

// checkReduceTask compares the reduce task's row, listed first, with the
// model's.
func (m *model) checkReduceTask(tr warren.TaskRecord) {
	want := m.task0
	require.Equal(m.t, warren.ReduceTaskID, tr.TaskID, "the reduce task is listed first")
	require.Equal(m.t, want.state, tr.State, "the reduce task's state (reduce state %q)", m.reduceState)
	require.Equal(m.t, want.gen, tr.Generation, "the reduce task's generation")
	require.Equal(m.t, want.attempts, tr.Attempts, "the reduce task's attempts")
	if tr.State == warren.TaskCompleted {
		require.Equal(m.t, want.result, string(tr.Result), "the reduce task's result: an outcome counted that should not have")
	}
}

// checkReduceReads checks what a reduce reads of the job: GetTask gives
// task 0 as the model has it (not found before any reduce), and
// ScanOutcomes gives the map tasks as tasks lists them, never task 0.
func (m *model) checkReduceReads(tasks []warren.TaskRecord) {
	got, err := m.st.GetTask(m.ctx, m.job.ID, warren.ReduceTaskID)
	if m.task0 == nil {
		require.ErrorIs(m.t, err, warren.ErrNotFound, "no reduce task before any reduce")
	} else {
		require.NoError(m.t, err, "get the reduce task")
		require.Equal(m.t, m.task0.state, got.State, "GetTask gives the reduce task's state")
		require.Equal(m.t, m.task0.gen, got.Generation, "GetTask gives the reduce task's generation")
	}
	var want, scanned []warren.TaskOutcome
	for _, tr := range tasks {
		want = append(want, warren.TaskOutcome{TaskID: tr.TaskID, State: tr.State, Result: tr.Result, Error: tr.Error})
	}
	require.NoError(m.t, m.st.ScanOutcomes(m.ctx, m.job.ID, 0, func(o warren.TaskOutcome) error {
		scanned = append(scanned, o)
		return nil
	}), "scan outcomes")
	require.Equal(m.t, want, scanned, "ScanOutcomes gives the map tasks as they are listed")
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
