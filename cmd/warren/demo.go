package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/cmd/warren/internal/demo"
	"github.com/warrenhq/warren/cmd/warren/internal/handlers"
	"github.com/warrenhq/warren/internal/broker"
)

// demoFlags are `warren demo`'s settings.
type demoFlags struct {
	amqpURL    string
	database   string
	prefix     string
	input      string
	workers    int
	chunkLines int
	failRate   float64
	json       bool
}

func runDemo(ctx context.Context, args []string, env *environment) error {
	var f demoFlags
	fs := newFlagSet("demo", "Count the words of a corpus with a real warren job, all in one process: an embedded SQLite store\n(a temporary file), the API, relay and aggregator, and N wordcount workers, against the local RabbitMQ.", env)
	fs.StringVar(&f.amqpURL, "amqp-url", broker.DefaultURL, amqpURLUsage)
	fs.secretFlags("amqp-url")
	fs.StringVar(&f.database, "database", "", "job store URL (default: a temporary SQLite file, removed afterwards)")
	fs.StringVar(&f.prefix, "prefix", "", "exchange and queue name prefix (default: a fresh one, deleted afterwards, so a running server is never disturbed)")
	fs.StringVar(&f.input, "input", "", "directory of text files to count, read recursively (default: the embedded corpus)")
	fs.IntVar(&f.workers, "workers", 4, "concurrent wordcount workers")
	fs.IntVar(&f.chunkLines, "chunk-lines", 5, "lines per task")
	fs.Float64Var(&f.failRate, "fail-rate", 0, "share of tasks (0-1) that fail once and are retried")
	fs.BoolVar(&f.json, "json", false, `print one JSON object {"job": ..., "result": ...} and nothing else on stdout`)
	// One run's choices: command line only (WARREN_DATABASE_URL must not
	// point a demo or a benchmark at a real store).
	fs.localFlags("database", "prefix", "input", "workers", "chunk-lines", "fail-rate", "json")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	env.setLogger(quietLogger(fs, env))
	if err := checkAMQPURL(fs, f.amqpURL); err != nil {
		return err
	}
	switch {
	case f.workers < 1:
		return usageErrorf("--workers must be >= 1, got %d", f.workers)
	case f.chunkLines < 1:
		return usageErrorf("--chunk-lines must be >= 1, got %d", f.chunkLines)
	case !(f.failRate >= 0 && f.failRate <= 1):
		return usageErrorf("--fail-rate must be between 0 and 1, got %v", f.failRate)
	}
	files, err := demo.ReadCorpus(f.input)
	if err != nil {
		return err
	}
	chunks := demo.Chunks(files, f.chunkLines)
	if len(chunks) == 0 {
		return fmt.Errorf("no text to count in %s", orDefault(f.input, "the corpus"))
	}
	return runDemoJob(ctx, f, len(files), chunks, env)
}

// runDemoJob runs the demo job and prints its progress, then its result:
// one JSON object with --json, else the top words and a summary.
func runDemoJob(ctx context.Context, f demoFlags, files int, chunks []string, env *environment) error {
	progressOut := env.stdout
	if f.json {
		progressOut = env.stderr
	} else {
		fmt.Fprintf(env.stdout, "warren demo: %d tasks (%d-line chunks of %d files), %d workers\n", len(chunks), f.chunkLines, files, f.workers)
	}
	bar := newProgress(progressOut)
	res, err := demo.Run(ctx, demo.Config{AMQPURL: f.amqpURL, DatabaseURL: f.database, Prefix: f.prefix,
		Workers: f.workers, FailRate: f.failRate, OnProgress: bar.update,
		Logger: env.logger}, chunks)
	bar.finish()
	if err != nil {
		if res.Job.ID != "" && res.Job.State != client.JobCompleted {
			printStatus(env.stderr, res.Job)
		}
		return err
	}
	if f.json {
		out, err := json.Marshal(map[string]json.RawMessage{"job": res.JobJSON, "result": res.Counts, "top_words": res.Top})
		if err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, string(out))
		return nil
	}
	if err := printDemoSummary(env.stdout, res.Job, res.Counts, res.Retries, res.Elapsed); err != nil {
		return err
	}
	return printDemoReduced(env.stdout, res.Reduced, res.Top)
}

// printDemoReduced prints the demo's second job: the top words as its
// reduce task, run by a worker, returned them.
func printDemoReduced(w io.Writer, job client.Job, top json.RawMessage) error {
	var res handlers.TopWordsResult
	if err := json.Unmarshal(top, &res); err != nil {
		return fmt.Errorf("the reduce task's result is not top words: %v", err)
	}
	fmt.Fprintf(w, "\nthe same fan-in as a reduce task run by a worker (job %s, reducer top_words;\n"+
		"examples/python-worker has it in Python): top %d words\n ", job.ID, len(res.Top))
	for _, x := range res.Top {
		fmt.Fprintf(w, " %s %d", x.Word, x.Count)
	}
	fmt.Fprintln(w)
	return nil
}

func printDemoSummary(w io.Writer, job client.Job, result json.RawMessage, retries int64, elapsed time.Duration) error {
	var counts map[string]int64
	if err := json.Unmarshal(result, &counts); err != nil {
		return fmt.Errorf("the merged result is not word counts: %v", err)
	}
	type wc struct {
		word  string
		count int64
	}
	words := make([]wc, 0, len(counts))
	for word, n := range counts {
		words = append(words, wc{word, n})
	}
	sort.Slice(words, func(i, j int) bool {
		if words[i].count != words[j].count {
			return words[i].count > words[j].count
		}
		return words[i].word < words[j].word
	})
	fmt.Fprintln(w, "\ntop 20 words:")
	for i, x := range words[:min(20, len(words))] {
		fmt.Fprintf(w, "  %2d. %-16s %6d\n", i+1, x.word, x.count)
	}
	fmt.Fprintf(w, "\njob %s %s: %d tasks expected, %d completed, %d failed, %d retries; %d distinct words\n",
		job.ID, job.State, job.ExpectedTasks, job.CompletedTasks, job.FailedTasks, retries, len(words))
	fmt.Fprintf(w, "took %s, %.0f tasks/s\n", elapsed.Round(time.Millisecond), float64(job.ExpectedTasks)/elapsed.Seconds())
	return nil
}
