// Package bench measures warren end to end against the broker's own
// ceiling, in one process and against a real RabbitMQ. The ceiling is
// what the broker allows for one message per task: persistent tasks
// published with confirms, consumers that publish a confirmed result and
// then ack, one collector; quorum queues; the best of Prefetches kept.
// Warren's run is the real server (package server, the same wiring
// `warren server` runs) with Workers workers running no-op echo tasks, on
// a fresh SQLite file unless Config.DatabaseURL names a store. Ceiling and
// warren alternate for Config.Rounds rounds, and the medians are reported,
// so that one disturbed run does not decide.
//
// `warren bench` is the command; speed targets live here, never in timed
// unit tests.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// Config says what to measure. Zero fields take the defaults named.
type Config struct {
	// AMQPURL is the RabbitMQ URL, or the URLs of the nodes of one
	// cluster separated by commas; "" means the local broker.
	AMQPURL string
	// DatabaseURL is the job store of warren's runs; "" means a fresh
	// SQLite file per round, removed afterwards.
	DatabaseURL string
	// Tasks is the number of tasks per run; 0 means 20,000.
	Tasks int
	// Workers is the number of warren workers, and of consumers in the
	// ceiling run; 0 means 4.
	Workers int
	// BatchSize is the warren job's batch_size (the ceiling always sends
	// one message per task); 0 leaves it to warren, as a job without
	// batch_size does.
	BatchSize int
	// TaskDuration is how long each warren task's handler sleeps; 0 means
	// no-op tasks. With it, the ceiling (no-op by nature) is not run.
	TaskDuration time.Duration
	// Concurrency is each warren worker's handler concurrency; 0 means 16.
	Concurrency int
	// Prefetch is each warren worker's prefetch; 0 means 2 x Concurrency.
	Prefetch int
	// RelayBatch is the server's relay batch; 0 means its default.
	RelayBatch int
	// AggregatorBatch is the server's aggregator batch; 0 means its
	// default.
	AggregatorBatch int
	// Rounds is the number of interleaved (ceiling, warren) rounds; 0
	// means 3.
	Rounds int
	// CPUProfile, when set, is where a Go CPU profile of the rounds goes.
	CPUProfile string
	// MemProfile, when set, is where the allocation profile goes at the
	// end.
	MemProfile string
	// Progress, when set, receives a line of progress at each step.
	Progress func(format string, a ...any)
	// Logger receives the warren components' logs; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.AMQPURL == "" {
		c.AMQPURL = broker.DefaultURL
	}
	def(&c.Tasks, 20000)
	def(&c.Workers, 4)
	def(&c.Concurrency, 16)
	def(&c.Rounds, 3)
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Tasks < 1, c.Workers < 1, c.Concurrency < 1, c.Rounds < 1:
		return c, errors.New("bench: Config.Tasks, Workers, Concurrency and Rounds must be >= 1")
	case c.Prefetch < 0 || (c.Prefetch > 0 && c.Prefetch < c.Concurrency):
		return c, fmt.Errorf("bench: Config.Prefetch must be at least Concurrency (%d), got %d", c.Concurrency, c.Prefetch)
	case c.BatchSize < 0 || c.BatchSize > warren.MaxBatchSize:
		return c, fmt.Errorf("bench: Config.BatchSize must be between 0 (automatic) and %d, got %d", warren.MaxBatchSize, c.BatchSize)
	case c.TaskDuration < 0:
		return c, fmt.Errorf("bench: Config.TaskDuration must be >= 0, got %s", c.TaskDuration)
	case c.RelayBatch < 0 || c.AggregatorBatch < 0:
		return c, errors.New("bench: Config.RelayBatch and AggregatorBatch must be >= 0")
	}
	return c, nil
}

// Prefetches are the prefetch settings the ceiling run tries; the best
// is kept.
var Prefetches = []int{10, 50, 200}

// Report is what a benchmark measured (`warren bench --json` prints it).
type Report struct {
	Tasks             int                `json:"tasks"`
	Workers           int                `json:"workers"`
	BatchSize         int                `json:"batch_size"` // 0: automatic
	TaskDurationMs    float64            `json:"task_duration_ms"`
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

// Run runs the benchmark cfg describes (see the package documentation)
// and returns its report. Everything it declares on the broker uses fresh
// names and is deleted before it returns.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	progress := cfg.Progress

	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	ceilNames := protocol.NamesFor("warren-bench-" + tag + "-ceiling.")
	warrenNames := protocol.NamesFor("warren-bench-" + tag + ".")
	defer func() {
		for _, n := range []protocol.Names{ceilNames, warrenNames} {
			if derr := deleteTopology(cfg.AMQPURL, n); derr != nil && err == nil {
				err = derr
			}
		}
	}()

	rep = Report{Tasks: cfg.Tasks, Workers: cfg.Workers, BatchSize: cfg.BatchSize, CeilingTrialsPerS: map[string]float64{},
		TaskDurationMs: float64(cfg.TaskDuration) / float64(time.Millisecond),
		PeakRSSNote:    "one process running all parts (broker clients, store, relay, aggregator, workers)"}

	// 1. The broker's ceiling.
	trialN := max(1, cfg.Tasks/2)
	for _, p := range Prefetches {
		if cfg.TaskDuration > 0 {
			break
		}
		progress("ceiling: %d tasks, %d consumers, prefetch %d", trialN, cfg.Workers, p)
		d, err := ceiling(ctx, cfg.AMQPURL, ceilNames, trialN, cfg.Workers, p)
		if err != nil {
			return Report{}, fmt.Errorf("ceiling run (prefetch %d): %w", p, err)
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
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return Report{}, err
	}
	var ceilings []float64
	var rounds []Report
	for i := range cfg.Rounds {
		ceilings = append(ceilings, 0)
		if cfg.TaskDuration == 0 {
			progress("round %d/%d: ceiling, %d tasks at the best prefetch %d", i+1, cfg.Rounds, cfg.Tasks, rep.CeilingPrefetch)
			d, err := ceiling(ctx, cfg.AMQPURL, ceilNames, cfg.Tasks, cfg.Workers, rep.CeilingPrefetch)
			if err != nil {
				return Report{}, fmt.Errorf("ceiling run (prefetch %d): %w", rep.CeilingPrefetch, err)
			}
			ceilings[i] = float64(cfg.Tasks) / d.Seconds()
			progress("round %d/%d: ceiling: %.0f tasks/s", i+1, cfg.Rounds, ceilings[i])
		}

		rf := cfg
		if cfg.DatabaseURL == "" {
			dir, err := os.MkdirTemp("", "warren-bench-")
			if err != nil {
				return Report{}, err
			}
			defer os.RemoveAll(dir)
			rf.DatabaseURL = "sqlite://" + filepath.Join(dir, "warren.db")
		}
		progress("round %d/%d: warren: %d echo tasks of %s, %d workers (concurrency %d), batch size %s, store %s",
			i+1, cfg.Rounds, cfg.Tasks, cfg.TaskDuration, cfg.Workers, cfg.Concurrency, batchName(cfg.BatchSize), redactDB(rf.DatabaseURL))
		var r Report
		if err := runWarren(ctx, rf, warrenNames, &r, i == cfg.Rounds-1); err != nil {
			return Report{}, fmt.Errorf("warren run: %w", err)
		}
		progress("round %d/%d: warren: %.0f tasks/s", i+1, cfg.Rounds, r.WarrenTasksPerS)
		rep.RoundsCeiling = append(rep.RoundsCeiling, round1(ceilings[i]))
		rep.RoundsWarren = append(rep.RoundsWarren, round1(r.WarrenTasksPerS))
		rounds = append(rounds, r)
	}
	if err := stopProfile(); err != nil {
		return Report{}, err
	}
	if cfg.MemProfile != "" {
		if err := writeAllocProfile(cfg.MemProfile); err != nil {
			return Report{}, err
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
	if rep.CeilingTasksPerS > 0 {
		rep.Ratio = math.Round(rep.WarrenTasksPerS/rep.CeilingTasksPerS*1000) / 1000
	}
	return rep, nil
}

// batchName names a batch size for people: 0 is "automatic".
func batchName(n int) string {
	if n == 0 {
		return "automatic"
	}
	return strconv.Itoa(n)
}

// redactDB hides a password in a database URL for the progress lines.
func redactDB(raw string) string {
	if strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	return broker.Redact(raw)
}

// deleteTopology removes one of the bench's own topologies.
func deleteTopology(amqpURL string, names protocol.Names) error {
	ctx, cancel := context.WithTimeout(context.Background(), broker.DialTimeout)
	defer cancel()
	conn, err := broker.Dial(ctx, amqpURL, "warren bench (cleanup)")
	if err != nil {
		return err
	}
	defer conn.Close()
	return broker.DeleteTopology(conn, names, protocol.DefaultRetryTiers...)
}
