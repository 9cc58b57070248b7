package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/warrenhq/warren/worker"
)

// A worker binary: one handler, run until interrupted. Run needs a
// RabbitMQ, so this example is compiled but not run.
func Example() {
	w, err := worker.New(worker.Config{Concurrency: 16, Logger: slog.Default()})
	if err != nil {
		panic(err)
	}
	w.Handle("thumbnail", func(ctx context.Context, t worker.Task) (any, error) {
		var in struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(t.Payload, &in); err != nil {
			return nil, worker.Permanent(err) // a bad payload never gets better
		}
		// t.IdempotencyKey() is the same on every run of the task: pass it
		// to external systems so that a rerun does not act twice.
		return map[string]string{"thumbnail": in.Key + ".small", "key": t.IdempotencyKey()}, nil
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		slog.Error("worker stopped", "error", err)
		os.Exit(1)
	}
}

// Permanent marks an error that no retry can fix; wrapping it further
// keeps the mark, and errors.Is still finds what it wraps.
func ExamplePermanent() {
	errNoSuchImage := errors.New("no such image")
	err := fmt.Errorf("thumbnail cat.png: %w", worker.Permanent(errNoSuchImage))

	fmt.Println(err)
	fmt.Println(worker.IsPermanent(err), errors.Is(err, errNoSuchImage))
	fmt.Println(worker.IsPermanent(errors.New("connection reset")))
	// Output:
	// thumbnail cat.png: no such image
	// true true
	// false
}

func ExampleTask_IdempotencyKey() {
	t := worker.Task{JobID: "01J9Z3", TaskID: 42}
	fmt.Println(t.IdempotencyKey())
	// Output: 01J9Z3:42
}
