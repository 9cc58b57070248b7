package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// asynqTunedTaskCheckInterval is TaskCheckInterval under --tuned. asynq's
// default is 1s: a server that finds its queues empty sleeps 0.5-1.5 s before
// looking again, so servers started before the first enqueue pick the first
// tasks up that late.
const asynqTunedTaskCheckInterval = 10 * time.Millisecond

// asynqTaskType is the task's type name.
const asynqTaskType = "peers:noop"

type asynqFlags struct {
	common
	redisAddr  string
	redisDB    int
	tuned      bool
	submitters int
	retention  time.Duration
	output     bool
	config     string // the report's config
}

func runAsynq(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f asynqFlags
	fs := newFlagSet("asynq", "asynq (Redis): enqueue N no-op tasks from several goroutines (asynq has no batch enqueue),\n"+
		"work them in W asynq.Servers (Concurrency C each) on a fresh queue in its own Redis logical\n"+
		"database, and stop when all N are completed (a counter in the handler, confirmed by the\n"+
		"queue's Completed count from asynq.Inspector). Every key of the queue is deleted at the end.", stdout)
	f.common.register(fs.FlagSet)
	fs.StringVar(&f.redisAddr, "redis", "127.0.0.1:6379", "Redis address")
	fs.IntVar(&f.redisDB, "redis-db", 14, "Redis logical database to use")
	fs.BoolVar(&f.tuned, "tuned", false, fmt.Sprintf("TaskCheckInterval %s (default: asynq's 1s)", asynqTunedTaskCheckInterval))
	fs.IntVar(&f.submitters, "submitters", 16, "goroutines calling Client.Enqueue concurrently")
	fs.DurationVar(&f.retention, "retention", time.Hour, "keep completed tasks (and their results) this long, as warren keeps results;\n0 deletes each task when done, and then only ProcessedTotal can confirm completion")
	fs.BoolVar(&f.output, "output", true, "write the payload back as the task's result (ResultWriter); needs --retention > 0 to be kept")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return errUsage{err}
	}
	switch {
	case f.submitters < 1:
		return errUsage{fmt.Errorf("--submitters must be >= 1, got %d", f.submitters)}
	case f.redisDB < 0:
		return errUsage{fmt.Errorf("--redis-db must be >= 0, got %d", f.redisDB)}
	case f.retention < 0:
		return errUsage{fmt.Errorf("--retention must be >= 0, got %s", f.retention)}
	}
	f.config = "defaults"
	if f.tuned {
		f.config = "tuned"
	}
	f.config = configLabel(fs, f.config, reportedFlags...)
	rep, submit, total, err := asynqBench(ctx, f, progress{stderr, "asynq"})
	if err != nil {
		return err
	}
	return finish(rep, submit, total, f.json, stdout)
}

func asynqBench(parent context.Context, f asynqFlags, p progress) (rep report, submit, total time.Duration, err error) {
	rep = report{System: "asynq", Config: f.config, Tasks: f.tasks, Workers: f.workers, Concurrency: f.concurrency}
	taskCheck := time.Duration(0) // asynq's default, 1s
	if f.tuned {
		taskCheck = asynqTunedTaskCheckInterval
	}

	ctx, cancel := context.WithTimeout(parent, f.timeout)
	defer cancel()
	fail := func(e error) error {
		if c := ctxErr(parent, ctx, f.timeout); c != nil {
			return c
		}
		return e
	}

	queue := "peers-" + randomTag()
	connOpt := asynq.RedisClientOpt{Addr: f.redisAddr, DB: f.redisDB}

	// 1. The queue's keys are deleted at the end whatever happens.
	rdb := redis.NewClient(&redis.Options{Addr: f.redisAddr, DB: f.redisDB})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return rep, 0, 0, fail(fmt.Errorf("connecting to Redis: %w", err))
	}
	defer func() {
		n, derr := deleteAsynqQueue(rdb, queue)
		if derr != nil {
			if err == nil {
				err = fmt.Errorf("deleting queue %s: %w", queue, derr)
			}
			return
		}
		p.printf("queue %s deleted (%d keys)", queue, n)
	}()

	// 2. W servers, each with its own Redis connection pool.
	var (
		handled   atomic.Int64
		failed    atomic.Int64
		allDone   = make(chan struct{})
		doneOnce  sync.Once
		servers   []*asynq.Server
		errorOnce sync.Once
		taskErr   error
	)
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(_ context.Context, t *asynq.Task) error {
		if f.output {
			if _, err := t.ResultWriter().Write(t.Payload()); err != nil {
				return err
			}
		}
		if handled.Add(1) >= int64(f.tasks) {
			doneOnce.Do(func() { close(allDone) })
		}
		return nil
	})
	defer func() {
		for _, s := range servers {
			s.Shutdown()
		}
	}()
	for range f.workers {
		s := asynq.NewServer(connOpt, asynq.Config{
			Concurrency:       f.concurrency,
			Queues:            map[string]int{queue: 1},
			TaskCheckInterval: taskCheck,
			LogLevel:          asynq.ErrorLevel,
			ShutdownTimeout:   5 * time.Second,
			ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, _ *asynq.Task, e error) {
				failed.Add(1)
				errorOnce.Do(func() { taskErr = e })
			}),
		})
		if err := s.Start(mux); err != nil {
			return rep, 0, 0, fail(fmt.Errorf("starting asynq server: %w", err))
		}
		servers = append(servers, s)
	}

	client := asynq.NewClient(asynq.RedisClientOpt{Addr: f.redisAddr, DB: f.redisDB, PoolSize: max(f.submitters, 10)})
	defer client.Close()
	inspector := asynq.NewInspector(connOpt)
	defer inspector.Close()

	cfgNote := "TaskCheckInterval 1s (default)"
	if taskCheck > 0 {
		cfgNote = "TaskCheckInterval " + taskCheck.String()
	}
	p.printf("%d servers x Concurrency %d, %s, retention %s, output %t; enqueueing %d tasks from %d goroutines on queue %s (db %d)",
		f.workers, f.concurrency, cfgNote, f.retention, f.output, f.tasks, f.submitters, queue, f.redisDB)

	opts := []asynq.Option{asynq.Queue(queue)}
	if f.retention > 0 {
		opts = append(opts, asynq.Retention(f.retention))
	}

	// 3. Fan out.
	start := time.Now()
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range f.submitters {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= f.tasks {
					return nil
				}
				if _, err := client.EnqueueContext(gctx, asynq.NewTask(asynqTaskType, payload(i)), opts...); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return rep, 0, 0, fail(fmt.Errorf("enqueueing tasks: %w", err))
	}
	submit = time.Since(start)
	p.printf("enqueued %d tasks in %.3f s", f.tasks, submit.Seconds())

	// 4. Fan in: wait for the handler counter to reach N, then for the
	// queue's stats to show all N completed.
	done := func(info *asynq.QueueInfo) bool {
		if f.retention > 0 {
			return info.Completed >= f.tasks
		}
		return info.ProcessedTotal >= f.tasks
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			return rep, 0, 0, fail(ctx.Err())
		case <-allDone:
			break wait
		case <-ticker.C:
			if n := failed.Load(); n > 0 {
				return rep, 0, 0, fmt.Errorf("%d task attempts failed, the first: %w", n, taskErr)
			}
			p.printf("%d of %d handled (%.1f s)", handled.Load(), f.tasks, time.Since(start).Seconds())
		}
	}
	for {
		info, err := inspector.GetQueueInfo(queue)
		if err != nil {
			return rep, 0, 0, fail(fmt.Errorf("reading queue stats: %w", err))
		}
		if done(info) {
			break
		}
		select {
		case <-ctx.Done():
			return rep, 0, 0, fail(ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	total = time.Since(start)
	if n := failed.Load(); n > 0 {
		return rep, 0, 0, fmt.Errorf("%d task attempts failed, the first: %w", n, taskErr)
	}
	p.printf("all %d completed in %.3f s", f.tasks, total.Seconds())

	// 5. Outside the timing: one task's result is its payload.
	if f.output && f.retention > 0 {
		infos, err := inspector.ListCompletedTasks(queue, asynq.PageSize(1))
		if err != nil {
			return rep, 0, 0, fail(fmt.Errorf("reading a task's result: %w", err))
		}
		if len(infos) != 1 || !jsonEqual(infos[0].Payload, infos[0].Result) {
			return rep, 0, 0, fmt.Errorf("a completed task's result is not its payload (%d tasks listed)", len(infos))
		}
	}
	return rep, submit, total, nil
}

// deleteAsynqQueue removes every key of the queue (tasks, completed set,
// stats, lease, ...: all named asynq:{queue}:...) and the queue's entry in
// the asynq:queues set. It runs after the servers have shut down.
func deleteAsynqQueue(rdb *redis.Client, queue string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deleted := 0
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := rdb.Unlink(ctx, batch...).Result()
		deleted += int(n)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) >= 1000 {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return deleted, err
	}
	if err := flush(); err != nil {
		return deleted, err
	}
	if err := rdb.SRem(ctx, "asynq:queues", queue).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return deleted, err
	}
	return deleted, nil
}
