package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// Jobs without batch_size are batched by their tasks' durations: no-op
// tasks share messages, 15 ms tasks go one per message, and a job with
// batch_size 1 is never batched. The relay's histogram of tasks per
// message shows what went out.
func TestAJobWithoutBatchSizeIsBatchedByItsTasksDurations(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	srv, err := server.New(cfg)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })

	w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: cfg.Prefix, Concurrency: 8})
	require.NoError(t, err)
	w.Handle("sleep", func(ctx context.Context, tk worker.Task) (any, error) {
		var ms int
		if err := json.Unmarshal(tk.Payload, &ms); err != nil {
			return nil, worker.Permanent(err)
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return ms, nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); require.NoError(t, <-werr) })

	c := client.New(srv.URL())
	run := func(n, ms, batchSize int) (tasks, messages int) {
		t.Helper()
		before := messageTasks(t, srv.URL())
		spec := client.JobSpec{Type: "sleep", Reduce: "sum", BatchSize: batchSize, Tasks: make([]json.RawMessage, n)}
		for i := range spec.Tasks {
			spec.Tasks[i] = json.RawMessage(strconv.Itoa(ms))
		}
		sub, err := c.Submit(ctx, spec)
		require.NoError(t, err)
		wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		job, err := c.Wait(wait, sub.ID, nil)
		require.NoError(t, err)
		require.EqualValues(t, "completed", job.State)
		require.Zero(t, job.BatchSize, "the job leaves its batch size to warren")
		res, err := c.Result(ctx, sub.ID)
		require.NoError(t, err)
		require.JSONEq(t, strconv.Itoa(n*ms), string(res))
		after := messageTasks(t, srv.URL())
		return after[0] - before[0], after[1] - before[1]
	}

	tasks, messages := run(3000, 0, 0)
	require.Equal(t, 3000, tasks)
	require.Less(t, messages, 300, "no-op tasks travel in batches: a probe of 16 single messages, then up to 64 tasks each")
	t.Logf("3,000 no-op tasks in %d messages", messages)

	tasks, messages = run(60, 15, 0)
	require.Equal(t, 60, tasks)
	require.Equal(t, 60, messages, "15 ms tasks go one per message")
}

// messageTasks returns the sum and the count of the server's
// warren_relay_message_tasks histogram: tasks and task messages published.
func messageTasks(t *testing.T, url string) [2]int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out [2]int
	for _, line := range strings.Split(string(body), "\n") {
		for i, name := range []string{"warren_relay_message_tasks_sum ", "warren_relay_message_tasks_count "} {
			if v, ok := strings.CutPrefix(line, name); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err, line)
				out[i] = int(f)
			}
		}
	}
	return out
}
