package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// A handler's outcomes, each as the worker would settle it, without a
// broker: a result, a retry with its tier's delay, a retry budget spent,
// and a permanent failure.
func ExampleRun() {
	charge := func(_ context.Context, t worker.Task) (any, error) {
		var in struct{ Cents int }
		if err := json.Unmarshal(t.Payload, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		if in.Cents > 10000 {
			return nil, errors.New("the payment provider timed out")
		}
		return map[string]any{"charged": in.Cents, "key": t.IdempotencyKey()}, nil
	}
	ctx := context.Background()

	res := workertest.Run(ctx, charge, worker.Task{Payload: json.RawMessage(`{"Cents": 250}`)}, nil)
	fmt.Println(res.Action, string(res.Output))

	big := worker.Task{Payload: json.RawMessage(`{"Cents": 99999}`)}
	res = workertest.Run(ctx, charge, big, nil)
	fmt.Println(res.Action, res.Delay, res.Err)

	big.Attempt = 4 // MaxRetries is 3 by default: this run is the last
	res = workertest.Run(ctx, charge, big, nil)
	fmt.Println(res.Action, res.Reason)

	res = workertest.Run(ctx, charge, worker.Task{Payload: json.RawMessage(`"250"`)}, nil)
	fmt.Println(res.Action, res.Reason)
	// Output:
	// completed {"charged":250,"key":"workertest-job:1"}
	// retried 1s the payment provider timed out
	// dead-lettered retries_exhausted
	// failed permanent
}

// RunWorker runs the handler a worker has registered for the task's
// type, so a test covers the program's own wiring; worker.New does not
// connect, and nothing here needs a broker.
func ExampleRunWorker() {
	w, err := worker.New(worker.Config{})
	if err != nil {
		panic(err)
	}
	w.Handle("square", worker.Typed(func(_ context.Context, _ worker.Task, n int) (int, error) {
		return n * n, nil
	}))

	res := workertest.RunWorker(context.Background(), w, worker.Task{Type: "square", Payload: json.RawMessage(`7`)}, nil)
	fmt.Println(res.Action, string(res.Output))
	res = workertest.RunWorker(context.Background(), w, worker.Task{Type: "sqaure", Payload: json.RawMessage(`7`)}, nil)
	fmt.Println(res.Action)
	// Output:
	// completed 49
	// unserved
}

// A task with a Timeout runs under the worker's deadline: a handler still
// waiting when it passes fails transiently, with the worker's error, and
// is retried like any transient failure.
func ExampleRun_timeout() {
	fetch := func(ctx context.Context, _ worker.Task) (any, error) {
		select {
		case <-ctx.Done(): // an upstream call that hangs, given ctx
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return "fetched", nil
		}
	}
	res := workertest.Run(context.Background(), fetch, worker.Task{Timeout: 20 * time.Millisecond}, nil)
	fmt.Println(res.Action, res.Delay, res.Err)
	// Output:
	// retried 1s worker: task timeout of 20ms exceeded
}
