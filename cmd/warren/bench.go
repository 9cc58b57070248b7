package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/open"
	"github.com/warrenhq/warren/worker"
)

// benchFlags are `warren bench`'s settings.
type benchFlags struct {
	amqpURL     string
	database    string
	tasks       int
	workers     int
	batchSize   int
	concurrency int
	rounds      int
	prefetch    int
	relayBatch  int
	aggBatch    int
	json        bool
	cpuProfile  string
	memProfile  string
}

// benchPrefetches are the prefetch settings the ceiling run tries.
var benchPrefetches = []int{10, 50, 200}

// benchReport is what `warren bench --json` prints.
type benchReport struct {
	Tasks             int                `json:"tasks"`
	Workers           int                `json:"workers"`
	BatchSize         int                `json:"batch_size"`
	CeilingTasksPerS  float64            `json:"ceiling_tasks_per_s"`
	CeilingPrefetch   int                `json:"ceiling_prefetch"`
	WarrenTasksPerS   float64            `json:"warren_tasks_per_s"`
	Ratio             float64            `json:"ratio"`
	SubmitS           float64            `json:"submit_s"`
	FirstResultS      float64            `json:"first_result_s"`
	TotalS            float64            `json:"total_s"`
	P50Ms             float64            `json:"p50_ms"`
	P99Ms             float64            `json:"p99_ms"`
	CPUPerTaskUs      float64            `json:"warren_cpu_us_per_task"`
	AggregatorBatches int                `json:"aggregator_batches"`
	MeanBatchMessages float64            `json:"aggregator_mean_batch_messages"`
	OneTaskJobs       int                `json:"one_task_jobs"`
	OneTaskP50Ms      float64            `json:"one_task_p50_ms"`
	OneTaskP99Ms      float64            `json:"one_task_p99_ms"`
	PeakRSSMB         float64            `json:"peak_rss_mb"`
	PeakRSSNote       string             `json:"peak_rss_note"`
	CeilingTrialsPerS map[string]float64 `json:"ceiling_trials_tasks_per_s"`
	RoundsCeiling     []float64          `json:"rounds_ceiling_tasks_per_s"`
	RoundsWarren      []float64          `json:"rounds_warren_tasks_per_s"`
}

func runBench(ctx context.Context, args []string, env *environment) error {
	var f benchFlags
	fs := newFlagSet("bench", "Measure, in one process against the local RabbitMQ, the broker's own ceiling for one message per task\n"+
		"(persistent tasks with confirms -> consumers publish a confirmed result, then ack -> one collector; quorum queues;\n"+
		"prefetch 10, 50 and 200 tried, the best kept), then warren end to end with no-op echo tasks (store, relay,\n"+
		"W workers, aggregator, job closed), in --rounds interleaved rounds, and print the median throughputs, their\n"+
		"ratio, submit time, time to first result, p50/p99 task latency (queued -> recorded), CPU per task, one-task\n"+
		"job latency and the process's peak RSS. Everything uses fresh exchange and queue names, deleted afterwards.", env)
	fs.StringVar(&f.amqpURL, "amqp-url", orDefault(env.getenv("WARREN_AMQP_URL"), broker.DefaultURL), "RabbitMQ URL (env WARREN_AMQP_URL)")
	fs.StringVar(&f.database, "database", "", "job store URL (default: a temporary SQLite file, removed afterwards)")
	fs.IntVar(&f.tasks, "tasks", 20000, "tasks per run")
	fs.IntVar(&f.workers, "workers", 4, "workers (consumers in the ceiling run)")
	fs.IntVar(&f.batchSize, "batch-size", 1, "the warren job's batch_size: tasks per task message (the ceiling run always sends one message per task)")
	fs.IntVar(&f.concurrency, "concurrency", 16, "handler concurrency of each warren worker")
	fs.IntVar(&f.prefetch, "prefetch", 0, "prefetch of each warren worker (default 2 x --concurrency)")
	fs.IntVar(&f.relayBatch, "relay-batch", relay.DefaultBatchSize, "tasks the relay claims and publishes per outbox round trip")
	fs.IntVar(&f.aggBatch, "aggregator-batch", aggregator.DefaultBatchSize, "result messages recorded per store transaction")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds of (ceiling, warren), interleaved; the medians are reported")
	fs.BoolVar(&f.json, "json", false, "print one JSON object and nothing else on stdout")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the rounds (ceiling and warren runs) to this file")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a Go allocation profile (allocs) to this file at the end")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	switch {
	case f.tasks < 1:
		return fmt.Errorf("--tasks must be >= 1, got %d", f.tasks)
	case f.workers < 1:
		return fmt.Errorf("--workers must be >= 1, got %d", f.workers)
	case f.concurrency < 1:
		return fmt.Errorf("--concurrency must be >= 1, got %d", f.concurrency)
	case f.prefetch < 0 || (f.prefetch > 0 && f.prefetch < f.concurrency):
		return fmt.Errorf("--prefetch must be at least --concurrency (%d), got %d", f.concurrency, f.prefetch)
	case f.relayBatch < 1 || f.aggBatch < 1:
		return fmt.Errorf("--relay-batch and --aggregator-batch must be >= 1")
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be >= 1, got %d", f.rounds)
	case f.batchSize < 1 || f.batchSize > warren.MaxBatchSize:
		return fmt.Errorf("--batch-size must be between 1 and %d, got %d", warren.MaxBatchSize, f.batchSize)
	}
	return bench(ctx, f, env)
}

func bench(ctx context.Context, f benchFlags, env *environment) (err error) {
	progress := func(format string, a ...any) { fmt.Fprintf(env.stderr, "warren bench: "+format+"\n", a...) }
	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	ceilNames := protocol.NamesFor("warren-bench-" + tag + "-ceiling.")
	warrenNames := protocol.NamesFor("warren-bench-" + tag + ".")
	defer func() {
		for _, n := range []protocol.Names{ceilNames, warrenNames} {
			if derr := deleteBenchTopology(f.amqpURL, n); derr != nil && err == nil {
				err = derr
			}
		}
	}()

	rep := benchReport{Tasks: f.tasks, Workers: f.workers, BatchSize: f.batchSize, CeilingTrialsPerS: map[string]float64{},
		PeakRSSNote: "one process running all parts (broker clients, store, relay, aggregator, workers)"}

	// 1. The broker's ceiling.
	trialN := max(1, f.tasks/2)
	for _, p := range benchPrefetches {
		progress("ceiling: %d tasks, %d consumers, prefetch %d", trialN, f.workers, p)
		d, err := benchCeiling(ctx, f.amqpURL, ceilNames, trialN, f.workers, p)
		if err != nil {
			return fmt.Errorf("ceiling run (prefetch %d): %w", p, err)
		}
		tps := float64(trialN) / d.Seconds()
		rep.CeilingTrialsPerS[strconv.Itoa(p)] = round1(tps)
		progress("ceiling: prefetch %d: %.0f tasks/s", p, tps)
		if tps > rep.CeilingTasksPerS {
			rep.CeilingTasksPerS, rep.CeilingPrefetch = tps, p
		}
	}
	// 2. Rounds of the ceiling at the best prefetch, then warren end to
	// end: interleaved, so that both see the same machine, and medians,
	// so that one disturbed run does not decide.
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	var ceilings []float64
	var rounds []benchReport
	for i := range f.rounds {
		progress("round %d/%d: ceiling, %d tasks at the best prefetch %d", i+1, f.rounds, f.tasks, rep.CeilingPrefetch)
		d, err := benchCeiling(ctx, f.amqpURL, ceilNames, f.tasks, f.workers, rep.CeilingPrefetch)
		if err != nil {
			return fmt.Errorf("ceiling run (prefetch %d): %w", rep.CeilingPrefetch, err)
		}
		ceilings = append(ceilings, float64(f.tasks)/d.Seconds())
		progress("round %d/%d: ceiling: %.0f tasks/s", i+1, f.rounds, ceilings[i])

		rf := f
		if f.database == "" {
			dir, err := os.MkdirTemp("", "warren-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			rf.database = "sqlite://" + filepath.Join(dir, "warren.db")
		}
		progress("round %d/%d: warren: %d echo tasks, %d workers (concurrency %d), batch size %d, store %s",
			i+1, f.rounds, f.tasks, f.workers, f.concurrency, f.batchSize, redactDB(rf.database))
		var r benchReport
		if err := benchWarren(ctx, rf, warrenNames, log, &r, i == f.rounds-1); err != nil {
			return fmt.Errorf("warren run: %w", err)
		}
		progress("round %d/%d: warren: %.0f tasks/s", i+1, f.rounds, r.WarrenTasksPerS)
		rep.RoundsCeiling = append(rep.RoundsCeiling, round1(ceilings[i]))
		rep.RoundsWarren = append(rep.RoundsWarren, round1(r.WarrenTasksPerS))
		rounds = append(rounds, r)
	}
	if err := stopProfile(); err != nil {
		return err
	}
	if f.memProfile != "" {
		if err := writeAllocProfile(f.memProfile); err != nil {
			return err
		}
	}
	// The detailed figures are those of the round with the median warren
	// throughput; the one-task jobs ran in the last round.
	last := rounds[len(rounds)-1]
	med := rounds[medianIndex(len(rounds), func(i int) float64 { return rounds[i].WarrenTasksPerS })]
	rep.CeilingTasksPerS = ceilings[medianIndex(len(ceilings), func(i int) float64 { return ceilings[i] })]
	rep.WarrenTasksPerS = med.WarrenTasksPerS
	rep.SubmitS, rep.FirstResultS, rep.TotalS = med.SubmitS, med.FirstResultS, med.TotalS
	rep.P50Ms, rep.P99Ms, rep.CPUPerTaskUs = med.P50Ms, med.P99Ms, med.CPUPerTaskUs
	rep.AggregatorBatches, rep.MeanBatchMessages = med.AggregatorBatches, med.MeanBatchMessages
	rep.OneTaskJobs, rep.OneTaskP50Ms, rep.OneTaskP99Ms = last.OneTaskJobs, last.OneTaskP50Ms, last.OneTaskP99Ms
	progress("median: ceiling %.0f tasks/s, warren %.0f tasks/s", rep.CeilingTasksPerS, rep.WarrenTasksPerS)

	// 3. Peak memory.
	rep.PeakRSSMB = round1(peakRSSMB())

	rep.CeilingTasksPerS = round1(rep.CeilingTasksPerS)
	rep.WarrenTasksPerS = round1(rep.WarrenTasksPerS)
	rep.Ratio = math.Round(rep.WarrenTasksPerS/rep.CeilingTasksPerS*1000) / 1000
	if f.json {
		out, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, string(out))
		return nil
	}
	printBench(env.stdout, rep)
	return nil
}

func printBench(w io.Writer, r benchReport) {
	per := "one message per task"
	if r.BatchSize > 1 {
		per = fmt.Sprintf("warren with batch_size %d (the ceiling: one message per task)", r.BatchSize)
	}
	fmt.Fprintf(w, "warren bench: %d tasks, %d workers, %s\n\n", r.Tasks, r.Workers, per)
	row := func(k, v string) { fmt.Fprintf(w, "  %-34s %s\n", k, v) }
	row("broker ceiling", fmt.Sprintf("%.0f tasks/s (prefetch %d)", r.CeilingTasksPerS, r.CeilingPrefetch))
	row("warren end to end", fmt.Sprintf("%.0f tasks/s", r.WarrenTasksPerS))
	row("ratio warren/ceiling", fmt.Sprintf("%.2f (medians of %d interleaved rounds)", r.Ratio, len(r.RoundsWarren)))
	row("rounds: ceiling", fmt.Sprint(r.RoundsCeiling))
	row("rounds: warren", fmt.Sprint(r.RoundsWarren))
	row("submit (CreateJob)", fmt.Sprintf("%.3f s", r.SubmitS))
	row("warren CPU per task", fmt.Sprintf("%.1f µs (all of warren's parts, this process)", r.CPUPerTaskUs))
	row("aggregator transactions", fmt.Sprintf("%d, %.1f messages each on average", r.AggregatorBatches, r.MeanBatchMessages))
	row("time to first result", fmt.Sprintf("%.3f s", r.FirstResultS))
	row("submit to job closed", fmt.Sprintf("%.3f s", r.TotalS))
	row("task latency queued->recorded p50", fmt.Sprintf("%.1f ms", r.P50Ms))
	row("task latency queued->recorded p99", fmt.Sprintf("%.1f ms", r.P99Ms))
	row(fmt.Sprintf("one-task job p50 (%d jobs)", r.OneTaskJobs), fmt.Sprintf("%.1f ms submit -> closed", r.OneTaskP50Ms))
	row(fmt.Sprintf("one-task job p99 (%d jobs)", r.OneTaskJobs), fmt.Sprintf("%.1f ms", r.OneTaskP99Ms))
	row("peak RSS", fmt.Sprintf("%.1f MB, %s", r.PeakRSSMB, r.PeakRSSNote))
}

// startCPUProfile starts a CPU profile into path ("" for none) and returns
// the function that stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return fh.Close()
	}, nil
}

// medianIndex returns the index of the median of n values (the lower
// one for an even n); value(i) is the i-th.
func medianIndex(n int, value func(i int) float64) int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return value(idx[a]) < value(idx[b]) })
	return idx[(n-1)/2]
}

// writeAllocProfile writes the allocs profile (every allocation since the
// process started) to path.
func writeAllocProfile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(fh, 0); err != nil {
		_ = fh.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	return fh.Close()
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// benchCeiling runs n tasks through the broker without warren: a confirmed
// persistent publish per task, workers consumers (each on its own
// connection and channel, prefetch) that publish a confirmed persistent
// result and then ack the task, and one collector that acks the results.
// It returns the time from the first publish to the last result collected.
func benchCeiling(ctx context.Context, amqpURL string, names protocol.Names, n, workers, prefetch int) (_ time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns []*amqp.Connection
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dial := func(name string) (*amqp.Connection, error) {
		c, err := broker.Dial(ctx, amqpURL, "warren bench ("+name+") "+names.Prefix)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	ctl, err := dial("ceiling control")
	if err != nil {
		return 0, err
	}
	if err := broker.DeclareTopology(ctl, names, nil); err != nil {
		return 0, err
	}
	// Leftovers of an earlier trial (there should be none) would skew it.
	if ch, err := ctl.Channel(); err == nil {
		for _, q := range []string{names.TasksQueue, names.ResultsQueue} {
			_, _ = ch.QueuePurge(q, false)
		}
		_ = ch.Close()
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errc := make(chan error, workers+2)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		cancel()
	}

	// Collector.
	colConn, err := dial("ceiling collector")
	if err != nil {
		return 0, err
	}
	colCh, results, err := broker.Consume(colConn, names.ResultsQueue, "", 1000)
	if err != nil {
		return 0, err
	}
	done := make(chan time.Time, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, unacked := 0, 0
		for {
			select {
			case <-ctx.Done():
				return
			case d, ok := <-results:
				if !ok {
					fail(errors.New("collector: deliveries closed"))
					return
				}
				got++
				unacked++
				if unacked >= 100 || got == n {
					if err := colCh.Ack(d.DeliveryTag, true); err != nil {
						fail(fmt.Errorf("collector ack: %w", err))
						return
					}
					unacked = 0
				}
				if got == n {
					done <- time.Now()
					return
				}
			}
		}
	}()

	// Consumers.
	for i := range workers {
		conn, err := dial(fmt.Sprintf("ceiling consumer %d", i))
		if err != nil {
			return 0, err
		}
		pub, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: max(prefetch, 1)})
		if err != nil {
			return 0, err
		}
		ch, tasks, err := broker.Consume(conn, names.TasksQueue, "", prefetch)
		if err != nil {
			_ = pub.Close()
			return 0, err
		}
		type pending struct {
			c   *broker.Confirmation
			tag uint64
		}
		inflight := make(chan pending, prefetch)
		wg.Add(2)
		go func() { // publish a result per task
			defer wg.Done()
			defer close(inflight)
			for {
				select {
				case <-ctx.Done():
					return
				case d, ok := <-tasks:
					if !ok {
						return
					}
					c, err := pub.Publish(ctx, names.ResultsExchange, protocol.RoutingKeyResult, amqp.Publishing{
						MessageId: d.MessageId, DeliveryMode: amqp.Persistent, ContentType: "application/json",
						Body: []byte(`{"ok":true}`),
					})
					if err != nil {
						if ctx.Err() == nil {
							fail(fmt.Errorf("consumer publish: %w", err))
						}
						return
					}
					select {
					case inflight <- pending{c, d.DeliveryTag}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
		go func() { // ack each task once its result is confirmed
			defer wg.Done()
			defer pub.Close()
			for p := range inflight {
				if err := p.c.Wait(ctx); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("consumer confirm: %w", err))
					}
					return
				}
				if err := ch.Ack(p.tag, false); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("consumer ack: %w", err))
					}
					return
				}
			}
		}()
	}

	// Publisher of the tasks, pipelined within the confirm window.
	pubConn, err := dial("ceiling publisher")
	if err != nil {
		return 0, err
	}
	pub, err := broker.NewPublisher(pubConn, &broker.PublisherOptions{Window: broker.DefaultConfirmWindow})
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	confirms := make(chan *broker.Confirmation, broker.DefaultConfirmWindow)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range confirms {
			if err := c.Wait(ctx); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("task confirm: %w", err))
				}
				return
			}
		}
	}()
	start := time.Now()
	body := make([]byte, 0, 64)
	func() {
		defer close(confirms)
		for i := range n {
			body = strconv.AppendInt(append(body[:0], `{"i":`...), int64(i), 10)
			body = append(body, '}')
			c, err := pub.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, amqp.Publishing{
				MessageId: strconv.Itoa(i), DeliveryMode: amqp.Persistent, ContentType: "application/json",
				Body: append([]byte(nil), body...),
			})
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("task publish: %w", err))
				}
				return
			}
			select {
			case confirms <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case end := <-done:
		return end.Sub(start), nil
	case err := <-errc:
		return 0, err
	case <-ctx.Done():
		select {
		case err := <-errc:
			return 0, err
		default:
		}
		return 0, ctx.Err()
	}
}

// benchWarren runs one job of f.tasks echo tasks through an in-process
// warren: store, relay, aggregator and f.workers workers.
func benchWarren(ctx context.Context, f benchFlags, names protocol.Names, log *slog.Logger, rep *benchReport, oneTaskJobs bool) (err error) {
	st, err := open.Open(ctx, f.database)
	if err != nil {
		return err
	}
	defer st.Close()

	pubConn, err := broker.Dial(ctx, f.amqpURL, "warren bench (relay) "+names.Prefix)
	if err != nil {
		return err
	}
	defer pubConn.Close()
	conConn, err := broker.Dial(ctx, f.amqpURL, "warren bench (aggregator) "+names.Prefix)
	if err != nil {
		return err
	}
	defer conConn.Close()
	if err := broker.DeclareTopology(conConn, names, nil); err != nil {
		return err
	}
	pub, err := broker.NewPublisher(pubConn, &broker.PublisherOptions{Logger: log})
	if err != nil {
		return err
	}
	defer pub.Close()
	// Stop and wait for every component before the connections close.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, f.workers+2)
	defer func() {
		stop()
		wg.Wait()
		close(errs)
		for e := range errs {
			if e != nil && err == nil {
				err = e
			}
		}
	}()

	rl, err := relay.New(relay.Config{Store: st, Publisher: pub, Names: names, Logger: log, BatchSize: f.relayBatch})
	if err != nil {
		return err
	}
	var firstResult atomic.Int64 // unix nanos
	var batches, batchMsgs atomic.Int64
	closed := make(chan warren.JobState, 1)
	var jobID atomic.Value
	jobID.Store("")
	// The one-task jobs closing, by id.
	var oneMu sync.Mutex
	oneClosed := map[string]chan warren.JobState{}
	agg, err := aggregator.New(aggregator.Config{Store: st, Conn: conConn, Names: names, Logger: log, BatchSize: f.aggBatch,
		Hooks: aggregator.Hooks{
			OnBatch: func(size int, r store.ApplyReport) {
				batches.Add(1)
				batchMsgs.Add(int64(size))
				if r.Applied > 0 {
					firstResult.CompareAndSwap(0, time.Now().UnixNano())
				}
			},
			OnJobClosed: func(id string, state warren.JobState) {
				oneMu.Lock()
				c := oneClosed[id]
				oneMu.Unlock()
				if c != nil {
					c <- state
					return
				}
				if id == jobID.Load().(string) || jobID.Load().(string) == "" {
					select {
					case closed <- state:
					default:
					}
				}
			},
		}})
	if err != nil {
		return err
	}
	wg.Add(2)
	go func() { defer wg.Done(); errs <- ignoreCancel(rl.Run(runCtx)) }()
	go func() { defer wg.Done(); errs <- ignoreCancel(agg.Run(runCtx)) }()

	for i := range f.workers {
		w, err := worker.New(worker.Config{AMQPURL: f.amqpURL, Prefix: names.Prefix, Concurrency: f.concurrency, Prefetch: f.prefetch,
			Name: fmt.Sprintf("bench-%d", i), Logger: log})
		if err != nil {
			return err
		}
		w.Handle("echo", echo)
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	if err := waitConsumers(ctx, conConn, names.TasksQueue, f.workers); err != nil {
		return err
	}

	cpu0 := cpuTime()
	start := time.Now()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "none", BatchSize: f.batchSize}}, benchPayloads(f.tasks))
	if err != nil {
		return err
	}
	jobID.Store(job.ID)
	submitted := time.Now()
	rl.Wake()

	var state warren.JobState
	select {
	case state = <-closed:
	case e := <-errs:
		if e == nil {
			e = errors.New("a component stopped early")
		}
		return e
	case <-ctx.Done():
		return ctx.Err()
	}
	end := time.Now()
	rep.CPUPerTaskUs = round1(float64(cpuTime()-cpu0) / float64(time.Microsecond) / float64(f.tasks))
	if state != warren.JobCompleted {
		return fmt.Errorf("job %s closed %s", job.ID, state)
	}
	rep.SubmitS = math.Round(submitted.Sub(start).Seconds()*1000) / 1000
	if fr := firstResult.Load(); fr != 0 {
		rep.FirstResultS = math.Round(time.Unix(0, fr).Sub(start).Seconds()*1000) / 1000
	}
	rep.TotalS = math.Round(end.Sub(start).Seconds()*1000) / 1000
	rep.WarrenTasksPerS = float64(f.tasks) / end.Sub(start).Seconds()
	rep.AggregatorBatches = int(batches.Load())
	rep.MeanBatchMessages = round1(float64(batchMsgs.Load()) / float64(max(batches.Load(), 1)))

	lat := make([]time.Duration, 0, f.tasks)
	cursor := ""
	for {
		page, next, err := st.ListTasks(ctx, job.ID, store.ListTasksOpts{Limit: 1000, Cursor: cursor})
		if err != nil {
			return err
		}
		for _, t := range page {
			if t.State != warren.TaskCompleted || t.QueuedAt == nil || t.FinishedAt == nil {
				return fmt.Errorf("task %d of job %s is %s, want completed with queued_at and finished_at", t.TaskID, job.ID, t.State)
			}
			lat = append(lat, t.FinishedAt.Sub(*t.QueuedAt))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(lat) != f.tasks {
		return fmt.Errorf("job %s has %d tasks recorded, want %d", job.ID, len(lat), f.tasks)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rep.P50Ms = round1(ms(percentile(lat, 50)))
	rep.P99Ms = round1(ms(percentile(lat, 99)))

	if !oneTaskJobs {
		return nil
	}
	// One-task jobs, one at a time: the latency of a small job from its
	// submission to its terminal state, reduced result written.
	lat = lat[:0]
	for range benchOneTaskJobs {
		c := make(chan warren.JobState, 1)
		id := ulid.Make().String()
		oneMu.Lock()
		oneClosed[id] = c
		oneMu.Unlock()
		start := time.Now()
		if _, _, err := st.CreateJob(ctx, store.NewJob{ID: id, Type: "echo", Policy: warren.Policy{Reduce: "collect", BatchSize: f.batchSize}},
			benchPayloads(1)); err != nil {
			return err
		}
		rl.Wake()
		select {
		case state := <-c:
			if state != warren.JobCompleted {
				return fmt.Errorf("one-task job %s closed %s", id, state)
			}
		case e := <-errs:
			if e == nil {
				e = errors.New("a component stopped early")
			}
			return e
		case <-time.After(30 * time.Second):
			return fmt.Errorf("one-task job %s did not close within 30s", id)
		case <-ctx.Done():
			return ctx.Err()
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rep.OneTaskJobs = benchOneTaskJobs
	rep.OneTaskP50Ms = round1(ms(percentile(lat, 50)))
	rep.OneTaskP99Ms = round1(ms(percentile(lat, 99)))
	return nil
}

// benchOneTaskJobs is how many one-task jobs the bench runs, one after
// another, after the big job.
const benchOneTaskJobs = 50

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// benchPayloads yields n tiny task payloads.
func benchPayloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`), nil) {
				return
			}
		}
	}
}

// waitConsumers waits until queue has at least n consumers, so the
// measurement starts with every worker ready.
func waitConsumers(ctx context.Context, conn *amqp.Connection, queue string, n int) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workers not consuming %s after 15s (%d of %d)", queue, q.Consumers, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// peakRSSMB is the process's peak resident set size (VmHWM) in MB, or 0
// where /proc is not available.
func peakRSSMB() float64 {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// deleteBenchTopology removes one of the bench's own topologies.
func deleteBenchTopology(amqpURL string, names protocol.Names) error {
	ctx, cancel := context.WithTimeout(context.Background(), broker.DialTimeout)
	defer cancel()
	conn, err := broker.Dial(ctx, amqpURL, "warren bench (cleanup)")
	if err != nil {
		return err
	}
	defer conn.Close()
	return broker.DeleteTopology(conn, names, protocol.DefaultRetryTiers...)
}
