package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// SmallConfig says what `warren bench --small-jobs` measures: Clients
// clients that each submit a job of JobTasks no-op tasks over the HTTP
// API and wait for its close on the job's event stream, Jobs jobs in
// all; then one client alone, AloneJobs jobs one after another; then one
// job of BigTasks tasks on the same machine, for the ratio. Zero fields
// take the defaults named.
type SmallConfig struct {
	// AMQPURL is the RabbitMQ URL; "" means the local broker.
	AMQPURL string
	// DatabaseURL is the job store; "" means a fresh SQLite file per
	// part, removed afterwards.
	DatabaseURL string
	// Clients is the number of concurrent clients; 0 means 8.
	Clients int
	// Jobs is the number of jobs the clients submit in all; 0 means 400.
	Jobs int
	// JobTasks is the number of tasks per job; 0 means 10.
	JobTasks int
	// AloneJobs is the number of jobs the lone client runs; 0 means 50.
	AloneJobs int
	// BigTasks is the number of tasks of the big job; 0 means 20,000.
	BigTasks int
	// Workers is the number of workers; 0 means 2.
	Workers int
	// Concurrency is each worker's handler concurrency; 0 means 16.
	Concurrency int
	// Rounds is the number of interleaved (small, alone, big) rounds; 0
	// means 3.
	Rounds int
	// CPUProfile, when set, is where a Go CPU profile of the small-jobs
	// parts (only) goes.
	CPUProfile string
	// Progress, when set, receives a line of progress at each step.
	Progress func(format string, a ...any)
	// Logger receives the warren components' logs; nil discards them.
	Logger *slog.Logger
}

func (c SmallConfig) withDefaults() (SmallConfig, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.AMQPURL == "" {
		c.AMQPURL = broker.DefaultURL
	}
	def(&c.Clients, 8)
	def(&c.Jobs, 400)
	def(&c.JobTasks, 10)
	def(&c.AloneJobs, 50)
	def(&c.BigTasks, 20000)
	def(&c.Workers, 2)
	def(&c.Concurrency, 16)
	def(&c.Rounds, 3)
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Clients < 1, c.Jobs < 1, c.JobTasks < 1, c.AloneJobs < 1, c.BigTasks < 1, c.Workers < 1, c.Concurrency < 1, c.Rounds < 1:
		return c, errors.New("bench: SmallConfig's counts must be >= 1")
	case c.JobTasks > server.DefaultMaxJobTasks:
		return c, fmt.Errorf("bench: SmallConfig.JobTasks must be at most %d, got %d", server.DefaultMaxJobTasks, c.JobTasks)
	}
	return c, nil
}

// SmallReport is what RunSmall measured (`warren bench --small-jobs
// --json` prints it): the medians of the rounds, and the detail of the
// round with the median jobs/s.
type SmallReport struct {
	Clients  int `json:"clients"`
	Jobs     int `json:"jobs"`
	JobTasks int `json:"job_tasks"`
	Workers  int `json:"workers"`
	// JobsPerS and TasksPerS are the small jobs' throughput, from the
	// first submission to the last close.
	JobsPerS  float64 `json:"jobs_per_s"`
	TasksPerS float64 `json:"tasks_per_s"`
	// P50Ms, P95Ms and P99Ms are the percentiles of a small job's time
	// from its submission (the request sent) to its close (the closed
	// event read), under the load of every client.
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
	// AloneP50Ms and AloneP99Ms are the same for one client alone.
	AloneJobs  int     `json:"alone_jobs"`
	AloneP50Ms float64 `json:"alone_p50_ms"`
	AloneP99Ms float64 `json:"alone_p99_ms"`
	// BigTasks and BigTasksPerS are the big job's size and throughput;
	// Ratio is TasksPerS over BigTasksPerS.
	BigTasks     int     `json:"big_tasks"`
	BigTasksPerS float64 `json:"big_tasks_per_s"`
	Ratio        float64 `json:"ratio"`
	// Stages and AloneStages are where a small job's time went, under
	// the load of every client and alone (the median round's).
	Stages         []Stage   `json:"stages"`
	AloneStages    []Stage   `json:"alone_stages"`
	RoundsJobsPerS []float64 `json:"rounds_jobs_per_s"`
	RoundsP99Ms    []float64 `json:"rounds_p99_ms"`
	RoundsAloneP50 []float64 `json:"rounds_alone_p50_ms"`
	RoundsBig      []float64 `json:"rounds_big_tasks_per_s"`
}

// smallResult is what one small-jobs part measured.
type smallResult struct {
	took           time.Duration
	lat            []time.Duration // sorted
	aloneLat       []time.Duration // sorted
	stages         []Stage         // of the jobs of every client
	aloneStages    []Stage         // of the lone client's
	jobsPerS, tpsS float64
}

// RunSmall runs cfg.Rounds interleaved rounds of: the many small jobs
// and the lone client (one server and workers), then the big job (a
// server and workers of its own), and returns the medians. Everything it
// declares on the broker uses fresh names and is deleted before it
// returns.
func RunSmall(ctx context.Context, cfg SmallConfig) (rep SmallReport, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return SmallReport{}, err
	}
	rep = SmallReport{Clients: cfg.Clients, Jobs: cfg.Jobs, JobTasks: cfg.JobTasks, Workers: cfg.Workers, AloneJobs: cfg.AloneJobs, BigTasks: cfg.BigTasks}
	var smalls []smallResult
	for i := range cfg.Rounds {
		for _, part := range []string{"small", "big"} {
			dbURL := cfg.DatabaseURL
			if dbURL == "" {
				dir, err := os.MkdirTemp("", "warren-bench-")
				if err != nil {
					return SmallReport{}, err
				}
				defer os.RemoveAll(dir)
				dbURL = "sqlite://" + filepath.Join(dir, "warren.db")
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			names := protocol.NamesFor("warren-bench-" + hex.EncodeToString(b[:]) + "-small.")
			base := Config{AMQPURL: cfg.AMQPURL, DatabaseURL: dbURL, Tasks: cfg.BigTasks, Workers: cfg.Workers,
				Concurrency: cfg.Concurrency, Logger: cfg.Logger}
			var perr error
			switch part {
			case "small":
				cfg.Progress("round %d/%d: %d jobs of %d tasks from %d clients, then %d from one, %d workers x %d, store %s",
					i+1, cfg.Rounds, cfg.Jobs, cfg.JobTasks, cfg.Clients, cfg.AloneJobs, cfg.Workers, cfg.Concurrency, redactDB(dbURL))
				stopProfile := func() error { return nil }
				if i == 0 { // one profile, of the first round's small jobs only
					if stopProfile, err = startCPUProfile(cfg.CPUProfile); err != nil {
						return SmallReport{}, err
					}
				}
				var res smallResult
				res, perr = runSmallPart(ctx, cfg, base, names)
				if err := stopProfile(); err != nil && perr == nil {
					perr = err
				}
				if perr == nil {
					smalls = append(smalls, res)
					rep.RoundsJobsPerS = append(rep.RoundsJobsPerS, round1(res.jobsPerS))
					rep.RoundsP99Ms = append(rep.RoundsP99Ms, round1(ms(percentile(res.lat, 99))))
					rep.RoundsAloneP50 = append(rep.RoundsAloneP50, round1(ms(percentile(res.aloneLat, 50))))
					cfg.Progress("round %d/%d: %.0f jobs/s, %.0f tasks/s, p50 %.1f ms, p99 %.1f ms; alone p50 %.1f ms",
						i+1, cfg.Rounds, res.jobsPerS, res.tpsS, ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(percentile(res.aloneLat, 50)))
				}
			case "big":
				cfg.Progress("round %d/%d: one job of %d tasks", i+1, cfg.Rounds, cfg.BigTasks)
				var r Report
				perr = runWarren(ctx, base, names, &r, false)
				if perr == nil {
					rep.RoundsBig = append(rep.RoundsBig, round1(r.WarrenTasksPerS))
					cfg.Progress("round %d/%d: big job: %.0f tasks/s", i+1, cfg.Rounds, r.WarrenTasksPerS)
				}
			}
			if derr := deleteTopology(cfg.AMQPURL, names); derr != nil && perr == nil {
				perr = derr
			}
			if perr != nil {
				return SmallReport{}, fmt.Errorf("round %d, %s: %w", i+1, part, perr)
			}
		}
	}
	median := func(xs []float64) float64 { return xs[medianIndex(len(xs), func(i int) float64 { return xs[i] })] }
	k := medianIndex(len(smalls), func(i int) float64 { return smalls[i].jobsPerS })
	med := smalls[k]
	rep.JobsPerS, rep.TasksPerS = round1(med.jobsPerS), round1(med.tpsS)
	rep.P50Ms, rep.P95Ms, rep.P99Ms = round1(ms(percentile(med.lat, 50))), round1(ms(percentile(med.lat, 95))), round1(ms(percentile(med.lat, 99)))
	rep.AloneP50Ms, rep.AloneP99Ms = median(rep.RoundsAloneP50), round1(ms(percentile(smalls[medianIndex(len(smalls), func(i int) float64 {
		return float64(percentile(smalls[i].aloneLat, 50))
	})].aloneLat, 99)))
	rep.Stages, rep.AloneStages = med.stages, med.aloneStages
	rep.BigTasksPerS = median(rep.RoundsBig)
	if rep.BigTasksPerS > 0 {
		rep.Ratio = math.Round(med.tpsS/rep.BigTasksPerS*1000) / 1000
	}
	return rep, nil
}

// runSmallPart runs the small jobs from every client, then the lone
// client's, on one server and its workers, as users would: each job
// submitted with POST /v1/jobs and waited for on its event stream.
func runSmallPart(ctx context.Context, cfg SmallConfig, base Config, names protocol.Names) (res smallResult, err error) {
	rg, err := startRig(ctx, base, names, server.Hooks{}, map[string]worker.HandlerFunc{"echo": echoAfter(0)})
	if err != nil {
		return smallResult{}, err
	}
	defer func() {
		if cerr := rg.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	partCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case e := <-rg.errs:
			cancel(earlyStop(e))
		case <-rg.srv.Done():
			cancel(errors.New("the server stopped early"))
		case <-partCtx.Done():
		}
	}()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * cfg.Clients, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	cl := client.New(rg.srv.URL(), client.WithHTTPClient(hc))
	tasks := make([]json.RawMessage, cfg.JobTasks)
	for i := range tasks {
		tasks[i] = json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`)
	}
	spec := client.JobSpec{Type: "echo", Reduce: "collect", Tasks: tasks}

	// A warm-up job, so the first measured one does not pay for the
	// connections and the queues' first use.
	if _, err := oneSmallJob(partCtx, cl, spec, cfg.JobTasks); err != nil {
		return smallResult{}, fmt.Errorf("warm-up job: %w", causeOr(partCtx, err))
	}

	lat := make([]time.Duration, cfg.Jobs)
	done := make([]smallJob, cfg.Jobs)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Clients)
	start := time.Now()
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Jobs {
					return
				}
				j, err := oneSmallJob(partCtx, cl, spec, cfg.JobTasks)
				if err != nil {
					errs <- err
					cancel(err)
					return
				}
				lat[i], done[i] = j.took(), j
			}
		}()
	}
	wg.Wait()
	res.took = time.Since(start)
	close(errs)
	if e := <-errs; e != nil {
		return smallResult{}, causeOr(partCtx, e)
	}
	res.jobsPerS = float64(cfg.Jobs) / res.took.Seconds()
	res.tpsS = res.jobsPerS * float64(cfg.JobTasks)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.lat = lat
	if res.stages, err = stages(partCtx, rg.srv.Store(), done); err != nil {
		return smallResult{}, err
	}

	var alone []smallJob
	for range cfg.AloneJobs {
		j, err := oneSmallJob(partCtx, cl, spec, cfg.JobTasks)
		if err != nil {
			return smallResult{}, causeOr(partCtx, err)
		}
		res.aloneLat = append(res.aloneLat, j.took())
		alone = append(alone, j)
	}
	if res.aloneStages, err = stages(partCtx, rg.srv.Store(), alone); err != nil {
		return smallResult{}, err
	}
	sort.Slice(res.aloneLat, func(i, j int) bool { return res.aloneLat[i] < res.aloneLat[j] })
	return res, nil
}

// oneSmallJob submits one job and waits for its close on the event
// stream; it checks the job completed with every task's result and
// returns the time from the submission to the close.
func oneSmallJob(ctx context.Context, cl *client.Client, spec client.JobSpec, n int) (smallJob, error) {
	start := time.Now()
	sub, err := cl.Submit(ctx, spec)
	if err != nil {
		return smallJob{}, fmt.Errorf("submit: %w", err)
	}
	answered := time.Now()
	job, err := cl.Watch(ctx, sub.ID, nil)
	if err != nil {
		return smallJob{}, fmt.Errorf("watch %s: %w", sub.ID, err)
	}
	end := time.Now()
	if job.State != warren.JobCompleted || job.CompletedTasks != int64(n) {
		return smallJob{}, fmt.Errorf("job %s closed %s with %d of %d tasks completed", sub.ID, job.State, job.CompletedTasks, n)
	}
	return smallJob{id: sub.ID, start: start, answered: answered, end: end}, nil
}

// smallJob is one small job as its client saw it: submitted at start,
// the 202 read at answered, the close read at end.
type smallJob struct {
	id                   string
	start, answered, end time.Time
}

func (j smallJob) took() time.Duration { return j.end.Sub(j.start) }

// Stage is one step of a small job's way from its submission to its
// close, with the median and 99th percentile of its time over the jobs
// of a run, read from the store's times (the job's created and finished,
// its tasks' queued, started and finished) and the client's.
type Stage struct {
	Name  string  `json:"name"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// stageNames are the stages, in order.
var stageNames = []string{
	"submit sent -> job created",
	"job created -> 202 read by the client",
	"job created -> first task queued (relay)",
	"first task queued -> first started (broker, worker)",
	"first started -> last finished (tasks)",
	"last finished -> job closed (results, record, close)",
	"job closed -> close read by the client (event stream)",
}

// stages reads the times of jobs from st and returns each stage's
// percentiles. Every process runs on this machine, on one clock.
func stages(ctx context.Context, st store.Store, jobs []smallJob) ([]Stage, error) {
	lat := make([][]time.Duration, len(stageNames))
	for _, sj := range jobs {
		job, err := st.GetJob(ctx, sj.id)
		if err != nil {
			return nil, err
		}
		tasks, _, err := st.ListTasks(ctx, sj.id, store.ListTasksOpts{Limit: 1000})
		if err != nil {
			return nil, err
		}
		var q0, s0, f1 time.Time
		for _, t := range tasks {
			if t.QueuedAt == nil || t.StartedAt == nil || t.FinishedAt == nil {
				return nil, fmt.Errorf("task %d of job %s lacks a time", t.TaskID, sj.id)
			}
			if q0.IsZero() || t.QueuedAt.Before(q0) {
				q0 = *t.QueuedAt
			}
			if s0.IsZero() || t.StartedAt.Before(s0) {
				s0 = *t.StartedAt
			}
			if t.FinishedAt.After(f1) {
				f1 = *t.FinishedAt
			}
		}
		if job.FinishedAt == nil || len(tasks) == 0 {
			return nil, fmt.Errorf("job %s is not closed with tasks", sj.id)
		}
		c := job.CreatedAt
		for i, d := range []time.Duration{c.Sub(sj.start), sj.answered.Sub(c), q0.Sub(c), s0.Sub(q0), f1.Sub(s0), job.FinishedAt.Sub(f1), sj.end.Sub(*job.FinishedAt)} {
			lat[i] = append(lat[i], d)
		}
	}
	out := make([]Stage, len(stageNames))
	for i, name := range stageNames {
		sort.Slice(lat[i], func(a, b int) bool { return lat[i][a] < lat[i][b] })
		out[i] = Stage{Name: name, P50Ms: round1(ms(percentile(lat[i], 50))), P99Ms: round1(ms(percentile(lat[i], 99)))}
	}
	return out, nil
}

// causeOr is the reason ctx was cancelled, when it was, else err.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// Print writes the report as `warren bench --small-jobs` shows it.
func (r SmallReport) Print(w io.Writer) {
	fmt.Fprintf(w, "warren bench --small-jobs: %d clients, %d jobs of %d no-op tasks, each submitted over HTTP and waited for on its event stream; %d workers\n\n",
		r.Clients, r.Jobs, r.JobTasks, r.Workers)
	row := func(k, v string) { fmt.Fprintf(w, "  %-30s %s\n", k, v) }
	row("small jobs", fmt.Sprintf("%.0f jobs/s, %.0f tasks/s", r.JobsPerS, r.TasksPerS))
	row("submit -> closed", fmt.Sprintf("p50 %.1f ms, p95 %.1f ms, p99 %.1f ms", r.P50Ms, r.P95Ms, r.P99Ms))
	row("one client alone", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (%d jobs)", r.AloneP50Ms, r.AloneP99Ms, r.AloneJobs))
	row(fmt.Sprintf("one job of %d tasks", r.BigTasks), fmt.Sprintf("%.0f tasks/s", r.BigTasksPerS))
	row("ratio small/big tasks/s", fmt.Sprintf("%.3f (medians of %d interleaved rounds)", r.Ratio, len(r.RoundsJobsPerS)))
	fmt.Fprintf(w, "\n  where a small job's time went (p50 / p99 ms; under load, then alone):\n")
	for i, st := range r.Stages {
		alone := Stage{}
		if i < len(r.AloneStages) {
			alone = r.AloneStages[i]
		}
		fmt.Fprintf(w, "    %-56s %7.1f / %-7.1f %7.1f / %.1f\n", st.Name, st.P50Ms, st.P99Ms, alone.P50Ms, alone.P99Ms)
	}
	fmt.Fprintln(w)
	row("rounds: jobs/s", fmt.Sprint(r.RoundsJobsPerS))
	row("rounds: p99 ms", fmt.Sprint(r.RoundsP99Ms))
	row("rounds: alone p50 ms", fmt.Sprint(r.RoundsAloneP50))
	row("rounds: big tasks/s", fmt.Sprint(r.RoundsBig))
}
