package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The many-small-jobs benchmark on River. River (open source) has no job
// of many tasks, so a "job" is written the way River users write a fan-in:
//
//   - the client inserts, in one transaction, a batch row holding the
//     number of tasks still to run, and T task jobs that name the batch
//     (InsertManyTx);
//   - each task, in one transaction of its own, decrements the batch's
//     counter (the row lock orders siblings that finish together) and
//     completes itself with river.JobCompleteTx; the one that takes the
//     counter to 0 inserts the callback job in that same transaction
//     (Client.InsertTx), so that the callback is inserted exactly once,
//     and only if the last task's completion commits;
//   - the client waits for the callback's JobCompleted event, from the
//     worker clients' Subscribe channels.

// riverSmallTaskArgs is a task of batch Batch.
type riverSmallTaskArgs struct {
	Batch int64 `json:"batch"`
	I     int   `json:"i"`
}

func (riverSmallTaskArgs) Kind() string { return "peers_small_task" }

// riverSmallCallbackArgs is the callback of batch Batch, inserted by its
// last task.
type riverSmallCallbackArgs struct {
	Batch int64 `json:"batch"`
}

func (riverSmallCallbackArgs) Kind() string { return "peers_small_callback" }

// riverSmallTaskWorker runs a no-op task and does the batch's accounting in
// the transaction that completes it.
type riverSmallTaskWorker struct {
	river.WorkerDefaults[riverSmallTaskArgs]
	pool *pgxpool.Pool
}

func (w *riverSmallTaskWorker) Work(ctx context.Context, job *river.Job[riverSmallTaskArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var remaining int
	if err := tx.QueryRow(ctx, "UPDATE peers_batch SET remaining = remaining - 1 WHERE id = $1 RETURNING remaining", job.Args.Batch).Scan(&remaining); err != nil {
		return fmt.Errorf("counting down batch %d: %w", job.Args.Batch, err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	if remaining == 0 {
		client := river.ClientFromContext[pgx.Tx](ctx)
		if _, err := client.InsertTx(ctx, tx, riverSmallCallbackArgs{Batch: job.Args.Batch}, nil); err != nil {
			return fmt.Errorf("inserting batch %d's callback: %w", job.Args.Batch, err)
		}
	}
	return tx.Commit(ctx)
}

// riverSmallCallbackWorker is the callback: a no-op (the tasks record no
// output to collect).
type riverSmallCallbackWorker struct {
	river.WorkerDefaults[riverSmallCallbackArgs]
}

func (riverSmallCallbackWorker) Work(context.Context, *river.Job[riverSmallCallbackArgs]) error {
	return nil
}

type riverSmallFlags struct {
	smallFlags
	database          string
	tuned             bool
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	verbose           bool
}

func runRiverSmall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f riverSmallFlags
	fs := newFlagSet("river-small", "River (PostgreSQL), many small jobs: C clients each insert a batch of T no-op jobs (InsertManyTx, with\n"+
		"a counter row); the task that takes the counter to 0 inserts a callback job with InsertTx in the transaction\n"+
		"that completes it (JobCompleteTx); the client waits for the callback's JobCompleted event. J jobs in all,\n"+
		"after one client alone runs --alone-jobs. The schema is created at start and dropped at the end.", stdout)
	f.smallFlags.register(fs)
	fs.StringVar(&f.database, "database", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	fs.BoolVar(&f.tuned, "tuned", false, fmt.Sprintf("FetchCooldown %s and FetchPollInterval %s (River's benchmark's values; MaxWorkers stays --concurrency)\n(default: River's defaults, FetchCooldown 100ms, FetchPollInterval 1s)",
		riverTunedFetchCooldown, riverTunedFetchPollInterval))
	fs.DurationVar(&f.fetchCooldown, "fetch-cooldown", 0, "override FetchCooldown (0: River's default, or the --tuned value)")
	fs.DurationVar(&f.fetchPollInterval, "fetch-poll-interval", 0, "override FetchPollInterval (0: River's default, or the --tuned value)")
	fs.BoolVar(&f.verbose, "verbose", false, "let River log at info level (default: warnings and errors only)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return errUsage{err}
	}
	if f.concurrency > river.QueueNumWorkersMax {
		return errUsage{fmt.Errorf("--concurrency is River's MaxWorkers, at most %d, got %d", river.QueueNumWorkersMax, f.concurrency)}
	}
	if f.tuned {
		if f.fetchCooldown == 0 {
			f.fetchCooldown = riverTunedFetchCooldown
		}
		if f.fetchPollInterval == 0 {
			f.fetchPollInterval = riverTunedFetchPollInterval
		}
	}
	base := "defaults"
	if f.tuned {
		base = "tuned"
	}
	rep := smallReport{
		System: "river", Config: configLabel(fs, base, smallReportedFlags...),
		Clients: f.clients, Jobs: f.jobs, JobTasks: f.jobTasks, Workers: f.workers, Concurrency: f.concurrency, AloneJobs: f.aloneJobs,
	}
	if err := riverSmallBench(ctx, f, &rep, progress{stderr, "river-small"}, stderr); err != nil {
		return err
	}
	return finishSmall(rep, f.json, stdout)
}

// smallReportedFlags are the small modes' flags that do not go into the
// config label (they are fields of the report, or do not change what is
// measured).
var smallReportedFlags = []string{"clients", "jobs", "job-tasks", "workers", "concurrency", "alone-jobs", "json", "timeout", "tuned", "verbose", "database"}

// riverSmall is the small-jobs driver: the insert client and the waiters
// for the callbacks' completion events.
type riverSmall struct {
	pool     *pgxpool.Pool
	inserter *river.Client[pgx.Tx]
	tasks    int

	mu      sync.Mutex
	waiters map[int64]chan error // batch -> its client, told once the callback has finished
}

func (s *riverSmall) oneJob(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var batch int64
	if err := tx.QueryRow(ctx, "INSERT INTO peers_batch (remaining) VALUES ($1) RETURNING id", s.tasks).Scan(&batch); err != nil {
		return fmt.Errorf("inserting a batch: %w", err)
	}
	params := make([]river.InsertManyParams, s.tasks)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverSmallTaskArgs{Batch: batch, I: i}}
	}
	if _, err := s.inserter.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("inserting batch %d's jobs: %w", batch, err)
	}
	done := make(chan error, 1)
	s.mu.Lock()
	s.waiters[batch] = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, batch)
		s.mu.Unlock()
	}()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing batch %d: %w", batch, err)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dispatch reads one worker client's events until ctx ends: a callback's
// completion goes to its batch's waiter; any failed or cancelled job ends
// the run.
func (s *riverSmall) dispatch(ctx context.Context, events <-chan *river.Event, fail func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Kind != river.EventKindJobCompleted {
				fail(fmt.Errorf("%w: job %d (%s) %s", errJobFailed, ev.Job.ID, ev.Job.Kind, ev.Kind))
				continue
			}
			if ev.Job.Kind != (riverSmallCallbackArgs{}).Kind() {
				continue
			}
			batch, err := callbackBatch(ev.Job)
			if err != nil {
				fail(err)
				continue
			}
			s.mu.Lock()
			done := s.waiters[batch]
			s.mu.Unlock()
			if done != nil {
				select {
				case done <- nil:
				default: // told already (a batch has one callback)
				}
			}
		}
	}
}

func callbackBatch(job *rivertype.JobRow) (int64, error) {
	var a riverSmallCallbackArgs
	if err := json.Unmarshal(job.EncodedArgs, &a); err != nil {
		return 0, fmt.Errorf("callback job %d: args %s: %w", job.ID, job.EncodedArgs, err)
	}
	return a.Batch, nil
}

func riverSmallBench(parent context.Context, f riverSmallFlags, rep *smallReport, p progress, stderr io.Writer) (err error) {
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
		return fmt.Errorf("--database: %w", err)
	}
	tag := randomTag()
	schema := "peers_river_" + tag
	poolConfig.ConnConfig.RuntimeParams["search_path"] = schema
	poolConfig.ConnConfig.RuntimeParams["application_name"] = "peers river-small " + tag

	drop, err := riverCreateSchema(ctx, f.database, schema)
	if err != nil {
		return fail(err)
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
	// newPool opens a pool of at most maxConns connections: the task
	// workers each hold one for their transaction, and River's producer,
	// completer and notifier need theirs besides.
	newPool := func(maxConns int32) (*pgxpool.Pool, error) {
		cfg := poolConfig.Copy()
		cfg.MaxConns = maxConns
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pool)
		return pool, nil
	}

	insertPool, err := newPool(int32(f.clients) + 2)
	if err != nil {
		return fail(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(insertPool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fail(fmt.Errorf("migrating: %w", err))
	}
	if _, err := insertPool.Exec(ctx, "CREATE TABLE peers_batch (id bigserial PRIMARY KEY, remaining int NOT NULL)"); err != nil {
		return fail(fmt.Errorf("creating the batch table: %w", err))
	}

	// An insert-only client. Its FetchCooldown is also how often it sends
	// an insert notification per queue (River's insertNotifyLimiter), so
	// --tuned sets it here too.
	inserter, err := river.NewClient(riverpgxv5.New(insertPool), &river.Config{Schema: schema, Logger: logger, FetchCooldown: f.fetchCooldown})
	if err != nil {
		return err
	}
	sys := &riverSmall{pool: insertPool, inserter: inserter, tasks: f.jobTasks, waiters: make(map[int64]chan error)}

	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	var clients []*river.Client[pgx.Tx]
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer scancel()
		for _, c := range clients {
			var serr error
			if ctx.Err() != nil {
				serr = c.StopAndCancel(sctx)
			} else {
				serr = c.Stop(sctx)
			}
			if serr != nil && err == nil {
				err = fmt.Errorf("stopping River client: %w", serr)
			}
		}
	}()
	for i := range f.workers {
		pool, err := newPool(int32(f.concurrency) + 4)
		if err != nil {
			return fail(err)
		}
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverSmallTaskWorker{pool: pool})
		river.AddWorker(workers, riverSmallCallbackWorker{})
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			ID:                fmt.Sprintf("peers-small-%s-%d", tag, i),
			Schema:            schema,
			Logger:            logger,
			FetchCooldown:     f.fetchCooldown,     // 0: River's default
			FetchPollInterval: f.fetchPollInterval, // 0: River's default
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: f.concurrency}},
			Workers:           workers,
		})
		if err != nil {
			return err
		}
		// Every job's event comes through here, the tasks' too: room for
		// all of them, as events that do not fit are dropped.
		events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: (f.jobs + f.aloneJobs + f.clients) * (f.jobTasks + 1),
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		defer unsubscribe()
		go sys.dispatch(runCtx, events, func(e error) { stopRun(e) })
		if err := client.Start(ctx); err != nil {
			return fail(fmt.Errorf("starting River client: %w", err))
		}
		clients = append(clients, client)
	}

	cooldown, poll := f.fetchCooldown, f.fetchPollInterval
	if cooldown == 0 {
		cooldown = river.FetchCooldownDefault
	}
	if poll == 0 {
		poll = river.FetchPollIntervalDefault
	}
	p.printf("%d clients x MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s; %d clients, %d jobs of %d tasks (after %d alone)",
		f.workers, f.concurrency, cooldown, poll, f.clients, f.jobs, f.jobTasks, f.aloneJobs)
	if err := runSmall(runCtx, sys, f.smallFlags, rep, p); err != nil {
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return cause
		}
		return fail(err)
	}

	// Outside the timing: every batch ran all its tasks and one callback.
	var batches, open, callbacks int64
	err = insertPool.QueryRow(ctx, `SELECT (SELECT count(*) FROM peers_batch), (SELECT count(*) FROM peers_batch WHERE remaining <> 0),
		(SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed')`, (riverSmallCallbackArgs{}).Kind()).Scan(&batches, &open, &callbacks)
	if err != nil {
		return fail(fmt.Errorf("checking the batches: %w", err))
	}
	if open != 0 || callbacks != batches {
		return fmt.Errorf("%d batches: %d not counted down to 0, %d callbacks completed", batches, open, callbacks)
	}
	return nil
}

// riverCreateSchema creates the run's schema and returns the function that
// drops it (on a fresh connection, so that a cancelled run context cannot
// prevent it).
func riverCreateSchema(ctx context.Context, database, schema string) (drop func() error, err error) {
	ident := pgx.Identifier{schema}.Sanitize()
	admin, err := pgx.Connect(ctx, database)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+ident)
	_ = admin.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", schema, err)
	}
	return func() error {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		conn, err := pgx.Connect(dctx, database)
		if err == nil {
			_, err = conn.Exec(dctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
			_ = conn.Close(dctx)
		}
		if err != nil {
			return fmt.Errorf("dropping schema %s: %w", schema, err)
		}
		return nil
	}, nil
}
