package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

//go:embed corpus/*.txt
var corpus embed.FS

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
	fs.StringVar(&f.amqpURL, "amqp-url", orDefault(env.getenv("WARREN_AMQP_URL"), broker.DefaultURL), "RabbitMQ URL (env WARREN_AMQP_URL)")
	fs.StringVar(&f.database, "database", "", "job store URL (default: a temporary SQLite file, removed afterwards)")
	fs.StringVar(&f.prefix, "prefix", "", "exchange and queue name prefix (default: a fresh one, deleted afterwards, so a running server is never disturbed)")
	fs.StringVar(&f.input, "input", "", "directory of text files to count, read recursively (default: the embedded corpus)")
	fs.IntVar(&f.workers, "workers", 4, "concurrent wordcount workers")
	fs.IntVar(&f.chunkLines, "chunk-lines", 5, "lines per task")
	fs.Float64Var(&f.failRate, "fail-rate", 0, "share of tasks (0-1) that fail once and are retried")
	fs.BoolVar(&f.json, "json", false, `print one JSON object {"job": ..., "result": ...} and nothing else on stdout`)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	switch {
	case f.workers < 1:
		return fmt.Errorf("--workers must be >= 1, got %d", f.workers)
	case f.chunkLines < 1:
		return fmt.Errorf("--chunk-lines must be >= 1, got %d", f.chunkLines)
	case !(f.failRate >= 0 && f.failRate <= 1):
		return fmt.Errorf("--fail-rate must be between 0 and 1, got %v", f.failRate)
	}
	files, err := readCorpus(f.input)
	if err != nil {
		return err
	}
	chunks := chunkLines(files, f.chunkLines)
	if len(chunks) == 0 {
		return fmt.Errorf("no text to count in %s", orDefault(f.input, "the corpus"))
	}
	return demo(ctx, f, files, chunks, env)
}

// corpusFile is one text file of the demo's input.
type corpusFile struct {
	name string
	text string
}

// readCorpus reads the text files under dir recursively, or the embedded
// corpus when dir is empty. Files that are not UTF-8 text are skipped.
func readCorpus(dir string) ([]corpusFile, error) {
	var fsys fs.FS = corpus
	root := "corpus"
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("--input: %v", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("--input %s is not a directory", dir)
		}
		fsys, root = os.DirFS(dir), "."
	}
	var files []corpusFile
	err := fs.WalkDir(fsys, root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			return nil // not text
		}
		files = append(files, corpusFile{name: path, text: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", orDefault(dir, "the corpus"), err)
	}
	return files, nil
}

// chunkLines splits each file into chunks of n lines, in file order.
func chunkLines(files []corpusFile, n int) []string {
	var chunks []string
	for _, f := range files {
		sc := bufio.NewScanner(strings.NewReader(f.text))
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var b strings.Builder
		lines := 0
		for sc.Scan() {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
			if lines++; lines == n {
				chunks = append(chunks, b.String())
				b.Reset()
				lines = 0
			}
		}
		if lines > 0 {
			chunks = append(chunks, b.String())
		}
	}
	return chunks
}

func demo(ctx context.Context, f demoFlags, files []corpusFile, chunks []string, env *environment) (err error) {
	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ownPrefix := f.prefix == ""
	if ownPrefix {
		var b [4]byte
		_, _ = rand.Read(b[:])
		f.prefix = "warren-demo-" + hex.EncodeToString(b[:]) + "."
	}
	if f.database == "" {
		dir, err := os.MkdirTemp("", "warren-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		f.database = "sqlite://" + filepath.Join(dir, "warren.db")
	}
	s, err := server.New(server.Config{AMQPURL: f.amqpURL, DatabaseURL: f.database, Prefix: f.prefix,
		Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	if ownPrefix {
		defer func() {
			if derr := deleteTopology(f.amqpURL, protocol.NamesFor(f.prefix)); derr != nil && err == nil {
				err = derr
			}
		}()
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, f.workers+1)
	wg.Add(1)
	go func() { defer wg.Done(); <-runCtx.Done(); errs <- s.Stop() }()
	var retries atomic.Int64
	for range f.workers {
		w, err := worker.New(worker.Config{AMQPURL: f.amqpURL, Prefix: f.prefix, Concurrency: 1, Logger: log,
			OnEvent: func(e worker.Event) {
				if e.Kind == worker.EventRetried {
					retries.Add(1)
				}
			}})
		if err != nil {
			stop()
			wg.Wait()
			return err
		}
		w.Handle("wordcount", failFirstAttempt(wordcount))
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}
	defer func() {
		stop()
		wg.Wait()
		close(errs)
		for werr := range errs {
			if werr != nil && err == nil {
				err = werr
			}
		}
	}()

	progressOut := env.stdout
	if f.json {
		progressOut = env.stderr
	} else {
		fmt.Fprintf(env.stdout, "warren demo: %d tasks (%d-line chunks of %d files), %d workers\n", len(chunks), f.chunkLines, len(files), f.workers)
	}
	c := client.New(s.URL())
	start := time.Now()
	sub, err := c.SubmitNDJSON(ctx, client.JobSpec{Type: "wordcount", Reduce: "merge"}, demoTasks(chunks, f.failRate))
	if err != nil {
		return err
	}
	bar := newProgress(progressOut)
	job, err := c.Wait(ctx, sub.ID, &client.WaitOpts{MinInterval: 20 * time.Millisecond, MaxInterval: 250 * time.Millisecond, OnProgress: bar.update})
	bar.finish()
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if job.State != "completed" {
		printStatus(env.stderr, job)
		return fmt.Errorf("job %s is %s", job.ID, job.State)
	}
	result, err := c.Result(ctx, job.ID)
	if err != nil {
		return err
	}
	if f.json {
		raw, err := c.GetRaw(ctx, job.ID)
		if err != nil {
			return err
		}
		out, err := json.Marshal(map[string]json.RawMessage{"job": raw, "result": result})
		if err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, string(out))
		return nil
	}
	return printDemoSummary(env.stdout, job, result, retries.Load(), elapsed)
}

// demoTasks streams one NDJSON line per chunk; a share failRate of them
// ask to fail on their first attempt.
func demoTasks(chunks []string, failRate float64) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriter(pw)
		enc := json.NewEncoder(bw)
		for _, text := range chunks {
			p := map[string]any{"text": text}
			if failRate > 0 && mrand.Float64() < failRate {
				p["fail_first_attempt"] = true
			}
			if err := enc.Encode(p); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(bw.Flush())
	}()
	return pr
}

// failFirstAttempt makes a task whose payload has "fail_first_attempt":
// true fail transiently on its first attempt, to show retries.
func failFirstAttempt(h worker.HandlerFunc) worker.HandlerFunc {
	return func(ctx context.Context, t worker.Task) (any, error) {
		var p struct {
			FailFirstAttempt bool `json:"fail_first_attempt"`
		}
		if json.Unmarshal(t.Payload, &p) == nil && p.FailFirstAttempt && t.Attempt == 1 {
			return nil, errors.New("demo: planned failure of a first attempt")
		}
		return h(ctx, t)
	}
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

// deleteTopology removes the demo's own exchanges and queues.
func deleteTopology(amqpURL string, names protocol.Names) error {
	ctx, cancel := context.WithTimeout(context.Background(), broker.DialTimeout)
	defer cancel()
	conn, err := broker.Dial(ctx, amqpURL, "warren demo (cleanup)")
	if err != nil {
		return err
	}
	defer conn.Close()
	return broker.DeleteTopology(conn, names)
}
