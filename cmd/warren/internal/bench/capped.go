package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// Capped job benchmark (`warren bench --capped-beside N`): the cost of a
// job's concurrency cap (warren.Policy.MaxConcurrency) to its neighbours
// and its own speed.
const (
	// cap3Tasks, cap3Limit and cap3Duration are the job timed alone:
	// 30 tasks of 150 ms, 3 at a time, ideally 1.5 s.
	cap3Tasks, cap3Limit = 30, 3
	cap3Duration         = 150 * time.Millisecond
)

// CappedReport is what RunCapped measured (`warren bench --capped-beside
// N --json` prints it).
type CappedReport struct {
	Tasks          int     `json:"tasks"`
	Workers        int     `json:"workers"`
	TaskDurationMs float64 `json:"task_duration_ms"`
	// Cap is the max_concurrency of the job run beside the uncapped one.
	Cap int `json:"cap"`
	// AloneTasksPerS and BesideTasksPerS are the uncapped job's
	// throughputs alone and beside the capped job (medians of the
	// rounds), Ratio the second over the first.
	AloneTasksPerS  float64   `json:"alone_tasks_per_s"`
	BesideTasksPerS float64   `json:"beside_tasks_per_s"`
	Ratio           float64   `json:"ratio"`
	RoundsAlone     []float64 `json:"rounds_alone_tasks_per_s"`
	RoundsBeside    []float64 `json:"rounds_beside_tasks_per_s"`
	// CappedDoneBeside is how many tasks the capped job completed while
	// the uncapped one ran (the median round's).
	CappedDoneBeside int64 `json:"capped_done_beside"`
	// Cap3WallS is the wall time of a job of 30 tasks of 150 ms with
	// max_concurrency 3, from its submission to its close (the median of
	// the rounds); ideally 1.5 s.
	Cap3WallS   float64   `json:"cap3_wall_s"`
	RoundsCap3S []float64 `json:"rounds_cap3_wall_s"`
}

// RunCapped runs cfg.Rounds interleaved rounds of: an uncapped job of
// cfg.Tasks echo tasks alone; the same beside a job of as many tasks with
// max_concurrency limit on the same queue (its throughput measured from
// its submission to its close, the capped job cancelled after); and a
// job of 30 tasks of 150 ms with max_concurrency 3, timed. Each round
// runs on a server and workers of its own (a fresh SQLite file unless
// cfg.DatabaseURL names a store).
func RunCapped(ctx context.Context, cfg Config, limit int) (rep CappedReport, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return CappedReport{}, err
	}
	if limit < 1 || limit > warren.MaxConcurrencyLimit {
		return CappedReport{}, fmt.Errorf("bench: the cap must be between 1 and %d, got %d", warren.MaxConcurrencyLimit, limit)
	}
	rep = CappedReport{Tasks: cfg.Tasks, Workers: cfg.Workers, Cap: limit, TaskDurationMs: float64(cfg.TaskDuration) / float64(time.Millisecond)}
	var done []int64
	for i := range cfg.Rounds {
		for _, part := range []string{"alone", "beside", "cap3"} {
			rf := cfg
			if cfg.DatabaseURL == "" {
				dir, err := os.MkdirTemp("", "warren-bench-")
				if err != nil {
					return CappedReport{}, err
				}
				defer os.RemoveAll(dir)
				rf.DatabaseURL = "sqlite://" + filepath.Join(dir, "warren.db")
			}
			cfg.Progress("round %d/%d: %s", i+1, cfg.Rounds, part)
			// Names of its own: a cancelled capped job leaves messages
			// behind, which no later part must see.
			var b [4]byte
			_, _ = rand.Read(b[:])
			names := protocol.NamesFor("warren-bench-" + hex.EncodeToString(b[:]) + "-capped.")
			res, err := runCappedPart(ctx, rf, names, part, limit)
			if derr := deleteTopology(cfg.AMQPURL, names); derr != nil && err == nil {
				err = derr
			}
			if err != nil {
				return CappedReport{}, fmt.Errorf("round %d, %s: %w", i+1, part, err)
			}
			switch part {
			case "alone":
				rep.RoundsAlone = append(rep.RoundsAlone, round1(float64(cfg.Tasks)/res.took.Seconds()))
			case "beside":
				rep.RoundsBeside = append(rep.RoundsBeside, round1(float64(cfg.Tasks)/res.took.Seconds()))
				done = append(done, res.cappedDone)
			case "cap3":
				rep.RoundsCap3S = append(rep.RoundsCap3S, math.Round(res.took.Seconds()*1000)/1000)
			}
			cfg.Progress("round %d/%d: %s: %v", i+1, cfg.Rounds, part, res.took)
		}
	}
	median := func(xs []float64) float64 { return xs[medianIndex(len(xs), func(i int) float64 { return xs[i] })] }
	rep.AloneTasksPerS, rep.Cap3WallS = median(rep.RoundsAlone), median(rep.RoundsCap3S)
	k := medianIndex(len(rep.RoundsBeside), func(i int) float64 { return rep.RoundsBeside[i] })
	rep.BesideTasksPerS, rep.CappedDoneBeside = rep.RoundsBeside[k], done[k]
	rep.Ratio = math.Round(rep.BesideTasksPerS/rep.AloneTasksPerS*1000) / 1000
	return rep, nil
}

// cappedResult is what one part of a round measured.
type cappedResult struct {
	took       time.Duration
	cappedDone int64
}

// runCappedPart runs one part of a RunCapped round ("alone", "beside" or
// "cap3") on a server and workers of its own.
func runCappedPart(ctx context.Context, cfg Config, names protocol.Names, part string, limit int) (_ cappedResult, err error) {
	var (
		mu     sync.Mutex
		closed = map[string]chan warren.JobState{}
	)
	waitFor := func(id string) chan warren.JobState {
		mu.Lock()
		defer mu.Unlock()
		if closed[id] == nil {
			closed[id] = make(chan warren.JobState, 1)
		}
		return closed[id]
	}
	srv, err := server.New(server.Config{AMQPURL: cfg.AMQPURL, DatabaseURL: cfg.DatabaseURL, Prefix: names.Prefix,
		Listen: "127.0.0.1:0", RelayBatchSize: cfg.RelayBatch, AggregatorBatchSize: cfg.AggregatorBatch, Logger: cfg.Logger,
		Hooks: server.Hooks{OnJobClosed: func(id string, state warren.JobState) { waitFor(id) <- state }}})
	if err != nil {
		return cappedResult{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return cappedResult{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	defer func() {
		stop()
		wg.Wait()
		if serr := srv.Stop(); serr != nil && err == nil {
			err = serr
		}
		close(errs)
		for e := range errs {
			if e != nil && err == nil {
				err = e
			}
		}
	}()
	for i := range cfg.Workers {
		w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: names.Prefix, Concurrency: cfg.Concurrency,
			Prefetch: cfg.Prefetch, Name: fmt.Sprintf("bench-%d", i), Logger: cfg.Logger})
		if err != nil {
			return cappedResult{}, err
		}
		w.Handle("echo", echoAfter(cfg.TaskDuration))
		w.Handle("sleep", echoAfter(cap3Duration))
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	if err := waitConsumers(ctx, cfg.AMQPURL, names, cfg.Workers); err != nil {
		return cappedResult{}, err
	}
	st := srv.Store()
	create := func(typ string, n int, p warren.Policy) (string, error) {
		p.Reduce = "none"
		job, _, err := st.CreateJob(ctx, store.NewJob{Type: typ, Policy: p}, payloads(n))
		if err != nil {
			return "", err
		}
		waitFor(job.ID)
		srv.WakeRelay()
		return job.ID, nil
	}
	wait := func(id string) error {
		select {
		case state := <-waitFor(id):
			if state != warren.JobCompleted {
				return fmt.Errorf("job %s closed %s", id, state)
			}
			return nil
		case e := <-errs:
			return earlyStop(e)
		case <-srv.Done():
			return fmt.Errorf("the server stopped early: %w", srv.Stop())
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	var res cappedResult
	switch part {
	case "cap3":
		start := time.Now()
		id, err := create("sleep", cap3Tasks, warren.Policy{MaxConcurrency: cap3Limit})
		if err != nil {
			return cappedResult{}, err
		}
		if err := wait(id); err != nil {
			return cappedResult{}, err
		}
		res.took = time.Since(start)
	default:
		var capped string
		if part == "beside" {
			if capped, err = create("echo", cfg.Tasks, warren.Policy{MaxConcurrency: limit, BatchSize: cfg.BatchSize}); err != nil {
				return cappedResult{}, err
			}
		}
		start := time.Now()
		id, err := create("echo", cfg.Tasks, warren.Policy{BatchSize: cfg.BatchSize})
		if err != nil {
			return cappedResult{}, err
		}
		if err := wait(id); err != nil {
			return cappedResult{}, err
		}
		res.took = time.Since(start)
		if capped != "" {
			job, err := st.GetJob(ctx, capped)
			if err != nil {
				return cappedResult{}, err
			}
			res.cappedDone = job.CompletedTasks
			if _, err := st.CancelJob(ctx, capped); err != nil {
				return cappedResult{}, err
			}
		}
	}
	return res, nil
}

// Print writes the report as `warren bench --capped-beside` shows it.
func (r CappedReport) Print(w io.Writer) {
	tasks := "no-op tasks"
	if r.TaskDurationMs > 0 {
		tasks = fmt.Sprintf("tasks of %g ms", r.TaskDurationMs)
	}
	fmt.Fprintf(w, "warren bench --capped-beside %d: an uncapped job of %d %s, %d workers, alone and beside a job of max_concurrency %d\n\n",
		r.Cap, r.Tasks, tasks, r.Workers, r.Cap)
	row := func(k, v string) { fmt.Fprintf(w, "  %-34s %s\n", k, v) }
	row("uncapped job alone", fmt.Sprintf("%.0f tasks/s", r.AloneTasksPerS))
	row("uncapped job beside the capped one", fmt.Sprintf("%.0f tasks/s (the capped job did %d tasks meanwhile)", r.BesideTasksPerS, r.CappedDoneBeside))
	row("ratio beside/alone", fmt.Sprintf("%.3f (medians of %d interleaved rounds)", r.Ratio, len(r.RoundsAlone)))
	row("rounds: alone", fmt.Sprint(r.RoundsAlone))
	row("rounds: beside", fmt.Sprint(r.RoundsBeside))
	row("30 tasks of 150 ms, cap 3", fmt.Sprintf("%.3f s submit -> closed (ideal 1.5 s); rounds %v", r.Cap3WallS, r.RoundsCap3S))
}
