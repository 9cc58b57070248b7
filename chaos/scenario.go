package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scenario is one fault injected into a running job.
type scenario struct {
	name    string
	store   string // "sqlite" or "postgres"
	servers int
	// prepare, if set, runs once the servers and workers are up, before
	// the job is submitted; it records what it did in r.faults.
	prepare func(r *runner) error
	// fault runs while the job runs; it records what it did in r.faults.
	fault func(r *runner) error
	// batchSize, when above 0, is the job's batch_size; 0 submits none,
	// leaving the batch size to warren.
	batchSize int
	// job is the kind of job the scenario runs: "" is N flaky tasks
	// summed; jobTree one task that spawns a tree (treeLevels levels of
	// treeFanout children), its depths summed; jobCapped the flaky tasks
	// with max_concurrency cappedAt, whose recorded runs must never
	// overlap more than that; jobSmall many small jobs from concurrent
	// clients (smalljobs.go).
	job string
	// defaultTimeout submits the job without the target's taskTimeout:
	// with warren's default task_timeout (an hour) the reconciler cannot
	// recover a task within the scenario, so the job closes in time only
	// if the broker delivers every message itself.
	defaultTimeout bool
	// closeWithin, when above 0, fails the scenario unless its job closed
	// within that long of its submission.
	closeWithin time.Duration
	// optIn keeps the scenario out of a run that does not name it in
	// CHAOS_ONLY: it can fail for a cause not found yet.
	optIn bool
}

// Job kinds (scenario.job).
const (
	jobTree   = "tree"
	jobCapped = "capped"
)

// The tree of the spawning scenarios: 1 + 6 + 36 + 216 + 1,296 + 7,776 =
// 9,331 tasks, each spawning its children, about the main suite's 10,000.
const treeLevels, treeFanout = 5, 6

// cappedAt is the capped scenarios' max_concurrency: under the 3
// workers' slots, so that the cap, not the workers, bounds the job.
const cappedAt = 16

// treeSize is the number of tasks of a tree of levels levels below its
// root, each node above the last spawning fanout children, and the sum
// of their depths (what the tree job reduces to with "sum").
func treeSize(levels, fanout int) (tasks int, depthSum int64) {
	width := 1
	for d := 0; d <= levels; d++ {
		tasks += width
		depthSum += int64(d * width)
		width *= fanout
	}
	return tasks, depthSum
}

// target is the RabbitMQ the scenarios run on, and how to put the
// services right after each scenario.
type target struct {
	amqpURL string   // WARREN_AMQP_URL of every process: one URL, or a cluster's list
	env     []string // more environment for every warren process
	// restore brings the broker (and, for the main suite, PostgreSQL)
	// back after a scenario, failing o when it cannot.
	restore func(o *outcome)
	// depths lists the prefix's queues with their message counts.
	depths func(prefix string) string
	// cluster is the local cluster the cluster scenarios fault; nil for
	// the main suite.
	cluster *cluster
	// taskTimeout, if not 0, is the jobs' task_timeout in seconds: short
	// enough for the reconciler to republish, within the scenario, tasks
	// whose messages the broker holds back.
	taskTimeout int
	// failEvery, if not 0, makes every failEvery-th task fail once (and
	// wait in a retry tier) instead of every 500th.
	failEvery int
}

// mainTarget is the main suite's: the local RabbitMQ and PostgreSQL,
// started again when a scenario left them down.
func mainTarget() *target {
	return &target{
		amqpURL: amqpURL(),
		restore: func(o *outcome) {
			if err := ensureBroker(); err != nil {
				o.fail("RabbitMQ not back: %v", err)
			}
			if err := ensurePostgres(); err != nil {
				o.fail("PostgreSQL not back: %v", err)
			}
		},
		depths: queueDepths,
	}
}

// outcome is what the table shows for one scenario.
type outcome struct {
	name       string
	faults     string
	duration   time.Duration
	lost       int // -1: unknown
	duplicates float64
	dupNote    string
	result     string
	// want is the result the job must reduce to, when it is not the
	// flaky tasks' sum (a tree's depths).
	want     string
	problems []string
}

func (o *outcome) ok() bool { return len(o.problems) == 0 }

func (o *outcome) fail(format string, args ...any) {
	o.problems = append(o.problems, fmt.Sprintf(format, args...))
}

// server is a running `warren server` with its API address.
type server struct {
	*proc
	base string
}

// runner holds one scenario's processes, store and job.
type runner struct {
	sc       scenario
	tg       *target
	bin      string
	dir      string
	prefix   string
	env      []string
	n        int
	servers  []*server
	workers  []*proc
	others   []*proc // workers that serve other types than the job's
	seq      int
	jobID    string
	faults   []string
	dupsSeen float64 // counted by servers that were killed since
	// firstTrigger is the job's progress when the first fault was
	// triggered; closedEarly is set when the job had already closed.
	firstTrigger string
	closedEarly  bool
	// hold is what watchHold reported, guarded by holdMu: it runs beside
	// the scenario.
	holdMu sync.Mutex
	hold   string
	// ended is closed when the scenario is over, for what runs beside it.
	ended chan struct{}
	// small is the clients of a small-jobs scenario, and front the
	// address they reach the live server at; nil for the others.
	small *smallRun
	front *front
}

func (r *runner) addFault(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	logf("fault: %s", s)
	r.faults = append(r.faults, s)
}

func (r *runner) startServer() (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r.seq++
	p, err := startProc(r.bin, r.dir, fmt.Sprintf("server-%d", r.seq), append(r.env, "WARREN_LISTEN="+addr), "server")
	if err != nil {
		return nil, err
	}
	track(p)
	s := &server{proc: p, base: "http://" + addr}
	r.servers = append(r.servers, s)
	if err := waitReady(s.base, p, 90*time.Second); err != nil {
		return nil, err
	}
	if r.front != nil {
		r.front.setBackend(addr)
	}
	return s, nil
}

func (r *runner) startWorker() (*proc, error) {
	r.seq++
	name := fmt.Sprintf("worker-%d", r.seq)
	args := []string{"worker", "--types", "flaky,tree"}
	if r.small != nil {
		// The prefix in its connections' names: closeOwnConnections.
		args = append(args, "--name", r.prefix+name)
	}
	p, err := startProc(r.bin, r.dir, name, r.env, args...)
	if err != nil {
		return nil, err
	}
	track(p)
	r.workers = append(r.workers, p)
	return p, nil
}

// api returns the base URL of a live server.
func (r *runner) api() string {
	for i := len(r.servers) - 1; i >= 0; i-- {
		if !r.servers[i].exited() {
			return r.servers[i].base
		}
	}
	return r.servers[0].base
}

// liveWorker returns the oldest live worker.
func (r *runner) liveWorker() *proc {
	for _, w := range r.workers {
		if !w.exited() {
			return w
		}
	}
	return nil
}

type jobStatus struct {
	State          string `json:"state"`
	ExpectedTasks  int64  `json:"expected_tasks"`
	CompletedTasks int64  `json:"completed_tasks"`
	FailedTasks    int64  `json:"failed_tasks"`
}

func getJSON(url string, v any) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

func (r *runner) status() (jobStatus, error) {
	var s jobStatus
	err := getJSON(r.api()+"/v1/jobs/"+r.jobID, &s)
	return s, err
}

func terminal(state string) bool {
	return state == "completed" || state == "failed" || state == "cancelled"
}

// waitProgress waits until frac of the tasks completed (or the job closed).
func (r *runner) waitProgress(frac float64, d time.Duration) error {
	if r.small != nil {
		return r.small.waitProgress(r, frac, d)
	}
	deadline := time.Now().Add(d)
	for {
		s, err := r.status()
		if err == nil && (float64(s.CompletedTasks) >= frac*float64(r.n) || terminal(s.State)) {
			if terminal(s.State) {
				logf("warning: the job closed before the fault (%s)", s.State)
				r.closedEarly = true
			}
			if r.firstTrigger == "" {
				r.firstTrigger = fmt.Sprintf("%d%%", s.CompletedTasks*100/int64(r.n))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%.0f%% of the tasks not completed after %s (last: %+v, %v)", frac*100, d, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// submit writes the NDJSON job and submits it with `warren submit`.
func (r *runner) submit() error {
	path := filepath.Join(r.dir, "job.ndjson")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	head := `{"type":"flaky","reduce":"sum","max_retries":3`
	if r.sc.job == jobTree {
		head = `{"type":"tree","reduce":"sum","max_retries":3`
	}
	if r.sc.job == jobCapped {
		head += fmt.Sprintf(`,"max_concurrency":%d`, cappedAt)
	}
	if r.tg.taskTimeout > 0 && !r.sc.defaultTimeout {
		head += fmt.Sprintf(`,"task_timeout":%d`, r.tg.taskTimeout)
	}
	if r.sc.batchSize > 0 {
		head += fmt.Sprintf(`,"batch_size":%d`, r.sc.batchSize)
	}
	fmt.Fprintln(w, head+"}")
	if r.sc.job == jobTree {
		// The root alone: its tasks spawn the rest.
		fmt.Fprintf(w, "{\"depth\":0,\"fanout\":%d,\"levels\":%d}\n", treeFanout, treeLevels)
		return r.submitFile(w, f, path)
	}
	failEvery := 500
	if r.tg.failEvery > 0 {
		failEvery = r.tg.failEvery
	}
	for i := 1; i <= r.n; i++ {
		if i%failEvery == 0 {
			fmt.Fprintf(w, "{\"value\":%d,\"sleep_ms\":%d,\"fail_times\":1}\n", i, i%3)
		} else {
			fmt.Fprintf(w, "{\"value\":%d,\"sleep_ms\":%d}\n", i, i%3)
		}
	}
	return r.submitFile(w, f, path)
}

// submitFile flushes and closes the job file at path and submits it with
// `warren submit`, keeping the new job's id.
func (r *runner) submitFile(w *bufio.Writer, f *os.File, path string) error {
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	out, err := runEnv(2*time.Minute, append(r.env, "WARREN_SERVER="+r.api()), r.bin, "submit", path)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	r.jobID = strings.TrimSpace(lines[len(lines)-1])
	if r.jobID == "" {
		return fmt.Errorf("warren submit printed no job id: %q", out)
	}
	logf("job %s submitted (%d tasks)", r.jobID, r.n)
	return nil
}

// duplicates reads warren_results_duplicate_total from a server.
func duplicates(base string) (float64, error) {
	return metricSum(base, "warren_results_duplicate_total")
}

// metricSum is the sum of a server's metric name over its labels.
func metricSum(base, name string) (float64, error) {
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l != name && !strings.HasPrefix(l, name+" ") && !strings.HasPrefix(l, name+"{") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// kill9Server scrapes the server's counters (scrapeBeforeKill), then
// kills it.
func (r *runner) kill9Server(s *server) {
	r.scrapeBeforeKill(s)
	s.kill9()
}

// scrapeBeforeKill adds the counters of s, about to be killed, to those
// of the servers killed before.
func (r *runner) scrapeBeforeKill(s *server) {
	if d, err := duplicates(s.base); err == nil {
		r.dupsSeen += d
	}
	if r.small != nil {
		if v, err := metricSum(s.base, replaysMetric); err == nil {
			r.small.replaysSeen += v
		}
	}
}

// runScenario runs one scenario on tg from a fresh prefix and store to
// cleanup.
func runScenario(bin string, tg *target, sc scenario, n int, timeout time.Duration) *outcome {
	o := &outcome{name: sc.name, lost: -1}
	id := randHex(4)
	r := &runner{sc: sc, tg: tg, bin: bin, n: n, prefix: "chaos-" + id + "-" + sc.name + "."}
	if sc.job == jobTree {
		tasks, sum := treeSize(treeLevels, treeFanout)
		r.n, o.want = tasks, strconv.FormatInt(sum, 10)
	}
	var err error
	r.dir, err = os.MkdirTemp("", "warren-chaos-"+sc.name+"-")
	if err != nil {
		o.fail("%v", err)
		return o
	}
	storeURL := "sqlite://" + filepath.Join(r.dir, "warren.db")
	schema := ""
	if sc.store == "postgres" {
		schema = "chaos_" + id
		storeURL, err = createSchema(schema)
		if err != nil {
			o.fail("create schema: %v", err)
			_ = os.RemoveAll(r.dir)
			return o
		}
	}
	r.env = append([]string{
		"WARREN_AMQP_URL=" + tg.amqpURL,
		"WARREN_DATABASE_URL=" + storeURL,
		"WARREN_PREFIX=" + r.prefix,
		"WARREN_RETRY_TIERS=100ms,200ms",
	}, tg.env...)
	// CHAOS_WARREN_ENV adds NAME=VALUE words to every warren process's
	// environment, such as WARREN_LOG_LEVEL=debug to follow a task.
	r.env = append(r.env, strings.Fields(os.Getenv("CHAOS_WARREN_ENV"))...)
	setScenarioCleanup(func() {
		_ = deleteTopology(tg.amqpURL, r.prefix, retryTiers)
		if schema != "" {
			_ = dropSchema(schema)
		}
		_ = os.RemoveAll(r.dir)
	})
	r.ended = make(chan struct{})
	defer func() { close(r.ended); setScenarioCleanup(nil); r.cleanup(o, schema) }()
	if sc.job == jobSmall {
		if r.front, err = newFront(); err != nil {
			o.fail("front: %v", err)
			return o
		}
		r.small = newSmallRun(smallJobCount, r.front, "chaos-"+id+"-job-", tg.taskTimeout)
		defer func() {
			r.front.close()
			if r.small.close != nil { // armed, and not fired: end it
				_, _ = r.small.close.fire()
			}
		}()
	}

	for i := 0; i < max(1, sc.servers); i++ {
		if _, err := r.startServer(); err != nil {
			o.fail("start server: %v", err)
			return o
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := r.startWorker(); err != nil {
			o.fail("start worker: %v", err)
			return o
		}
	}
	if sc.prepare != nil {
		if err := sc.prepare(r); err != nil {
			o.fail("prepare: %v", err)
			return o
		}
	}
	start := time.Now()
	var smallDone chan struct{}
	deadlineCtx, cancel := context.WithDeadline(context.Background(), start.Add(timeout))
	defer cancel()
	if r.small != nil {
		smallDone = r.small.run(deadlineCtx)
	} else if err := r.submit(); err != nil {
		o.fail("submit: %v", err)
		return o
	}
	if sc.fault != nil {
		if err := sc.fault(r); err != nil {
			o.fail("fault: %v", err)
		}
		if r.small != nil && r.small.closed.Load() >= int64(r.small.total) {
			logf("warning: every small job had closed when the faults were done")
			r.closedEarly = true
		}
		if r.closedEarly {
			o.fail("the job had closed before a fault was injected: the scenario proved nothing")
		}
		if r.small != nil {
			logf("faults done: %d of %d small jobs closed", r.small.closed.Load(), r.small.total)
		} else if s, err := r.status(); err == nil {
			logf("faults done: job %s, %d/%d completed", s.State, s.CompletedTasks, r.n)
		}
	}
	if len(r.faults) == 0 {
		o.faults = "none"
	} else {
		o.faults = strings.Join(r.faults, ", ")
		if r.firstTrigger != "" {
			o.faults = "from " + r.firstTrigger + ": " + o.faults
		}
	}
	if r.small != nil {
		r.finishSmall(deadlineCtx, o, smallDone)
		return o
	}

	// Wait for the job to close.
	deadline := start.Add(timeout)
	var s jobStatus
	for {
		s, err = r.status()
		if err == nil && terminal(s.State) {
			break
		}
		if time.Now().After(deadline) {
			o.duration = time.Since(start)
			o.fail("TIMEOUT: the job did not close within %s (last status %+v, err %v)", timeout, s, err)
			r.diagnose()
			r.check(o, s)
			return o
		}
		time.Sleep(200 * time.Millisecond)
	}
	o.duration = time.Since(start)
	logf("job %s closed %s: %d completed, %d failed of %d in %s", r.jobID, s.State, s.CompletedTasks, s.FailedTasks, s.ExpectedTasks, o.duration.Round(100*time.Millisecond))
	if n := r.reconciled(); n > 0 {
		o.faults += fmt.Sprintf("; the reconciler republished %d tasks", n)
	}
	if h := r.holdNote(); h != "" {
		o.faults += "; " + h
	}
	if r.tg.cluster != nil {
		if ws := r.tg.cluster.takeRestarts(); len(ws) > 0 {
			o.faults += fmt.Sprintf("; the dead-letter watchdog restarted %d workers (%s)", len(ws), strings.Join(ws, ", "))
		}
	}
	if sc.closeWithin > 0 && o.duration > sc.closeWithin {
		o.fail("the job took %s to close, more than the %s it must close within", o.duration.Round(100*time.Millisecond), sc.closeWithin)
	}
	for _, w := range r.others {
		b, _ := os.ReadFile(w.log)
		n := strings.Count(string(b), "no handler for the task's type")
		if n == 0 {
			o.fail("%s sent no message back: the scenario proved nothing", w.name)
		}
		o.faults += fmt.Sprintf("; %s sent %d messages back", w.name, n)
	}
	r.check(o, s)
	if !o.ok() {
		r.diagnose()
	}
	return o
}

// check verifies the closed job's counters, its tasks and its result.
func (r *runner) check(o *outcome, s jobStatus) {
	if s.State != "completed" {
		o.fail("state %q, want completed", s.State)
	}
	if s.ExpectedTasks != int64(r.n) {
		o.fail("expected_tasks %d, want %d", s.ExpectedTasks, r.n)
	}
	if terminal(s.State) && s.CompletedTasks+s.FailedTasks != s.ExpectedTasks {
		o.fail("completed %d + failed %d != expected %d", s.CompletedTasks, s.FailedTasks, s.ExpectedTasks)
	}
	if s.FailedTasks != 0 {
		o.fail("%d tasks failed", s.FailedTasks)
	}

	// Every task: exactly one record, terminal, completed.
	seen := make(map[int64]int, r.n)
	states := map[string]int{}
	var runs [][2]time.Time // each task's recorded run
	cursor := ""
	for pages := 0; ; pages++ {
		url := r.api() + "/v1/jobs/" + r.jobID + "/tasks?limit=1000"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		var page struct {
			Tasks []struct {
				TaskID     int64      `json:"task_id"`
				State      string     `json:"state"`
				StartedAt  *time.Time `json:"started_at"`
				FinishedAt *time.Time `json:"finished_at"`
			} `json:"tasks"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := getJSON(url, &page); err != nil {
			o.fail("list tasks: %v", err)
			return
		}
		for _, t := range page.Tasks {
			seen[t.TaskID]++
			states[t.State]++
			if t.StartedAt != nil && t.FinishedAt != nil {
				runs = append(runs, [2]time.Time{*t.StartedAt, *t.FinishedAt})
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" || pages > r.n {
			break
		}
		cursor = *page.NextCursor
	}
	dupRecords := 0
	for _, c := range seen {
		if c > 1 {
			dupRecords += c - 1
		}
	}
	if dupRecords > 0 {
		o.fail("%d duplicate task records", dupRecords)
	}
	missing := 0
	for i := int64(1); i <= int64(r.n); i++ {
		if seen[i] == 0 {
			missing++
		}
	}
	if missing > 0 && len(seen) > 0 {
		// Task ids might not be 1..N: fall back to the count.
		if len(seen) == r.n {
			missing = 0
		}
	}
	if r.sc.job == jobCapped {
		if most := mostAtOnce(runs); most > cappedAt {
			o.fail("%d of the job's recorded runs overlapped, over its max_concurrency %d", most, cappedAt)
		} else {
			logf("at most %d of the capped job's recorded runs overlapped (max_concurrency %d)", most, cappedAt)
		}
	}
	notDone := r.n - states["completed"]
	o.lost = max(missing, notDone)
	if o.lost > 0 {
		o.fail("%d tasks not completed (task states %v, %d distinct ids)", o.lost, states, len(seen))
	}

	// The result.
	if s.State == "completed" {
		var res json.Number
		resp, err := httpClient.Get(r.api() + "/v1/jobs/" + r.jobID + "/result")
		if err != nil {
			o.fail("result: %v", err)
		} else {
			dec := json.NewDecoder(resp.Body)
			dec.UseNumber()
			if err := dec.Decode(&res); err != nil {
				o.fail("result: %v", err)
			}
			resp.Body.Close()
			o.result = res.String()
		}
	}

	// Duplicates absorbed, summed over live servers and killed ones.
	o.duplicates = r.dupsSeen
	for _, sv := range r.servers {
		if sv.exited() {
			continue
		}
		d, err := duplicates(sv.base)
		if err != nil {
			o.dupNote = "(scrape failed)"
			continue
		}
		o.duplicates += d
	}
}

// mostAtOnce is the most runs that were running at one moment: a run
// that ends at the moment another starts does not overlap it.
func mostAtOnce(runs [][2]time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(runs))
	for _, r := range runs {
		edges = append(edges, edge{r[0], 1}, edge{r[1], -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// reconcileRE matches the reconciler's log line of a pass that requeued
// tasks.
var reconcileRE = regexp.MustCompile(`reconciler: tasks without a result past their task timeout.* requeued=(\d+)`)

// reconciled counts the tasks the servers' reconcilers republished, from
// their logs.
func (r *runner) reconciled() int {
	n := 0
	for _, s := range r.servers {
		b, err := os.ReadFile(s.log)
		if err != nil {
			continue
		}
		for _, m := range reconcileRE.FindAllStringSubmatch(string(b), -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// diagnose prints the queue depths and the tails of the logs.
func (r *runner) diagnose() {
	logf("diagnostics for %s (prefix %s):", r.sc.name, r.prefix)
	if s, err := r.status(); err == nil {
		logf("  job: %+v", s)
	}
	fmt.Fprint(os.Stderr, "  queues (name ready unacked):\n"+r.tg.depths(r.prefix))
	for _, s := range r.servers {
		fmt.Fprintf(os.Stderr, "  --- %s (%s) last lines:\n%s\n", s.name, s.log, indent(s.tail(25)))
	}
	for _, w := range r.workers {
		fmt.Fprintf(os.Stderr, "  --- %s (%s) last lines:\n%s\n", w.name, w.log, indent(w.tail(10)))
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// cleanup stops every process, restores the services (r.tg.restore) and
// removes the prefix's topology, the schema and the temp dir.
func (r *runner) cleanup(o *outcome, schema string) {
	workers := append(slices.Clone(r.workers), r.others...)
	for _, w := range workers {
		if code, ok := w.term(45 * time.Second); !w.exited() || (!ok) {
			o.fail("%s did not stop on SIGTERM", w.name)
		} else if code != 0 && code != -1 && w.cmd.ProcessState != nil && !killedBySignal(w) {
			logf("%s exited %d on SIGTERM", w.name, code)
		}
	}
	for _, s := range r.servers {
		if _, ok := s.term(45 * time.Second); !ok {
			o.fail("%s did not stop on SIGTERM", s.name)
		}
	}
	liveMu.Lock()
	for _, w := range workers {
		delete(live, w)
	}
	for _, s := range r.servers {
		delete(live, s.proc)
	}
	liveMu.Unlock()
	runCleanups()
	r.tg.restore(o)
	if err := deleteTopology(r.tg.amqpURL, r.prefix, retryTiers); err != nil {
		logf("delete topology %s: %v", r.prefix, err)
	}
	if schema != "" {
		if err := dropSchema(schema); err != nil {
			logf("drop schema %s: %v", schema, err)
		}
	}
	if os.Getenv("CHAOS_KEEP") != "" {
		logf("logs kept in %s", r.dir)
		return
	}
	_ = os.RemoveAll(r.dir)
}

func killedBySignal(p *proc) bool {
	return p.cmd.ProcessState != nil && p.cmd.ProcessState.ExitCode() == -1
}
