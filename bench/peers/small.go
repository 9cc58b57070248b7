package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// smallReport is what a many-small-jobs mode (`peers river-small`) prints
// with --json: the field names of `warren bench --small-jobs`.
type smallReport struct {
	System      string  `json:"system"`
	Config      string  `json:"config"`
	Clients     int     `json:"clients"`
	Jobs        int     `json:"jobs"`
	JobTasks    int     `json:"job_tasks"`
	Workers     int     `json:"workers"`
	Concurrency int     `json:"concurrency"`
	AloneJobs   int     `json:"alone_jobs"`
	TotalS      float64 `json:"total_s"`
	JobsPerS    float64 `json:"jobs_per_s"`
	TasksPerS   float64 `json:"tasks_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P95Ms       float64 `json:"p95_ms"`
	P99Ms       float64 `json:"p99_ms"`
	AloneP50Ms  float64 `json:"alone_p50_ms,omitempty"`
	AloneP99Ms  float64 `json:"alone_p99_ms,omitempty"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
}

// smallFlags are the flags of the many-small-jobs modes, named and
// defaulted as `warren bench --small-jobs`'s.
type smallFlags struct {
	clients     int
	jobs        int
	jobTasks    int
	workers     int
	concurrency int
	aloneJobs   int
	json        bool
	timeout     time.Duration
}

func (f *smallFlags) register(fs flags) {
	fs.IntVar(&f.clients, "clients", 8, "client goroutines, each submitting a job and waiting for it, then the next")
	fs.IntVar(&f.jobs, "jobs", 400, "jobs in all, shared by the clients")
	fs.IntVar(&f.jobTasks, "job-tasks", 10, "no-op tasks in each job")
	fs.IntVar(&f.workers, "workers", 2, "number of worker clients, each with its own concurrency")
	fs.IntVar(&f.concurrency, "concurrency", 16, "handler concurrency of each worker")
	fs.IntVar(&f.aloneJobs, "alone-jobs", 100, "jobs run first by one client alone (alone_p50_ms, alone_p99_ms); 0 skips that pass")
	fs.BoolVar(&f.json, "json", false, "print one JSON object on stdout (progress goes to stderr)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up if the run has not finished after this long")
}

func (f *smallFlags) validate() error {
	for _, c := range []struct {
		name string
		v    int
	}{{"clients", f.clients}, {"jobs", f.jobs}, {"job-tasks", f.jobTasks}, {"workers", f.workers}, {"concurrency", f.concurrency}} {
		if c.v < 1 {
			return fmt.Errorf("--%s must be >= 1, got %d", c.name, c.v)
		}
	}
	if f.aloneJobs < 0 {
		return fmt.Errorf("--alone-jobs must be >= 0, got %d", f.aloneJobs)
	}
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout must be > 0, got %s", f.timeout)
	}
	return nil
}

// smallSystem is one peer's many-small-jobs driver: oneJob submits a job
// of the run's job-tasks tasks and returns once the client has seen it
// finish.
type smallSystem interface {
	oneJob(ctx context.Context) error
}

// smallPass runs jobs jobs on clients goroutines that take them one at a
// time, and returns each job's submit-to-finished latency (sorted) and
// the pass's wall time. It stops at the first error.
func smallPass(ctx context.Context, sys smallSystem, clients, jobs int) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu   sync.Mutex
		left = jobs
		lats = make([]time.Duration, 0, jobs)
		wg   sync.WaitGroup
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if left == 0 || ctx.Err() != nil {
			return false
		}
		left--
		return true
	}
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for take() {
				t0 := time.Now()
				if err := sys.oneJob(ctx); err != nil {
					cancel(err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lats = append(lats, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	slices.Sort(lats)
	return lats, total, nil
}

// percentileMs is the nearest-rank percentile of sorted latencies (the
// smallest value with at least p% of them at or below it), in ms.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := max(int(math.Ceil(p/100*float64(len(sorted))))-1, 0)
	return round(float64(sorted[k])/float64(time.Millisecond), 2)
}

// runSmall runs the three passes of the benchmark on sys: a warm-up of one
// job per client (not reported), the one-client pass, and the C-client
// pass.
func runSmall(ctx context.Context, sys smallSystem, f smallFlags, rep *smallReport, p progress) error {
	if _, _, err := smallPass(ctx, sys, f.clients, f.clients); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if f.aloneJobs > 0 {
		lats, _, err := smallPass(ctx, sys, 1, f.aloneJobs)
		if err != nil {
			return err
		}
		rep.AloneP50Ms, rep.AloneP99Ms = percentileMs(lats, 50), percentileMs(lats, 99)
		p.printf("one client: %d jobs, p50 %.1f ms, p99 %.1f ms", f.aloneJobs, rep.AloneP50Ms, rep.AloneP99Ms)
	}
	lats, total, err := smallPass(ctx, sys, f.clients, f.jobs)
	if err != nil {
		return err
	}
	rep.TotalS = round(total.Seconds(), 3)
	rep.JobsPerS = round(float64(f.jobs)/total.Seconds(), 1)
	rep.TasksPerS = round(float64(f.jobs*f.jobTasks)/total.Seconds(), 1)
	rep.P50Ms, rep.P95Ms, rep.P99Ms = percentileMs(lats, 50), percentileMs(lats, 95), percentileMs(lats, 99)
	p.printf("%d clients: %d jobs in %.3f s, %.1f jobs/s, p50 %.1f ms, p99 %.1f ms",
		f.clients, f.jobs, total.Seconds(), rep.JobsPerS, rep.P50Ms, rep.P99Ms)
	return nil
}

// finishSmall prints the report.
func finishSmall(rep smallReport, asJSON bool, stdout io.Writer) error {
	rep.PeakRSSMB = round(peakRSSMB(), 1)
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	_, err := fmt.Fprintf(stdout, "%s (%s): %d clients, %d jobs of %d tasks, %d workers x concurrency %d\n"+
		"  %.1f jobs/s, %.1f tasks/s, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms\n",
		rep.System, rep.Config, rep.Clients, rep.Jobs, rep.JobTasks, rep.Workers, rep.Concurrency,
		rep.JobsPerS, rep.TasksPerS, rep.P50Ms, rep.P95Ms, rep.P99Ms)
	if err == nil && rep.AloneJobs > 0 {
		_, err = fmt.Fprintf(stdout, "  one client alone (%d jobs): p50 %.1f ms, p99 %.1f ms\n", rep.AloneJobs, rep.AloneP50Ms, rep.AloneP99Ms)
	}
	return err
}

// errJobFailed is returned when a job of a small-jobs run failed or was
// cancelled instead of finishing.
var errJobFailed = errors.New("a job failed or was cancelled")
