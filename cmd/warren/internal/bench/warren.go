package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// oneTaskJobs is how many one-task jobs the last round runs, one after
// another, after the big job.
const oneTaskJobs = 50

// run is one warren round in progress: the server's hooks feed it.
type run struct {
	firstResult       atomic.Int64 // unix nanos
	batches, messages atomic.Int64
	jobID             atomic.Value // string: the big job's id
	closed            chan warren.JobState
	mu                sync.Mutex
	oneClosed         map[string]chan warren.JobState // the one-task jobs closing, by id
}

func (r *run) hooks() server.Hooks {
	return server.Hooks{
		OnBatch: func(size int, rep store.ApplyReport) {
			r.batches.Add(1)
			r.messages.Add(int64(size))
			if rep.Applied > 0 {
				r.firstResult.CompareAndSwap(0, time.Now().UnixNano())
			}
		},
		OnJobClosed: func(id string, state warren.JobState) {
			r.mu.Lock()
			c := r.oneClosed[id]
			r.mu.Unlock()
			if c != nil {
				c <- state
				return
			}
			if big := r.jobID.Load().(string); id == big || big == "" {
				select {
				case r.closed <- state:
				default:
				}
			}
		},
	}
}

// runWarren runs one job of cfg.Tasks echo tasks through the warren
// server, the one users run, with cfg.Workers workers in this process,
// and fills rep with what it measured; with oneTasks it then runs the
// one-task jobs.
func runWarren(ctx context.Context, cfg Config, names protocol.Names, rep *Report, oneTasks bool) (err error) {
	r := &run{closed: make(chan warren.JobState, 1), oneClosed: map[string]chan warren.JobState{}}
	r.jobID.Store("")
	srv, err := server.New(server.Config{AMQPURL: cfg.AMQPURL, DatabaseURL: cfg.DatabaseURL, Prefix: names.Prefix,
		Listen: "127.0.0.1:0", RelayBatchSize: cfg.RelayBatch, AggregatorBatchSize: cfg.AggregatorBatch,
		Logger: cfg.Logger, Hooks: r.hooks()})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	// Stop the workers, then the server, before the store goes.
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers+1)
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
			return err
		}
		w.Handle("echo", echoAfter(cfg.TaskDuration))
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	if err := waitConsumers(ctx, cfg.AMQPURL, names, cfg.Workers); err != nil {
		return err
	}
	st := srv.Store()

	cpu0 := cpuTime()
	start := time.Now()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "none", BatchSize: cfg.BatchSize}}, payloads(cfg.Tasks))
	if err != nil {
		return err
	}
	r.jobID.Store(job.ID)
	submitted := time.Now()
	srv.WakeRelay()

	var state warren.JobState
	select {
	case state = <-r.closed:
	case e := <-errs:
		return earlyStop(e)
	case <-srv.Done():
		return fmt.Errorf("the server stopped early: %w", srv.Stop())
	case <-ctx.Done():
		return ctx.Err()
	}
	end := time.Now()
	rep.CPUPerTaskUs = round1(float64(cpuTime()-cpu0) / float64(time.Microsecond) / float64(cfg.Tasks))
	if state != warren.JobCompleted {
		return fmt.Errorf("job %s closed %s", job.ID, state)
	}
	rep.SubmitS = math.Round(submitted.Sub(start).Seconds()*1000) / 1000
	if fr := r.firstResult.Load(); fr != 0 {
		rep.FirstResultS = math.Round(time.Unix(0, fr).Sub(start).Seconds()*1000) / 1000
	}
	rep.TotalS = math.Round(end.Sub(start).Seconds()*1000) / 1000
	rep.WarrenTasksPerS = float64(cfg.Tasks) / end.Sub(start).Seconds()
	rep.AggregatorBatches = int(r.batches.Load())
	rep.MeanBatchMessages = round1(float64(r.messages.Load()) / float64(max(r.batches.Load(), 1)))

	lat, err := taskLatencies(ctx, st, job.ID, cfg.Tasks)
	if err != nil {
		return err
	}
	rep.P50Ms = round1(ms(percentile(lat, 50)))
	rep.P99Ms = round1(ms(percentile(lat, 99)))
	if !oneTasks {
		return nil
	}

	// One-task jobs, one at a time: the latency of a small job from its
	// submission to its terminal state, reduced result written.
	lat = lat[:0]
	for range oneTaskJobs {
		c := make(chan warren.JobState, 1)
		id := ulid.Make().String()
		r.mu.Lock()
		r.oneClosed[id] = c
		r.mu.Unlock()
		start := time.Now()
		if _, _, err := st.CreateJob(ctx, store.NewJob{ID: id, Type: "echo", Policy: warren.Policy{Reduce: "collect", BatchSize: cfg.BatchSize}},
			payloads(1)); err != nil {
			return err
		}
		srv.WakeRelay()
		select {
		case state := <-c:
			if state != warren.JobCompleted {
				return fmt.Errorf("one-task job %s closed %s", id, state)
			}
		case e := <-errs:
			return earlyStop(e)
		case <-srv.Done():
			return fmt.Errorf("the server stopped early: %w", srv.Stop())
		case <-time.After(30 * time.Second):
			return fmt.Errorf("one-task job %s did not close within 30s", id)
		case <-ctx.Done():
			return ctx.Err()
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rep.OneTaskJobs = oneTaskJobs
	rep.OneTaskP50Ms = round1(ms(percentile(lat, 50)))
	rep.OneTaskP99Ms = round1(ms(percentile(lat, 99)))
	return nil
}

// earlyStop is the error of a worker that stopped before the round ended.
func earlyStop(err error) error {
	if err == nil {
		return errors.New("a worker stopped early")
	}
	return err
}

// taskLatencies checks that every task of the job completed with its
// queued_at and finished_at, and returns their queued -> recorded
// latencies, sorted.
func taskLatencies(ctx context.Context, st store.Store, jobID string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	cursor := ""
	for {
		page, next, err := st.ListTasks(ctx, jobID, store.ListTasksOpts{Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range page {
			if t.State != warren.TaskCompleted || t.QueuedAt == nil || t.FinishedAt == nil {
				return nil, fmt.Errorf("task %d of job %s is %s, want completed with queued_at and finished_at", t.TaskID, jobID, t.State)
			}
			lat = append(lat, t.FinishedAt.Sub(*t.QueuedAt))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(lat) != n {
		return nil, fmt.Errorf("job %s has %d tasks recorded, want %d", jobID, len(lat), n)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, nil
}

// echoAfter is the benchmark's handler: the payload is the result, after
// sleeping d (no-op tasks when d is 0).
func echoAfter(d time.Duration) worker.HandlerFunc {
	if d == 0 {
		return func(_ context.Context, t worker.Task) (any, error) { return t.Payload, nil }
	}
	return func(_ context.Context, t worker.Task) (any, error) {
		time.Sleep(d)
		return t.Payload, nil
	}
}

// payloads yields n tiny task payloads.
func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`), nil) {
				return
			}
		}
	}
}

// waitConsumers waits until the work queue has at least n consumers, so
// the measurement starts with every worker ready.
func waitConsumers(ctx context.Context, amqpURL string, names protocol.Names, n int) error {
	conn, err := broker.Dial(ctx, amqpURL, "warren bench (watch) "+names.Prefix)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		var q amqp.Queue
		q, err = ch.QueueDeclarePassive(names.TasksQueue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workers not consuming %s after 15s (%d of %d)", names.TasksQueue, q.Consumers, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
