// Command embedded-server embeds the warren server in a Go program with a
// custom reducer, runs a worker in the same process, and runs one job end
// to end: it submits the lengths of a few words as tasks and reduces them
// with "longest", a reducer the program registers through
// server.Config.Reducers.
//
// It needs RabbitMQ on localhost (WARREN_AMQP_URL) and keeps its job
// store in a temporary SQLite file; its exchanges and queues (prefix
// "warren-example.") stay on the broker afterwards, as a server's do:
//
//	go run ./examples/embedded-server
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded-server:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	err = run(ctx, os.Getenv("WARREN_AMQP_URL"), "warren-example.", "sqlite://"+filepath.Join(dir, "warren.db"), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded-server:", err)
		os.Exit(1)
	}
}

// longest is a custom reducer: the longest word of the job, from results
// {"word": ..., "length": ...}; failed tasks are skipped. It streams: it
// holds the longest word so far, not the results.
type longest struct {
	best wordLength
	seen bool
}

// wordLength is a task's result.
type wordLength struct {
	Word   string `json:"word"`
	Length int    `json:"length"`
}

func (l *longest) Add(_ int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	var w wordLength
	if err := json.Unmarshal(result, &w); err != nil {
		return fmt.Errorf("want {\"word\", \"length\"}: %v", err)
	}
	if !l.seen || w.Length > l.best.Length {
		l.best, l.seen = w, true
	}
	return nil
}

func (l *longest) Result() ([]byte, error) {
	if !l.seen {
		return []byte("null"), nil
	}
	return json.Marshal(l.best)
}

// run starts a server and a worker on the broker at amqpURL ("" for the
// local one) under prefix, with the job store dbURL, runs one job and
// prints its outcome to out.
func run(ctx context.Context, amqpURL, prefix, dbURL string, out io.Writer) (err error) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(server.Config{
		AMQPURL: amqpURL, Prefix: prefix, DatabaseURL: dbURL, Listen: "127.0.0.1:0", Logger: quiet,
		Reducers: map[string]reduce.Factory{"longest": func() reduce.Reducer { return &longest{} }},
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Stop()) }()

	w, err := worker.New(worker.Config{AMQPURL: amqpURL, Prefix: prefix, Concurrency: 4, Logger: quiet})
	if err != nil {
		return err
	}
	w.Handle("length", worker.Typed(func(_ context.Context, _ worker.Task, word string) (wordLength, error) {
		return wordLength{Word: word, Length: len([]rune(word))}, nil
	}))
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		err = errors.Join(err, <-done)
	}()

	c := client.New(srv.URL())
	var tasks []json.RawMessage
	for _, word := range []string{"fan", "out", "fan", "in", "deterministically"} {
		raw, _ := json.Marshal(word)
		tasks = append(tasks, raw)
	}
	sub, err := c.Submit(ctx, client.JobSpec{Type: "length", Reduce: "longest", Tasks: tasks})
	if err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	job, err := c.Wait(wait, sub.ID, nil)
	if err != nil {
		return err
	}
	result, err := c.Result(ctx, job.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "job %s: %d of %d tasks completed\n", job.State, job.CompletedTasks, job.ExpectedTasks)
	fmt.Fprintf(out, "longest: %s\n", result)
	return nil
}
