package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren/client"
)

// The small-jobs scenarios (scenario.job jobSmall): instead of one big
// job, smallClients clients each submit jobs of smallJobTasks flaky tasks
// over the HTTP API, one after another, with an idempotency key, and wait
// for each job's close on its event stream (client.Watch), smallJobCount
// jobs in all, while the fault runs. The clients reach the server through
// a front of the chaos process's own (front), a stable address that
// forwards each connection to the live server, as a load balancer would:
// a killed server cuts their connections and streams, and the restarted
// one serves them at the same address.
const (
	jobSmall = "small"
	// smallClients is how many clients submit at once.
	smallClients = 8
	// smallJobTasks is each small job's number of tasks.
	smallJobTasks = 10
	// smallFailEvery: every smallFailEvery-th task over all the jobs
	// fails once and waits in a retry tier.
	smallFailEvery = 7
	// defaultSmallJobs is the number of small jobs when CHAOS_SMALL_JOBS
	// is not set.
	defaultSmallJobs = 360
)

// replaysMetric counts a server's submissions answered with the job an
// earlier one of the same idempotency key created.
const replaysMetric = "warren_idempotent_replays_total"

// smallJobCount is the number of small jobs a small-jobs scenario
// submits (CHAOS_SMALL_JOBS).
var smallJobCount = defaultSmallJobs

// smallJobsSetting reads CHAOS_SMALL_JOBS (defaultSmallJobs when unset).
func smallJobsSetting() (int, error) {
	s := os.Getenv("CHAOS_SMALL_JOBS")
	if s == "" {
		return defaultSmallJobs, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("CHAOS_SMALL_JOBS must be a positive integer; got %q", s)
	}
	return v, nil
}

// smallValue is the value (and so the result) of task i (0-based) of
// small job k: unique over all the jobs, so that a result recorded for
// the wrong job shows.
func smallValue(k, i int) int64 { return int64(k)*1000 + int64(i) + 1 }

// smallRun is the clients' side of a small-jobs scenario.
type smallRun struct {
	total   int
	front   *front
	keyBase string
	taskTO  int // the jobs' task_timeout in seconds, 0 for warren's

	next    atomic.Int64 // the next job to submit
	closed  atomic.Int64 // jobs seen closed by their client
	retries atomic.Int64 // submissions sent again after an error
	// submitting counts the submissions waiting for their answer.
	submitting atomic.Int64
	// close is the armed close of the scenario's broker connections
	// (armCloseOwnConnections), until it fired.
	close *armedClose
	// replaysSeen counts the submissions that killed servers answered
	// with an existing job (replaysMetric), scraped before the kill.
	replaysSeen float64

	mu      sync.Mutex
	ids     []string     // job k's id, as its submission answered
	seen    []client.Job // job k as its client saw it close
	lat     []time.Duration
	errs    []string
	started time.Time
	ended   time.Time // when the last client finished
}

func newSmallRun(total int, f *front, keyBase string, taskTO int) *smallRun {
	return &smallRun{total: total, front: f, keyBase: keyBase, taskTO: taskTO,
		ids: make([]string, total), seen: make([]client.Job, total), lat: make([]time.Duration, total)}
}

func (s *smallRun) key(k int) string { return s.keyBase + strconv.Itoa(k) }

// spec is small job k: smallJobTasks flaky tasks collected, every
// smallFailEvery-th of them over all jobs failing once.
func (s *smallRun) spec(k int) client.JobSpec {
	tasks := make([]json.RawMessage, smallJobTasks)
	for i := range tasks {
		fail := ""
		if (k*smallJobTasks+i)%smallFailEvery == 0 {
			fail = `,"fail_times":1`
		}
		tasks[i] = json.RawMessage(fmt.Sprintf(`{"value":%d,"sleep_ms":%d%s}`, smallValue(k, i), i%3, fail))
	}
	retries := 3
	return client.JobSpec{
		Type: "flaky", Reduce: "collect", MaxRetries: &retries, Tasks: tasks,
		TaskTimeout:    float64(s.taskTO),
		Metadata:       json.RawMessage(fmt.Sprintf(`{"chaos_job":%d}`, k)),
		IdempotencyKey: s.key(k),
	}
}

func (s *smallRun) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

// run starts the clients and returns at once; done is closed when every
// client has finished (or ctx ended).
func (s *smallRun) run(ctx context.Context) (done chan struct{}) {
	done = make(chan struct{})
	hc := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 4 * smallClients, IdleConnTimeout: time.Minute}}
	cl := client.New(s.front.url(), client.WithHTTPClient(hc))
	s.started = time.Now()
	var wg sync.WaitGroup
	for range smallClients {
		wg.Go(func() {
			for {
				k := int(s.next.Add(1)) - 1
				if k >= s.total || ctx.Err() != nil {
					return
				}
				s.one(ctx, cl, k)
			}
		})
	}
	go func() {
		wg.Wait()
		s.ended = time.Now()
		hc.CloseIdleConnections()
		close(done)
	}()
	return done
}

// one submits job k, sending it again with the same idempotency key
// while the server cannot be reached (or answers 5xx), and watches it to
// its close.
func (s *smallRun) one(ctx context.Context, cl *client.Client, k int) {
	spec := s.spec(k)
	start := time.Now()
	var sub client.Submitted
	for {
		var err error
		s.submitting.Add(1)
		sub, err = cl.Submit(ctx, spec)
		s.submitting.Add(-1)
		if err == nil {
			break
		}
		var apiErr *client.Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 || ctx.Err() != nil {
			s.fail("job %d: submit: %v", k, err)
			return
		}
		s.retries.Add(1)
		select {
		case <-ctx.Done():
			s.fail("job %d: submit: %v", k, err)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	job, err := cl.Watch(ctx, sub.ID, nil)
	if err != nil {
		s.fail("job %d (%s): watch: %v", k, sub.ID, err)
		return
	}
	s.mu.Lock()
	s.ids[k], s.seen[k], s.lat[k] = sub.ID, job, time.Since(start)
	s.mu.Unlock()
	s.closed.Add(1)
}

// waitProgress waits until frac of the small jobs closed; all of them
// closed is the job closed before the fault.
func (s *smallRun) waitProgress(r *runner, frac float64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c := s.closed.Load()
		if float64(c) >= frac*float64(s.total) {
			if c >= int64(s.total) {
				logf("warning: every small job closed before the fault")
				r.closedEarly = true
			}
			if r.firstTrigger == "" {
				r.firstTrigger = fmt.Sprintf("%d%% of the jobs", c*100/int64(s.total))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%.0f%% of the small jobs not closed after %s (%d of %d)", frac*100, d, c, s.total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishSmall waits for the small jobs' clients, then checks every job
// the store holds against what was submitted, filling o.
func (r *runner) finishSmall(ctx context.Context, o *outcome, done chan struct{}) {
	s := r.small
	if s.close != nil { // the fault did not fire it: end it
		_, _ = s.close.fire()
		s.close = nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		<-done // the clients end with ctx
		o.fail("TIMEOUT: %d of %d small jobs closed in time", s.closed.Load(), s.total)
	}
	o.duration = s.ended.Sub(s.started)
	lat := slices.Clone(s.lat)
	slices.Sort(lat)
	p := func(q int) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, len(lat)*q/100)].Round(time.Millisecond)
	}
	logf("%d of %d small jobs closed in %s: submit-to-close p50 %s, p99 %s, max %s; %d submissions sent again",
		s.closed.Load(), s.total, o.duration.Round(100*time.Millisecond), p(50), p(99), p(100), s.retries.Load())
	// Before checkSmall, which submits every key again.
	replays, note := s.replaysSeen, ""
	for _, sv := range r.servers {
		if !sv.exited() {
			v, err := metricSum(sv.base, replaysMetric)
			if err != nil {
				note = " (scrape failed)"
			}
			replays += v
		}
	}
	logf("%d submissions sent again, %.0f of them answered with the job an earlier attempt created%s", s.retries.Load(), replays, note)
	o.faults = fmt.Sprintf("%d jobs of %d tasks from %d clients (submit-to-close p50 %s, p99 %s, max %s; %d submissions sent again, %.0f answered with the job an earlier attempt created%s); %s",
		s.total, smallJobTasks, smallClients, p(50), p(99), p(100), s.retries.Load(), replays, note, o.faults)
	if n := len(s.errs); n > 0 {
		o.fail("%d client errors, first: %s", n, strings.Join(s.errs[:min(n, 3)], "; "))
	}
	if n := r.reconciled(); n > 0 {
		o.faults += fmt.Sprintf("; the reconciler republished %d tasks", n)
	}
	r.checkSmall(o)
	if !o.ok() {
		r.diagnose()
	}
}

// checkSmall lists every job of the store and checks that there is one
// per small job (no job lost, none created twice), each closed once,
// completed, with every task completed once with its own value and the
// collected result; and that each idempotency key still answers with its
// job.
func (r *runner) checkSmall(o *outcome) {
	s := r.small
	base := r.api()
	// Every job of the store, by the small job it says it is.
	byJob := make([][]client.Job, s.total)
	jobs, others := 0, 0
	cursor := ""
	for {
		url := base + "/v1/jobs?limit=1000"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		var page client.JobList
		if err := getJSON(url, &page); err != nil {
			o.fail("list jobs: %v", err)
			return
		}
		for _, j := range page.Jobs {
			jobs++
			var md struct {
				K *int `json:"chaos_job"`
			}
			if json.Unmarshal(j.Metadata, &md) != nil || md.K == nil || *md.K < 0 || *md.K >= s.total {
				others++
				continue
			}
			byJob[*md.K] = append(byJob[*md.K], j)
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
	}
	missing, twice := 0, 0
	for k, js := range byJob {
		switch {
		case len(js) == 0:
			missing++
		case len(js) > 1:
			twice += len(js) - 1
			o.fail("small job %d was created %d times (%s)", k, len(js), js[0].ID)
		case s.ids[k] != "" && js[0].ID != s.ids[k]:
			o.fail("small job %d is %s in the store, its submission answered %s", k, js[0].ID, s.ids[k])
		}
	}
	if missing > 0 {
		o.fail("%d of %d small jobs not in the store", missing, s.total)
	}
	if others > 0 {
		o.fail("%d jobs in the store that no client submitted", others)
	}
	if jobs != s.total {
		o.fail("the store holds %d jobs, %d were submitted", jobs, s.total)
	}
	logf("the store holds %d jobs for %d submitted (%d missing, %d created twice)", jobs, s.total, missing, twice)

	// Each job, its tasks, its result and its key, 8 at a time.
	var (
		mu        sync.Mutex
		lost      = missing * smallJobTasks
		dupTasks  int
		identical int
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	hc := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * smallClients}}
	defer hc.CloseIdleConnections()
	cl := client.New(base, client.WithHTTPClient(hc))
	ctx := context.Background()
	for range smallClients {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= s.total {
					return
				}
				if len(byJob[k]) == 0 {
					continue
				}
				l, d, same, problems := s.checkJob(ctx, cl, k, byJob[k][0])
				mu.Lock()
				lost, dupTasks = lost+l, dupTasks+d
				if same {
					identical++
				}
				for i, p := range problems {
					if len(o.problems) < 20 || i == 0 {
						o.fail("%s", p)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	o.lost = lost
	if dupTasks > 0 {
		o.fail("%d duplicate task records", dupTasks)
	}
	o.want = fmt.Sprintf("%d/%d jobs", s.total, s.total)
	o.result = fmt.Sprintf("%d/%d jobs", identical, s.total)

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

// checkJob checks small job k, j as the store lists it: lost is how many
// of its tasks have no completed record, dups how many records are
// extra; same is true when its tasks and its result are the fault-free
// ones.
func (s *smallRun) checkJob(ctx context.Context, cl *client.Client, k int, j client.Job) (lost, dups int, same bool, problems []string) {
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("small job %d (%s): ", k, j.ID)+fmt.Sprintf(format, args...))
	}
	if j.State != "completed" || j.FinishedAt == nil {
		bad("state %s, finished_at %v; want completed and set", j.State, j.FinishedAt)
	}
	if j.ExpectedTasks != smallJobTasks || j.CompletedTasks != smallJobTasks || j.FailedTasks != 0 {
		bad("expected %d, completed %d, failed %d; want %d, %d, 0", j.ExpectedTasks, j.CompletedTasks, j.FailedTasks, smallJobTasks, smallJobTasks)
	}
	// The close its client saw is the one recorded: closed once.
	if seen := s.seen[k]; s.ids[k] != "" {
		switch {
		case seen.State != "completed":
			bad("its client saw it close %s", seen.State)
		case seen.FinishedAt == nil || j.FinishedAt == nil || !seen.FinishedAt.Equal(*j.FinishedAt):
			bad("its client saw it close at %v, the store says %v", seen.FinishedAt, j.FinishedAt)
		}
	}
	tl, err := cl.Tasks(ctx, j.ID, &client.ListOpts{Limit: 1000})
	if err != nil {
		bad("list tasks: %v", err)
		return smallJobTasks, 0, false, problems
	}
	count := map[int64]int{}
	tasksSame := true
	for _, t := range tl.Tasks {
		count[t.TaskID]++
		want := strconv.FormatInt(smallValue(k, int(t.TaskID)-1), 10)
		if t.TaskID < 1 || t.TaskID > smallJobTasks || t.State != "completed" || strings.TrimSpace(string(t.Result)) != want {
			tasksSame = false
			bad("task %d: %s with result %s; want completed with %s", t.TaskID, t.State, t.Result, want)
		}
	}
	for i := int64(1); i <= smallJobTasks; i++ {
		switch c := count[i]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	if len(tl.Tasks)-dups != smallJobTasks || lost > 0 {
		tasksSame = false
		bad("%d task records, %d tasks without one, %d extra", len(tl.Tasks), lost, dups)
	}
	res, err := cl.Result(ctx, j.ID)
	var got []int64
	if err == nil {
		err = json.Unmarshal(res, &got)
	}
	want := make([]int64, smallJobTasks)
	for i := range want {
		want[i] = smallValue(k, i)
	}
	resultSame := err == nil && slices.Equal(got, want)
	if !resultSame {
		bad("result %s (%v), want %v", bytes.TrimSpace(res), err, want)
	}
	// The key still answers with the one job.
	again, err := cl.Submit(ctx, s.spec(k))
	switch {
	case err != nil:
		bad("submit its key again: %v", err)
	case again.ID != j.ID:
		bad("its key now answers job %s", again.ID)
	}
	return lost, dups, tasksSame && resultSame && len(problems) == 0, problems
}

// front is a TCP front of the chaos process's own: it forwards every
// connection to the server started last, so that the small-jobs clients
// keep one address when the server is killed and started again on
// another. A connection it cannot forward it closes at once.
type front struct {
	ln      net.Listener
	backend atomic.Pointer[string]
	mu      sync.Mutex
	conns   map[net.Conn]bool
	closed  bool
}

func newFront() (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, conns: map[net.Conn]bool{}}
	go f.serve()
	return f, nil
}

func (f *front) url() string { return "http://" + f.ln.Addr().String() }

// setBackend makes new connections go to the server at addr (host:port).
func (f *front) setBackend(addr string) { f.backend.Store(&addr) }

func (f *front) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(c)
	}
}

func (f *front) add(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = true
	}
	return true
}

func (f *front) forward(c net.Conn) {
	addr := f.backend.Load()
	if addr == nil {
		c.Close()
		return
	}
	b, err := net.DialTimeout("tcp", *addr, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !f.add(c, b) {
		c.Close()
		b.Close()
		return
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			c.Close()
			b.Close()
			f.mu.Lock()
			delete(f.conns, c)
			delete(f.conns, b)
			f.mu.Unlock()
		})
	}
	go func() {
		_, _ = io.Copy(b, c)
		end()
	}()
	_, _ = io.Copy(c, b)
	end()
}

// close stops accepting and cuts every forwarded connection.
func (f *front) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
}

// smallServerKill9 kills the server with kill -9 once a quarter of the
// small jobs closed, at a moment a submission waits for its answer (so
// that its client sends it again with the same idempotency key), and
// starts it again at the clients' same front address.
func smallServerKill9(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	s := r.servers[0]
	// The counters first: a duplicate the server absorbs from here to
	// the kill goes uncounted (it only shows in the table).
	r.scrapeBeforeKill(s)
	deadline := time.Now().Add(10 * time.Second)
	for r.small.submitting.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
	n := r.small.submitting.Load()
	s.kill9()
	r.addFault("kill -9 server with %d submissions waiting for their answer", n)
	time.Sleep(time.Second)
	if _, err := r.startServer(); err != nil {
		return err
	}
	r.addFault("server restarted")
	return nil
}

// ownConnectionCount is how many broker connections a scenario's server
// and three workers hold: two each.
const ownConnectionCount = 2 + 3*2

// ownConnectionsExpr is the Erlang expression of an eval that finds the
// broker connections of the scenario's processes, and no others: those
// whose client-given name holds prefix (the server's carry it; the
// small-jobs scenarios name their workers with it). Then it runs then,
// with the list in Own.
func ownConnectionsExpr(prefix, then string) string {
	return `Own = fun() -> [P || P <- rabbit_networking:connections(),
  case catch rabbit_networking:connection_info(P, [client_properties]) of
    [{client_properties, Props}] when is_list(Props) ->
      case lists:keyfind(<<"connection_name">>, 1, Props) of
        {_, _, Name} when is_binary(Name) -> binary:match(Name, <<"` + prefix + `">>) =/= nomatch;
        _ -> false
      end;
    _ -> false
  end] end,
` + then
}

// evalCount runs a rabbitmqctl eval that answers a count.
func evalCount(d time.Duration, expr string) (int, error) {
	out, err := run(d, "rabbitmqctl", "-q", "eval", expr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("rabbitmqctl eval answered %q, not a count", out)
	}
	return n, nil
}

// armedClose is a rabbitmqctl eval started before the small jobs, that
// waits in the broker for a file to appear and then closes the
// scenario's broker connections at once. A rabbitmqctl started at the
// fault takes seconds to start on a loaded machine, which the small jobs
// would run through; close_all_connections would cut the connections of
// others who share the broker.
type armedClose struct {
	trigger string
	done    chan struct{}
	closed  int
	err     error
}

// armCloseOwnConnections (a prepare step) waits until the scenario's
// server and workers hold their broker connections, then starts the
// armed close and waits until it watches for its trigger.
func armCloseOwnConnections(r *runner) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := evalCount(60*time.Second, ownConnectionsExpr(r.prefix, "length(Own())."))
		if err != nil {
			return err
		}
		if n >= ownConnectionCount {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d broker connections named with the prefix %s after 60s, want %d", n, r.prefix, ownConnectionCount)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// In the shared temp dir, whose files the broker's user can see.
	base := filepath.Join(os.TempDir(), "warren-"+strings.TrimSuffix(r.prefix, "."))
	a := &armedClose{trigger: base + ".close", done: make(chan struct{})}
	armed := base + ".armed"
	// Polled every 2 ms for at most 3 minutes: it ends by itself when
	// the chaos run is killed. Each close is caught: closing one of a
	// process's connections makes it drop its others, and a connection
	// that ends while its close is asked for exits the call (normal),
	// which is the close having happened.
	expr := ownConnectionsExpr(r.prefix, `ok = file:write_file("`+armed+`", <<>>),
Wait = fun W(0) -> timeout; W(N) -> case filelib:is_file("`+a.trigger+`") of true -> go; false -> timer:sleep(2), W(N - 1) end end,
case Wait(90000) of
  go -> Cs = Own(), [(catch rabbit_networking:close_connection(P, "chaos")) || P <- Cs], length(Cs);
  timeout -> -1
end.`)
	go func() {
		defer close(a.done)
		a.closed, a.err = evalCount(5*time.Minute, expr)
	}()
	r.small.close = a
	defer os.Remove(armed)
	for {
		if _, err := os.Stat(armed); err == nil {
			return nil
		}
		select {
		case <-a.done:
			return fmt.Errorf("the armed close ended before it was armed: %d, %v", a.closed, a.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fire makes the armed close close the connections and waits for it.
func (a *armedClose) fire() (int, error) {
	if err := os.WriteFile(a.trigger, nil, 0o644); err != nil {
		return 0, err
	}
	defer os.Remove(a.trigger)
	<-a.done
	return a.closed, a.err
}

// closeOwnConnections closes the scenario's broker connections (with the
// armed close) once a quarter of the small jobs closed.
func closeOwnConnections(r *runner) error {
	err := r.waitProgress(0.25, progressWait)
	fired := time.Now()
	n, ferr := r.small.close.fire() // also when waitProgress failed, to end it
	r.small.close = nil
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	if n < ownConnectionCount {
		return fmt.Errorf("closed %d broker connections named with the prefix %s, want %d", n, r.prefix, ownConnectionCount)
	}
	r.addFault("the scenario's %d broker connections closed (rabbitmqctl eval of close_connection, %s after the trigger)",
		n, time.Since(fired).Round(time.Millisecond))
	return nil
}
