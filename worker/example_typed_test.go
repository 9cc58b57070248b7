package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// Thumbnail is a thumbnail task's payload.
type Thumbnail struct {
	Key   string `json:"key"`
	Width int    `json:"width"`
}

// Typed decodes each task's payload into the handler's input type; a
// payload that does not decode fails the task permanently, without a
// call. The handler runs here through workertest, as a worker would run
// it, so the example needs no broker.
func ExampleTyped() {
	h := worker.Typed(func(ctx context.Context, t worker.Task, in Thumbnail) (map[string]string, error) {
		return map[string]string{"thumbnail": fmt.Sprintf("%s@%d", in.Key, in.Width)}, nil
	})

	res := workertest.Run(context.Background(), h, worker.Task{Payload: json.RawMessage(`{"key":"cat.png","width":64}`)}, nil)
	fmt.Println(res.Action, string(res.Output))

	res = workertest.Run(context.Background(), h, worker.Task{Payload: json.RawMessage(`{"key":"cat.png","width":"64"}`)}, nil)
	fmt.Println(res.Action, res.Reason)
	var typeErr *json.UnmarshalTypeError // the decoding error is wrapped
	if errors.As(res.Err, &typeErr) {
		fmt.Println(typeErr.Field, "is a", typeErr.Value)
	}
	// Output:
	// completed {"thumbnail":"cat.png@64"}
	// failed permanent
	// width is a string
}
