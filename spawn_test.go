package warren_test

// End-to-end tests of spawned tasks (docs/protocol.md, "Spawned tasks"):
// tasks that add tasks to their own job, recorded with their parent's
// completed result, against the real broker and both stores.

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// page is a crawler's task: a page at a depth of the site's tree, named
// by its path ("r", "r.0", "r.0.2", ...).
type page struct {
	Path  string `json:"path"`
	Depth int    `json:"depth"`
}

// treeSize is the number of pages of a tree of depth levels below its
// root, each page linking fanout pages.
func treeSize(depth, fanout int) int {
	n, level := 0, 1
	for range depth + 1 {
		n += level
		level *= fanout
	}
	return n
}

// crawlWorker runs a worker serving "crawl": a page above depth links
// fanout pages, spawned in two calls of Spawn; its result is its path.
// fail, when set, may fail a run instead (its error is returned after
// the spawn, which the failure must drop).
func crawlWorker(t *testing.T, b *testBundle, depth, fanout int, fail func(p page, tk worker.Task) error) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("crawl", func(_ context.Context, tk worker.Task) (any, error) {
		var p page
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		if p.Depth < depth {
			var links []any
			for i := range fanout {
				links = append(links, page{Path: fmt.Sprintf("%s.%d", p.Path, i), Depth: p.Depth + 1})
			}
			if err := tk.Spawn(links[:fanout/2]...); err != nil {
				return nil, err
			}
			if err := tk.Spawn(links[fanout/2:]...); err != nil {
				return nil, err
			}
		}
		if fail != nil {
			if err := fail(p, tk); err != nil {
				return nil, err
			}
		}
		return p.Path, nil
	})
	w.Reducer("count", func(_ context.Context, _ worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		var n, last int64
		for o, err := range outcomes {
			if err != nil {
				return nil, err
			}
			if o.TaskID <= last {
				return nil, worker.Permanent(fmt.Errorf("task %d after task %d", o.TaskID, last))
			}
			last, n = o.TaskID, n+1
		}
		return n, nil
	})
	runWorker(t, w)
	return w
}

// submitCrawl creates a job of one "crawl" task, the root page, on
// policy, and wakes the relays.
func (b *testBundle) submitCrawl(t *testing.T, policy warren.Policy) warren.Job {
	t.Helper()
	root := func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`{"path":"r","depth":0}`), nil) }
	job, created, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "crawl", Policy: policy}, root)
	require.NoError(t, err)
	require.True(t, created)
	b.wakeRelays()
	return job
}

// expectTree checks a closed crawl of a tree of size pages: exact
// counters, and each page's path once in the collected result.
func (b *testBundle) expectTree(t *testing.T, id string, size int) []string {
	t.Helper()
	ctx := context.Background()
	job, err := b.store.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State)
	require.Equal(t, int64(size), job.ExpectedTasks, "expected_tasks is the tree's size")
	require.Equal(t, int64(size-1), job.SpawnedTasks, "every task but the root was spawned")
	require.Equal(t, int64(size), job.CompletedTasks)
	raw, err := b.store.JobResult(ctx, id)
	require.NoError(t, err)
	var paths []string
	require.NoError(t, json.Unmarshal(raw, &paths))
	require.Len(t, paths, size)
	seen := make(map[string]bool, size)
	for _, p := range paths {
		require.False(t, seen[p], "page %s once", p)
		seen[p] = true
	}
	require.Equal(t, "r", paths[0], "the root is task 1")
	return paths
}

// A crawl whose pages spawn the pages they link, three levels deep,
// completes with every page once, expected_tasks the tree's size, and
// the results in task id order: a level's pages after the one above.
func TestSpawnedTreeCompletesExactly(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		crawlWorker(t, b, 3, 3, nil)
		job := b.submitCrawl(t, warren.Policy{Reduce: "collect"})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		paths := b.expectTree(t, job.ID, treeSize(3, 3))
		depth := func(p string) int { return len(p) / 2 } // "r", "r.0", "r.0.1", ...
		for i := 1; i < len(paths); i++ {
			require.LessOrEqual(t, depth(paths[i-1]), depth(paths[i]), "a child's task id is after its parent's")
		}
	})
}

// A reduce task sees every spawned task, in task id order.
func TestReduceSeesEverySpawnedTask(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		crawlWorker(t, b, 2, 4, nil)
		job := b.submitCrawl(t, warren.Policy{ReduceTask: &warren.ReduceTask{Type: "count"}})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		raw, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprint(treeSize(2, 4)), string(raw))
		got, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(treeSize(2, 4)), got.ExpectedTasks)
	})
}

// A run that spawns and then fails adds nothing: a retried page spawns
// once, with the run that completes, and a page that fails for good
// spawns nothing at all.
func TestAFailedRunSpawnsNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupWith(t, kind, &broker.TopologyOptions{RetryTiers: testTiers})
		b.startServer(t, b.store)
		var (
			mu    sync.Mutex
			tries = make(map[string]int)
		)
		crawlWorker(t, b, 2, 2, func(p page, tk worker.Task) error {
			mu.Lock()
			defer mu.Unlock()
			tries[p.Path]++
			switch {
			case p.Path == "r.0" && tries[p.Path] < 3:
				return fmt.Errorf("transient failure %d", tries[p.Path])
			case p.Path == "r.1":
				return worker.Permanent(fmt.Errorf("page gone"))
			}
			return nil
		})
		job := b.submitCrawl(t, warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 100, MaxRetries: 3})
		state := b.waitClosed(t, job.ID)
		got, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.JobCompleted, state, "%+v", got)
		// r, r.0 and r.1, then r.0's two children once; r.1's none.
		require.Equal(t, int64(5), got.ExpectedTasks)
		require.Equal(t, int64(4), got.CompletedTasks)
		require.Equal(t, int64(1), got.FailedTasks)
		mu.Lock()
		require.Equal(t, 3, tries["r.0"], "r.0 ran three times")
		mu.Unlock()
	})
}

// A result delivered twice, by a worker with no warren code, spawns its
// tasks once, and one of a generation its task never had spawns nothing.
func TestADuplicatedSpawnAddsItsTasksOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n = 3
		job := b.submit(t, n, warren.Policy{})
		pc := b.takePlain(t, n)
		var bodies []map[string]any
		for _, tk := range pc.tasks {
			body := map[string]any{"job_id": tk.JobID, "task_id": tk.TaskID, "result": doubled(tk),
				"spawn": []any{map[string]int{"n": 10 * tk.Payload.N}}}
			bodies = append(bodies, body, body)
		}
		stale := map[string]any{"job_id": job.ID, "task_id": 1, "result": 0, "spawn": []any{map[string]int{"n": 99}}}
		// First a result of a run task 1 never had, while it is queued.
		publishRaw(t, pc, []map[string]any{stale}, amqp.Table{"x-generation": int64(7)})
		publishRaw(t, pc, bodies, nil)
		pc.ackAll(t)
		require.NoError(t, pc.ch.Close()) // its consumer would take the children
		b.waitFor(t, func() bool {
			j, err := b.store.GetJob(context.Background(), job.ID)
			return err == nil && j.ExpectedTasks == 2*n
		}, "the spawns recorded")

		children := b.takePlain(t, n)
		var ns []int
		for _, tk := range children.tasks {
			ns = append(ns, tk.Payload.N)
		}
		require.ElementsMatch(t, []int{10, 20, 30}, ns)
		children.publish(t, children.tasks, doubled)
		children.ackAll(t)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		got, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(2*n), got.ExpectedTasks, "each parent's spawn once")
		require.Equal(t, int64(2*n), got.CompletedTasks)
		raw, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `[2, 4, 6, 20, 40, 60]`, string(raw), "the children after their parents, in task id order")
	})
}

// publishRaw publishes bodies as result messages with headers, with
// plain amqp091-go, and waits for their confirms.
func publishRaw(t *testing.T, pc *plainClient, bodies []map[string]any, headers amqp.Table) {
	t.Helper()
	ch, err := pc.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	for _, body := range bodies {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), pc.b.names.Prefix+"results.x", "result", true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: headers, Body: raw})
		require.NoError(t, err)
		ok, err := c.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// A spawn over the server's limit of tasks per job fails its parent,
// with an error that says so, and the job closes.
func TestASpawnOverTheJobLimitFailsItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.maxJobTasks = 3
	b.startServer(t, b.store)
	var runs atomic.Int64
	crawlWorker(t, b, 1, 4, func(page, worker.Task) error { runs.Add(1); return nil })
	job := b.submitCrawl(t, warren.Policy{})
	require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID))
	got, err := b.store.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.ExpectedTasks)
	errs, err := b.store.JobErrors(context.Background(), job.ID, 10)
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error, "over the limit of 3 tasks per job")
}

// A spawn too large for one message goes in parts, recorded as one
// outcome once every part is: the children exist once, in order.
func TestASpawnInPartsAddsEveryTaskOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		cfg := b.workerConfig(4)
		cfg.MaxMessageBytes, cfg.MaxResultBytes = 64<<10, 16<<10
		w, err := worker.New(cfg)
		require.NoError(t, err)
		const children = 300
		w.Handle("fan", func(_ context.Context, tk worker.Task) (any, error) {
			var p struct{ N int }
			if err := json.Unmarshal(tk.Payload, &p); err != nil {
				return nil, worker.Permanent(err)
			}
			if p.N == 0 {
				for i := 1; i <= children; i++ {
					if err := tk.Spawn(map[string]any{"N": i, "pad": strings.Repeat("p", 1<<10)}); err != nil {
						return nil, err
					}
				}
			}
			return p.N, nil
		})
		runWorker(t, w)
		root := func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`{"N":0}`), nil) }
		job, _, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "fan", Policy: warren.Policy{Reduce: "collect"}}, root)
		require.NoError(t, err)
		b.wakeRelays()
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		got, err := b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(children+1), got.ExpectedTasks)
		raw, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)
		var ns []int
		require.NoError(t, json.Unmarshal(raw, &ns))
		for i, n := range ns {
			require.Equal(t, i, n, "task %d: the children in spawn order", i+1)
		}
	})
}
