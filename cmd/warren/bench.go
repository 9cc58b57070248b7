package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/cmd/warren/internal/bench"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/server"
)

// benchFlags are `warren bench`'s settings.
type benchFlags struct {
	amqpURL      string
	database     string
	tasks        int
	workers      int
	batchSize    int
	taskDuration time.Duration
	concurrency  int
	rounds       int
	prefetch     int
	relayBatch   int
	aggBatch     int
	json         bool
	cpuProfile   string
	memProfile   string
	cappedBeside int
	tree         string
	killWorkers  int
	smallJobs    bool
	clients      int
	jobs         int
	jobTasks     int
}

func runBench(ctx context.Context, args []string, env *environment) error {
	var f benchFlags
	fs := newFlagSet("bench", "Measure, in one process against the local RabbitMQ, the broker's own ceiling for one message per task\n"+
		"(persistent tasks with confirms -> consumers publish a confirmed result, then ack -> one collector; quorum queues;\n"+
		"prefetch 10, 50 and 200 tried, the best kept), then warren end to end with no-op echo tasks (store, relay,\n"+
		"W workers, aggregator, job closed), in --rounds interleaved rounds, and print the median throughputs, their\n"+
		"ratio, submit time, time to first result, p50/p99 task latency (queued -> recorded), CPU per task, one-task\n"+
		"job latency and the process's peak RSS. Everything uses fresh exchange and queue names, deleted afterwards.", env)
	fs.StringVar(&f.amqpURL, "amqp-url", broker.DefaultURL, amqpURLUsage)
	fs.secretFlags("amqp-url")
	fs.StringVar(&f.database, "database", "", "job store URL (default: a temporary SQLite file, removed afterwards)")
	fs.IntVar(&f.tasks, "tasks", 20000, "tasks per run")
	fs.IntVar(&f.workers, "workers", 4, "workers (consumers in the ceiling run)")
	fs.IntVar(&f.batchSize, "batch-size", 0, "the warren job's batch_size: tasks per task message, 0 to leave it to warren as a job without batch_size does (the ceiling run always sends one message per task)")
	fs.DurationVar(&f.taskDuration, "task-duration", 0, "how long each warren task's handler sleeps (0: no-op tasks); the ceiling, no-op by nature, is then not run")
	fs.IntVar(&f.concurrency, "concurrency", 16, "handler concurrency of each warren worker")
	fs.IntVar(&f.prefetch, "prefetch", 0, "prefetch of each warren worker (default 2 x --concurrency)")
	fs.IntVar(&f.relayBatch, "relay-batch", server.DefaultRelayBatchSize, "tasks the relay claims and publishes per outbox round trip")
	fs.IntVar(&f.aggBatch, "aggregator-batch", server.DefaultAggregatorBatchSize, "result messages recorded per store transaction")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds of (ceiling, warren), interleaved; the medians are reported")
	fs.BoolVar(&f.json, "json", false, "print one JSON object and nothing else on stdout")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the rounds (ceiling and warren runs) to this file")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a Go allocation profile (allocs) to this file at the end")
	fs.IntVar(&f.cappedBeside, "capped-beside", 0, "instead: time an uncapped job of --tasks alone and beside a job of as many tasks with max_concurrency N on the same queue (interleaved rounds, the ratio), and a job of 30 tasks of 150 ms with max_concurrency 3")
	fs.StringVar(&f.tree, "tree", "", "instead: a job of one task that spawns a tree of `LEVELSxFANOUT` (6x6: 55,987 tasks), next to a flat job "+
		"of as many, run by --workers worker processes (`warren worker --types tree`)")
	fs.IntVar(&f.killWorkers, "kill-workers", 0, "with --tree: also run the tree while killing this many worker processes with SIGKILL, at even steps, each replaced")
	fs.BoolVar(&f.smallJobs, "small-jobs", false, "instead: many small jobs: --clients clients each submit a job of --job-tasks no-op tasks over HTTP and wait for its close on the event stream, --jobs in all, "+
		"then one client alone, then one job of --tasks tasks for the ratio, in --rounds interleaved rounds, on --workers workers (default 2)")
	fs.IntVar(&f.clients, "clients", 8, "with --small-jobs: concurrent clients")
	fs.IntVar(&f.jobs, "jobs", 400, "with --small-jobs: jobs in all")
	fs.IntVar(&f.jobTasks, "job-tasks", 10, "with --small-jobs: tasks per job")
	// One run's choices: command line only (WARREN_DATABASE_URL must not
	// point a demo or a benchmark at a real store).
	fs.localFlags("database", "tasks", "workers", "batch-size", "task-duration", "concurrency", "prefetch", "relay-batch", "aggregator-batch", "rounds", "json", "cpuprofile", "memprofile", "capped-beside", "tree", "kill-workers",
		"small-jobs", "clients", "jobs", "job-tasks")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if err := checkAMQPURL(fs, f.amqpURL); err != nil {
		return err
	}
	switch {
	case f.tasks < 1:
		return usageErrorf("--tasks must be >= 1, got %d", f.tasks)
	case f.workers < 1:
		return usageErrorf("--workers must be >= 1, got %d", f.workers)
	case f.concurrency < 1:
		return usageErrorf("--concurrency must be >= 1, got %d", f.concurrency)
	case f.prefetch < 0 || (f.prefetch > 0 && f.prefetch < f.concurrency):
		return usageErrorf("--prefetch must be at least --concurrency (%d), got %d", f.concurrency, f.prefetch)
	case f.relayBatch < 1 || f.aggBatch < 1:
		return usageErrorf("--relay-batch and --aggregator-batch must be >= 1")
	case f.rounds < 1:
		return usageErrorf("--rounds must be >= 1, got %d", f.rounds)
	case f.batchSize < 0 || f.batchSize > warren.MaxBatchSize:
		return usageErrorf("--batch-size must be between 0 (automatic) and %d, got %d", warren.MaxBatchSize, f.batchSize)
	case f.taskDuration < 0:
		return usageErrorf("--task-duration must be >= 0, got %s", f.taskDuration)
	case f.cappedBeside < 0 || f.cappedBeside > warren.MaxConcurrencyLimit:
		return usageErrorf("--capped-beside must be between 1 and %d, got %d", warren.MaxConcurrencyLimit, f.cappedBeside)
	}
	if f.smallJobs {
		return runSmallBench(ctx, f, fs, env)
	}
	if f.tree != "" {
		return runTreeBench(ctx, f, env)
	}
	if f.cappedBeside > 0 {
		return runCappedBench(ctx, f, fs, env)
	}
	rep, err := bench.Run(ctx, bench.Config{
		AMQPURL: f.amqpURL, DatabaseURL: f.database, Tasks: f.tasks, Workers: f.workers, BatchSize: f.batchSize, TaskDuration: f.taskDuration,
		Concurrency: f.concurrency, Prefetch: f.prefetch, RelayBatch: f.relayBatch, AggregatorBatch: f.aggBatch,
		Rounds: f.rounds, CPUProfile: f.cpuProfile, MemProfile: f.memProfile,
		Progress: func(format string, a ...any) { fmt.Fprintf(env.stderr, "warren bench: "+format+"\n", a...) },
		Logger:   quietLogger(fs, env),
	})
	if err != nil {
		return err
	}
	return printReport(env, f.json, rep)
}

// printReport prints a benchmark's report: one JSON object with asJSON,
// else as the report prints itself.
func printReport(env *environment, asJSON bool, rep interface{ Print(io.Writer) }) error {
	if !asJSON {
		rep.Print(env.stdout)
		return nil
	}
	out, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, string(out))
	return nil
}

// runCappedBench runs `warren bench --capped-beside N` (bench.RunCapped).
func runCappedBench(ctx context.Context, f benchFlags, fs *flagSet, env *environment) error {
	rep, err := bench.RunCapped(ctx, bench.Config{
		AMQPURL: f.amqpURL, DatabaseURL: f.database, Tasks: f.tasks, Workers: f.workers, BatchSize: f.batchSize, TaskDuration: f.taskDuration,
		Concurrency: f.concurrency, Prefetch: f.prefetch, RelayBatch: f.relayBatch, AggregatorBatch: f.aggBatch, Rounds: f.rounds,
		Progress: func(format string, a ...any) { fmt.Fprintf(env.stderr, "warren bench: "+format+"\n", a...) },
		Logger:   quietLogger(fs, env),
	}, f.cappedBeside)
	if err != nil {
		return err
	}
	return printReport(env, f.json, rep)
}

// runSmallBench runs `warren bench --small-jobs` (bench.RunSmall).
func runSmallBench(ctx context.Context, f benchFlags, fs *flagSet, env *environment) error {
	switch {
	case f.clients < 1 || f.jobs < 1 || f.jobTasks < 1:
		return usageErrorf("--clients, --jobs and --job-tasks must be >= 1")
	case f.jobTasks > server.DefaultMaxJobTasks:
		return usageErrorf("--job-tasks must be at most %d, got %d", server.DefaultMaxJobTasks, f.jobTasks)
	}
	workers := f.workers
	if _, set := fs.source["workers"]; !set {
		workers = 2
	}
	rep, err := bench.RunSmall(ctx, bench.SmallConfig{
		AMQPURL: f.amqpURL, DatabaseURL: f.database, Clients: f.clients, Jobs: f.jobs, JobTasks: f.jobTasks, BigTasks: f.tasks,
		Workers: workers, Concurrency: f.concurrency, Rounds: f.rounds, CPUProfile: f.cpuProfile,
		Progress: func(format string, a ...any) { fmt.Fprintf(env.stderr, "warren bench: "+format+"\n", a...) },
		Logger:   quietLogger(fs, env),
	})
	if err != nil {
		return err
	}
	return printReport(env, f.json, rep)
}

// runTreeBench runs `warren bench --tree LxF`: bench.RunTree with worker
// processes of this binary.
func runTreeBench(ctx context.Context, f benchFlags, env *environment) error {
	var levels, fanout int
	if _, err := fmt.Sscanf(f.tree, "%dx%d", &levels, &fanout); err != nil || levels < 1 || fanout < 1 || fmt.Sprintf("%dx%d", levels, fanout) != f.tree {
		return usageErrorf("--tree must be LEVELSxFANOUT, both >= 1 (like 6x6), got %q", f.tree)
	}
	if f.killWorkers < 0 {
		return usageErrorf("--kill-workers must be >= 0, got %d", f.killWorkers)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	rep, err := bench.RunTree(ctx, bench.TreeConfig{
		AMQPURL: f.amqpURL, DatabaseURL: f.database, Levels: levels, Fanout: fanout, Workers: f.workers,
		Concurrency: f.concurrency, Kills: f.killWorkers, Worker: []string{exe, "worker"},
		Progress: func(format string, a ...any) { fmt.Fprintf(env.stderr, "warren bench: "+format+"\n", a...) },
	})
	out, jerr := json.MarshalIndent(rep, "", "  ")
	if jerr != nil {
		return jerr
	}
	fmt.Fprintln(env.stdout, string(out))
	return err
}
