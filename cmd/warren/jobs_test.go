package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// apiServer serves the real API on a fresh SQLite store.
func apiServer(t *testing.T) (string, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h, err := api.New(api.Config{Store: st})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, st
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestSubmitJSONAndNDJSONSpecs(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, spec string
		args       []string
		wantType   string
		wantReduce string
		wantTasks  int64
	}{
		{"json", `{"type": "echo", "tasks": [1, 2, 3], "reduce": "sum"}`, nil, "echo", "sum", 3},
		{"json over lines", "{\n  \"type\": \"echo\",\n  \"tasks\": [1,\n 2]\n}\n", nil, "echo", "collect", 2},
		{"ndjson", "{\"type\": \"echo\"}\n{\"a\": 1}\n\n{\"a\": 2}\n3\n", nil, "echo", "collect", 3},
		{"overrides", "{\"type\": \"echo\"}\n1\n", []string{"--type", "wordcount", "--reduce", "merge"}, "wordcount", "merge", 1},
	} {
		args := append([]string{"submit", "--server", url, writeFile(t, tc.spec)}, tc.args...)
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, 0, code, "%s: %s", tc.name, errOut)
		job, err := st.GetJob(ctx, strings.TrimSpace(out))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.wantType, job.Type, tc.name)
		require.Equal(t, tc.wantReduce, job.Policy.Reduce, tc.name)
		require.Equal(t, tc.wantTasks, job.ExpectedTasks, tc.name)
	}
}

func TestSubmitBadSpecsChangeNothing(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	for _, spec := range []string{
		``,
		`not json`,
		`{"type": "echo", "tasks": []}`,
		`{"type": "echo", "tasks": [1], "reduce": "nope"}`,
		"{\"type\": \"echo\", \"tasks\": [1]}\n2\n",
		"{\"type\": \"echo\"}\n{broken\n",
		`{"type": "echo", "tasks": [1], "unknown": true}`,
	} {
		code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, spec))
		require.Equal(t, 3, code, "spec %q", spec)
		require.Empty(t, out, "spec %q", spec)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line for %q: %q", spec, errOut)
	}
	jobs, _, err := st.ListJobs(context.Background(), store.ListJobsOpts{})
	require.NoError(t, err)
	require.Empty(t, jobs)
}

func TestStatusAndWatch(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	ctx := context.Background()
	code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","tasks":[1]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "state     pending")
	code, out, _ = runCLI(t, nil, "status", "--json", "--server", url, id)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"expected_tasks": 1`)

	_, err := st.CancelJob(ctx, id)
	require.NoError(t, err)
	code, out, errOut = runCLI(t, nil, "watch", id, "--server", url)
	require.Equal(t, 1, code, "a cancelled job is not a success")
	require.Contains(t, out, "cancelled")
	require.Contains(t, errOut, "is cancelled")

	code, _, errOut = runCLI(t, nil, "status", "no-such-job", "--server", url)
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "404")
	code, _, _ = runCLI(t, nil, "status", "--server", url)
	require.Equal(t, 2, code, "the id is required")
}

// status shows the counts in the one vocabulary (finished = completed +
// failed), when the job's tasks were all published and when its first
// one started, and its rate over the run from that start.
func TestStatusShowsTrueNumbers(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","tasks":[1,2]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "tasks     2 expected: 0 finished (0 completed, 0 failed), 2 pending\n")
	require.Contains(t, out, "rate      - tasks/s\n")
	require.NotContains(t, out, "started   ", "no task started yet")

	completeJob(t, st, id) // its tasks started 4 s ago
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "tasks     2 expected: 2 finished (2 completed, 0 failed), 0 pending\n")
	require.Regexp(t, `(?m)^published \S+ \S+ \(every task out to the broker\)$`, out)
	require.Regexp(t, `(?m)^started   \S+ \S+ \(the first task's start\)$`, out)
	require.Regexp(t, `(?m)^rate      0\.[45]\d tasks/s over 4\.\d+s$`, out)
}

// `warren delete` deletes a closed job and refuses an open one; status
// shows a job's retention.
func TestDeleteCommand(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","retention":3600,"tasks":[1]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "retention 1h0m0s once it closes\n")

	code, out, errOut = runCLI(t, nil, "delete", id, "--server", url)
	require.Equal(t, 3, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "cancel it first")

	_, err := st.CancelJob(context.Background(), id)
	require.NoError(t, err)
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "retention 1h0m0s: deleted after ")

	code, out, errOut = runCLI(t, nil, "delete", "--server", url, id)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "job "+id+" deleted\n", out)
	_, err = st.GetJob(context.Background(), id)
	require.ErrorIs(t, err, warren.ErrNotFound)

	code, _, errOut = runCLI(t, nil, "delete", id, "--server", url)
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "404")
	code, _, _ = runCLI(t, nil, "delete", "--server", url)
	require.Equal(t, 2, code, "the id is required")
}

// `warren watch` follows a job through its event stream: progress, then
// the closed job's status, exit 0 when it completed, and no polling.
func TestWatchFollowsEvents(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h, err := api.New(api.Config{Store: st, Tokens: []api.Token{{Value: "tok", Scopes: []api.Scope{api.ScopeRead}}}})
	require.NoError(t, err)
	streamed := make(chan struct{}, 10)
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			// Told once the first event is written, so that the job
			// moves on only after watch was shown it pending.
			h.ServeHTTP(&firstWrite{ResponseWriter: w, written: streamed}, r)
			return
		}
		polls.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := context.Background()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect"}},
		func(yield func(json.RawMessage, error) bool) {
			_ = yield(json.RawMessage(`1`), nil) && yield(json.RawMessage(`2`), nil)
		})
	require.NoError(t, err)
	type answer struct {
		code        int
		out, errOut string
	}
	done := make(chan answer, 1)
	go func() {
		code, out, errOut := runCLI(t, map[string]string{"WARREN_TOKEN": "tok"}, "watch", job.ID, "--server", srv.URL)
		done <- answer{code, out, errOut}
	}()
	select {
	case <-streamed:
	case <-time.After(10 * time.Second):
		t.Fatal("warren watch opened no event stream")
	}
	_, err = st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`), Attempts: 1},
		{JobID: job.ID, TaskID: 2, State: warren.TaskCompleted, Result: json.RawMessage(`2`), Attempts: 1},
	})
	require.NoError(t, err)
	job, err = st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	closed, err := st.FinishJob(ctx, job.ID, job.Version, warren.JobCompleted, []byte(`[1,2]`), "")
	require.NoError(t, err)
	require.True(t, closed)

	var a answer
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("warren watch did not return")
	}
	require.Equal(t, 0, a.code, "stderr: %s", a.errOut)
	require.Contains(t, a.out, "progress: pending 0/2 tasks finished (0 failed), - tasks/s")
	require.Contains(t, a.out, "progress: completed 2/2 tasks finished (0 failed)")
	require.Contains(t, a.out, "state     completed\n")
	require.Contains(t, a.out, "result    /v1/jobs/"+job.ID+"/result\n")
	require.Zero(t, polls.Load(), "no polling: the events drove the output")
}

// firstWrite is a ResponseWriter that tells written after its first Write.
type firstWrite struct {
	http.ResponseWriter
	written chan<- struct{}
	once    sync.Once
}

func (f *firstWrite) Write(p []byte) (int, error) {
	n, err := f.ResponseWriter.Write(p)
	f.once.Do(func() { f.written <- struct{}{} })
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (f *firstWrite) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// closeInStore publishes job id's n tasks, records each completed, and
// closes the job as state with result, as a server would.
func closeInStore(t *testing.T, st store.Store, id string, n int, state warren.JobState, result string) {
	t.Helper()
	ctx := context.Background()
	_, err := st.RelayBatch(ctx, 100, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	outcomes := make([]store.Outcome, n)
	for i := range outcomes {
		outcomes[i] = store.Outcome{JobID: id, TaskID: int64(i + 1), State: warren.TaskCompleted, Result: json.RawMessage(`1`)}
	}
	_, err = st.ApplyOutcomes(ctx, outcomes)
	require.NoError(t, err)
	job, err := st.GetJob(ctx, id)
	require.NoError(t, err)
	ok, err := st.FinishJob(ctx, id, job.Version, state, []byte(result), "")
	require.NoError(t, err)
	require.True(t, ok)
}

// `warren submit` takes a spec's then; `warren status` shows the chain;
// `warren watch` follows it to its last job, whose state is its exit
// status.
func TestSubmitStatusAndWatchAChain(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	code, out, errOut := runCLI(t, nil, "submit", "--server", url,
		writeFile(t, `{"type":"split","tasks":[1,2],"then":{"type":"count","reduce":"sum","then":{"type":"report"}}}`))
	require.Equal(t, 0, code, errOut)
	first := strings.TrimSpace(out)
	job, err := st.GetJob(context.Background(), first)
	require.NoError(t, err)
	require.Equal(t, "sum", job.Then.Policy.Reduce, "the follow-up's reduce is read as the job's")
	code, out, _ = runCLI(t, nil, "status", first, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "then      count, once this job completes (2 more jobs in the chain)\n")

	closeInStore(t, st, first, 2, warren.JobCompleted, `[1,2,3]`)
	job, err = st.GetJob(context.Background(), first)
	require.NoError(t, err)
	second := job.NextJob
	closeInStore(t, st, second, 3, warren.JobCompleted, `[6]`)
	job, err = st.GetJob(context.Background(), second)
	require.NoError(t, err)
	third := job.NextJob
	closeInStore(t, st, third, 1, warren.JobCompleted, `[6]`)

	code, out, _ = runCLI(t, nil, "status", second, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "previous  "+first+"\n")
	require.Contains(t, out, "next      "+third+"\n")

	code, out, errOut = runCLI(t, nil, "watch", first, "--server", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "following job "+second+", its follow-up\n")
	require.Contains(t, out, "following job "+third+", its follow-up\n")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "previous  "+second), "the last stage's status ends the output:\n%s", out)

	// A failed last stage is the chain's exit status.
	code, out, _ = runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"split","tasks":[1],"reduce":"sum","then":{"type":"count"}}`))
	require.Equal(t, 0, code)
	failing := strings.TrimSpace(out)
	closeInStore(t, st, failing, 1, warren.JobCompleted, `1`)
	code, out, errOut = runCLI(t, nil, "watch", "--server", url, failing)
	require.Equal(t, 1, code, "the follow-up failed: %s", out)
	require.Contains(t, errOut, "is failed")
	require.Contains(t, out, "not a JSON array")
}

// `warren status` says how many of a job's tasks were spawned, once some
// were.
func TestStatusCountsSpawnedTasks(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	ctx := context.Background()
	code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"crawl","tasks":[1]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.NotContains(t, out, "spawned", "no task spawned yet")

	_, err := st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{{JobID: id, TaskID: 1, State: warren.TaskCompleted,
		Spawn: []json.RawMessage{json.RawMessage(`2`), json.RawMessage(`3`)}}})
	require.NoError(t, err)
	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "tasks     3 expected: 1 finished (1 completed, 0 failed), 2 pending")
	require.Contains(t, out, "spawned   2 of the expected tasks were spawned by its tasks")
}
