// Package demo runs warren's demonstration job, `warren demo`: the word
// counts of a corpus (embedded, or a directory of text files), computed by
// a real warren server and wordcount workers in one process against
// RabbitMQ, and merged.
package demo

import (
	"bufio"
	"bytes"
	"cmp"
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
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/cmd/warren/internal/handlers"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

//go:embed corpus/*.txt
var corpus embed.FS

// Config says how to run the demo.
type Config struct {
	// AMQPURL is the RabbitMQ URL, or the URLs of the nodes of one
	// cluster separated by commas; "" means the local broker.
	AMQPURL string
	// DatabaseURL is the job store; "" means a temporary SQLite file,
	// removed afterwards.
	DatabaseURL string
	// Prefix is the exchange and queue prefix; "" means a fresh one,
	// deleted afterwards, so that a running server is never disturbed.
	Prefix string
	// Workers is the number of wordcount workers (concurrency 1 each).
	Workers int
	// FailRate is the share of tasks (0-1) that fail once and are retried.
	FailRate float64
	// OnProgress, when set, is called with each status of the job.
	OnProgress func(client.Job)
	// Logger receives the components' logs; nil discards them.
	Logger *slog.Logger
}

// Result is what a demo run gave.
type Result struct {
	// Job is the job's last status.
	Job client.Job
	// JobJSON is the job's status as the API returned it.
	JobJSON json.RawMessage
	// Counts is the merged result: word counts, when the job completed.
	Counts json.RawMessage
	// Retries is the number of retries the workers scheduled.
	Retries int64
	// Elapsed is the time from submission to the job closed.
	Elapsed time.Duration
	// Reduced is the second job, the same counts with their fan-in run by
	// a worker as a reduce task (handlers.TopWords), and Top its result.
	Reduced client.Job
	// Top is the reduce task's result: the TopN most frequent words.
	Top json.RawMessage
}

// TopN is how many words the demo's reduce task returns.
const TopN = 10

// Run counts the words of chunks (one task each) with a warren job and
// returns the job and its merged counts. A job that does not complete is
// an error; Result.Job then says why.
func Run(ctx context.Context, cfg Config, chunks []string) (res Result, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ownPrefix := cfg.Prefix == ""
	if ownPrefix {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Prefix = "warren-demo-" + hex.EncodeToString(b[:]) + "."
	}
	if cfg.DatabaseURL == "" {
		dir, err := os.MkdirTemp("", "warren-demo-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		cfg.DatabaseURL = "sqlite://" + filepath.Join(dir, "warren.db")
	}
	s, err := server.New(server.Config{AMQPURL: cfg.AMQPURL, DatabaseURL: cfg.DatabaseURL, Prefix: cfg.Prefix,
		Listen: "127.0.0.1:0", Logger: cfg.Logger})
	if err != nil {
		return res, err
	}
	if err := s.Start(ctx); err != nil {
		return res, err
	}
	if ownPrefix {
		defer func() {
			if derr := deleteTopology(cmp.Or(cfg.AMQPURL, broker.DefaultURL), protocol.NamesFor(cfg.Prefix)); derr != nil && err == nil {
				err = derr
			}
		}()
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers+1)
	wg.Add(1)
	go func() { defer wg.Done(); <-runCtx.Done(); errs <- s.Stop() }()
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
	var retries atomic.Int64
	for range cfg.Workers {
		w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: cfg.Prefix, Concurrency: 1, Logger: cfg.Logger,
			OnEvent: func(e worker.Event) {
				if e.Kind == worker.EventRetried {
					retries.Add(1)
				}
			}})
		if err != nil {
			return res, err
		}
		w.Handle("wordcount", failFirstAttempt(handlers.Wordcount))
		w.Reducer("top_words", handlers.TopWords)
		wg.Add(1)
		go func() { defer wg.Done(); errs <- w.Run(runCtx) }()
	}

	c := client.New(s.URL())
	start := time.Now()
	sub, err := c.SubmitNDJSON(ctx, client.JobSpec{Type: "wordcount", Reduce: "merge"}, tasks(chunks, cfg.FailRate))
	if err != nil {
		return res, err
	}
	res.Job, err = c.Wait(ctx, sub.ID, &client.WaitOpts{MinInterval: 20 * time.Millisecond, MaxInterval: 250 * time.Millisecond, OnProgress: cfg.OnProgress})
	if err != nil {
		return res, err
	}
	res.Elapsed, res.Retries = time.Since(start), retries.Load()
	if res.Job.State != client.JobCompleted {
		return res, fmt.Errorf("job %s is %s", res.Job.ID, res.Job.State)
	}
	if res.Counts, err = c.Result(ctx, res.Job.ID); err != nil {
		return res, err
	}
	if res.JobJSON, err = c.GetRaw(ctx, res.Job.ID); err != nil {
		return res, err
	}
	// The same counts, their fan-in in a worker's own code: a reduce task.
	spec := client.JobSpec{Type: "wordcount", ReduceTask: &client.ReduceTask{Task: "top_words",
		Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, TopN))}}
	if sub, err = c.SubmitNDJSON(ctx, spec, tasks(chunks, 0)); err != nil {
		return res, err
	}
	if res.Reduced, err = c.Wait(ctx, sub.ID, &client.WaitOpts{MinInterval: 20 * time.Millisecond, MaxInterval: 250 * time.Millisecond}); err != nil {
		return res, err
	}
	if res.Reduced.State != client.JobCompleted {
		return res, fmt.Errorf("job %s (reduce task top_words) is %s: %s", res.Reduced.ID, res.Reduced.State, res.Reduced.Error)
	}
	res.Top, err = c.Result(ctx, res.Reduced.ID)
	return res, err
}

// File is one text file of the demo's input.
type File struct {
	// Name is its path below the input directory.
	Name string
	// Text is its content.
	Text string
}

// ReadCorpus reads the text files under dir recursively, or the embedded
// corpus when dir is empty. Files that are not UTF-8 text are skipped.
func ReadCorpus(dir string) ([]File, error) {
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
	var files []File
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
		files = append(files, File{Name: path, Text: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", cmp.Or(dir, "the corpus"), err)
	}
	return files, nil
}

// Chunks splits each file into chunks of n lines, in file order.
func Chunks(files []File, n int) []string {
	var chunks []string
	for _, f := range files {
		sc := bufio.NewScanner(strings.NewReader(f.Text))
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

// tasks streams one NDJSON line per chunk; a share failRate of them
// ask to fail on their first attempt.
func tasks(chunks []string, failRate float64) io.Reader {
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
