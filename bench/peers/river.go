package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's settings for --tuned: the values River's own benchmark command
// (cmd/river/riverbench) uses. Its defaults are FetchCooldown 100ms and
// FetchPollInterval 1s, which cap a client at MaxWorkers jobs per 100 ms.
const (
	riverTunedFetchCooldown     = 2 * time.Millisecond
	riverTunedFetchPollInterval = 20 * time.Millisecond
	// riverTunedMaxWorkers is MaxWorkers per client under --tuned when
	// --concurrency is not given: 4 clients x 500 = the 2,000 River's own
	// benchmark runs in its one client.
	riverTunedMaxWorkers = 500
)

type riverFlags struct {
	common
	database          string
	tuned             bool
	batch             int
	output            bool
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	verbose           bool
	config            string // the report's config
}

func runRiver(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f riverFlags
	fs := newFlagSet("river", "River (PostgreSQL): insert N no-op jobs with InsertManyFast (COPY) in batches, work them in\n"+
		"W river.Clients (MaxWorkers C each) in one fresh schema, and stop when all N are completed\n"+
		"(counted from completed-job events, confirmed by SELECT count(*) ... WHERE state = 'completed').\n"+
		"The schema is created at start and dropped at the end.", stdout)
	f.common.register(fs.FlagSet)
	fs.StringVar(&f.database, "database", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	fs.BoolVar(&f.tuned, "tuned", false, fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s and, unless --concurrency is given, MaxWorkers %d per client\n(default: River's defaults, FetchCooldown 100ms, FetchPollInterval 1s, MaxWorkers = --concurrency)",
		riverTunedFetchCooldown, riverTunedFetchPollInterval, riverTunedMaxWorkers))
	fs.IntVar(&f.batch, "batch", 1000, "jobs per InsertManyFast call")
	fs.BoolVar(&f.output, "output", true, "record the payload as the job's output (river.RecordOutput), as warren stores results")
	fs.DurationVar(&f.fetchCooldown, "fetch-cooldown", 0, "override FetchCooldown (0: River's default, or the --tuned value)")
	fs.DurationVar(&f.fetchPollInterval, "fetch-poll-interval", 0, "override FetchPollInterval (0: River's default, or the --tuned value)")
	fs.BoolVar(&f.verbose, "verbose", false, "let River log at info level (default: warnings and errors only)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return errUsage{err}
	}
	if f.batch < 1 {
		return errUsage{fmt.Errorf("--batch must be >= 1, got %d", f.batch)}
	}
	if f.tuned {
		if !flagSet(fs, "concurrency") {
			f.concurrency = riverTunedMaxWorkers
		}
		if f.fetchCooldown == 0 {
			f.fetchCooldown = riverTunedFetchCooldown
		}
		if f.fetchPollInterval == 0 {
			f.fetchPollInterval = riverTunedFetchPollInterval
		}
	}
	f.config = "defaults"
	if f.tuned {
		f.config = "tuned"
	}
	f.config = configLabel(fs, f.config, reportedFlags...)
	if f.concurrency > river.QueueNumWorkersMax {
		return errUsage{fmt.Errorf("--concurrency is River's MaxWorkers, at most %d, got %d", river.QueueNumWorkersMax, f.concurrency)}
	}
	rep, submit, total, err := riverBench(ctx, f, progress{stderr, "river"}, stderr)
	if err != nil {
		return err
	}
	return finish(rep, submit, total, f.json, stdout)
}

// riverArgs is the job: {"i":n}.
type riverArgs struct {
	I int `json:"i"`
}

func (riverArgs) Kind() string { return "peers_noop" }

// riverWorker returns the payload unchanged: it records the job's encoded
// args as its output when output is set, else does nothing.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	output bool
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	if w.output {
		return river.RecordOutput(ctx, json.RawMessage(job.EncodedArgs))
	}
	return nil
}

func riverBench(parent context.Context, f riverFlags, p progress, stderr io.Writer) (rep report, submit, total time.Duration, err error) {
	rep = report{System: "river", Config: f.config, Tasks: f.tasks, Workers: f.workers, Concurrency: f.concurrency}

	ctx, cancel := context.WithTimeout(parent, f.timeout)
	defer cancel()
	fail := func(e error) error {
		if c := ctxErr(parent, ctx, f.timeout); c != nil {
			return c
		}
		return e
	}

	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	poolConfig, err := pgxpool.ParseConfig(f.database)
	if err != nil {
		return rep, 0, 0, fmt.Errorf("--database: %w", err)
	}
	tag := randomTag()
	schema := "peers_river_" + tag
	jobTable := pgx.Identifier{schema, "river_job"}.Sanitize()
	poolConfig.ConnConfig.RuntimeParams["search_path"] = schema
	poolConfig.ConnConfig.RuntimeParams["application_name"] = "peers river " + tag

	// 1. A fresh schema, dropped at the end whatever happens.
	drop, err := riverCreateSchema(ctx, f.database, schema)
	if err != nil {
		return rep, 0, 0, fail(err)
	}
	p.printf("schema %s created", schema)
	defer func() {
		if derr := drop(); derr != nil {
			if err == nil {
				err = derr
			}
			return
		}
		p.printf("schema %s dropped", schema)
	}()

	var pools []*pgxpool.Pool
	defer func() {
		for _, pool := range pools {
			pool.Close()
		}
	}()
	newPool := func() (*pgxpool.Pool, error) {
		pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pool)
		return pool, nil
	}

	// 2. River's tables in it.
	insertPool, err := newPool()
	if err != nil {
		return rep, 0, 0, fail(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(insertPool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return rep, 0, 0, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return rep, 0, 0, fail(fmt.Errorf("migrating: %w", err))
	}

	// 3. W worker clients, each with its own pool, subscribed to their
	// completed (and failed/cancelled) job events.
	var (
		completed atomic.Int64
		failed    atomic.Int64
		allDone   = make(chan struct{})
		doneOnce  sync.Once
		clients   []*river.Client[pgx.Tx]
	)
	stopClients := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer scancel()
		for _, c := range clients {
			var serr error
			if parent.Err() != nil || ctx.Err() != nil {
				serr = c.StopAndCancel(sctx)
			} else {
				serr = c.Stop(sctx)
			}
			if serr != nil && err == nil {
				err = fmt.Errorf("stopping River client: %w", serr)
			}
		}
		clients = nil
	}
	defer stopClients()
	for i := range f.workers {
		pool, err := newPool()
		if err != nil {
			return rep, 0, 0, fail(err)
		}
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverWorker{output: f.output})
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			ID:                fmt.Sprintf("peers-%s-%d", tag, i),
			Schema:            schema,
			Logger:            logger,
			FetchCooldown:     f.fetchCooldown,     // 0: River's default
			FetchPollInterval: f.fetchPollInterval, // 0: River's default
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: f.concurrency}},
			Workers:           workers,
		})
		if err != nil {
			return rep, 0, 0, err
		}
		events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: f.tasks + 1000, // events that do not fit are dropped
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		defer unsubscribe()
		go func() { // ends when ctx is cancelled, the last thing riverBench does
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-events:
					if !ok {
						return
					}
					if ev.Kind != river.EventKindJobCompleted {
						failed.Add(1)
						continue
					}
					if completed.Add(1) >= int64(f.tasks) {
						doneOnce.Do(func() { close(allDone) })
					}
				}
			}
		}()
		if err := client.Start(ctx); err != nil {
			return rep, 0, 0, fail(fmt.Errorf("starting River client: %w", err))
		}
		clients = append(clients, client)
	}

	// 4. An insert-only client, as a producer process would have.
	inserter, err := river.NewClient(riverpgxv5.New(insertPool), &river.Config{Schema: schema, Logger: logger})
	if err != nil {
		return rep, 0, 0, err
	}
	cooldown, poll := f.fetchCooldown, f.fetchPollInterval
	if cooldown == 0 {
		cooldown = river.FetchCooldownDefault
	}
	if poll == 0 {
		poll = river.FetchPollIntervalDefault
	}
	p.printf("%d clients x MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, output %t; inserting %d jobs in batches of %d",
		f.workers, f.concurrency, cooldown, poll, f.output, f.tasks, f.batch)

	countCompleted := func() (int64, error) {
		var n int64
		err := insertPool.QueryRow(ctx, "SELECT count(*) FROM "+jobTable+" WHERE state = 'completed'").Scan(&n)
		return n, err
	}

	// 5. Fan out.
	start := time.Now()
	params := make([]river.InsertManyParams, 0, f.batch)
	for off := 0; off < f.tasks; off += f.batch {
		params = params[:0]
		for i := off; i < min(off+f.batch, f.tasks); i++ {
			params = append(params, river.InsertManyParams{Args: riverArgs{I: i}})
		}
		if _, err := inserter.InsertManyFast(ctx, params); err != nil {
			return rep, 0, 0, fail(fmt.Errorf("inserting jobs: %w", err))
		}
	}
	submit = time.Since(start)
	p.printf("inserted %d jobs in %.3f s", f.tasks, submit.Seconds())

	// 6. Fan in: wait for N completed events, then confirm in the table.
	// The table is also counted every second, as progress and in case an
	// event was dropped.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			return rep, 0, 0, ctxErr(parent, ctx, f.timeout)
		case <-allDone:
			break wait
		case <-ticker.C:
			if n := failed.Load(); n > 0 {
				return rep, 0, 0, fmt.Errorf("%d jobs failed or were cancelled", n)
			}
			n, err := countCompleted()
			if err != nil {
				return rep, 0, 0, fail(fmt.Errorf("counting completed jobs: %w", err))
			}
			p.printf("%d of %d completed (%.1f s)", n, f.tasks, time.Since(start).Seconds())
			if n >= int64(f.tasks) {
				break wait
			}
		}
	}
	for {
		n, err := countCompleted()
		if err != nil {
			return rep, 0, 0, fail(fmt.Errorf("counting completed jobs: %w", err))
		}
		if n >= int64(f.tasks) {
			break
		}
		select {
		case <-ctx.Done():
			return rep, 0, 0, ctxErr(parent, ctx, f.timeout)
		case <-time.After(2 * time.Millisecond):
		}
	}
	total = time.Since(start)
	if n := failed.Load(); n > 0 {
		return rep, 0, 0, fmt.Errorf("%d jobs failed or were cancelled", n)
	}
	p.printf("all %d completed in %.3f s", f.tasks, total.Seconds())

	// 7. Outside the timing: one job's recorded output is its payload.
	if f.output {
		var args, output []byte
		err := insertPool.QueryRow(ctx, "SELECT args, metadata->'output' FROM "+jobTable+" WHERE state = 'completed' LIMIT 1").Scan(&args, &output)
		if err != nil {
			return rep, 0, 0, fail(fmt.Errorf("reading a job's output: %w", err))
		}
		if !jsonEqual(args, output) {
			return rep, 0, 0, fmt.Errorf("job output %s is not its payload %s", output, args)
		}
	}
	return rep, submit, total, nil
}
