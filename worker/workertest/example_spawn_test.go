package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// A crawler's handler spawns a task per link of its page: a completed
// run's result carries its spawn, a failed run's spawns nothing.
func ExampleResult_spawned() {
	crawl := func(_ context.Context, t worker.Task) (any, error) {
		var page struct {
			URL   string
			Links []string
		}
		if err := json.Unmarshal(t.Payload, &page); err != nil {
			return nil, worker.Permanent(err)
		}
		for _, link := range page.Links {
			if err := t.Spawn(map[string]string{"URL": link}); err != nil {
				return nil, err
			}
		}
		if page.URL == "" {
			return nil, errors.New("no URL")
		}
		return len(page.Links), nil
	}
	ctx := context.Background()

	res := workertest.Run(ctx, crawl, worker.Task{Payload: json.RawMessage(`{"URL": "/", "Links": ["/a", "/b"]}`)}, nil)
	fmt.Println(res.Action, string(res.Output))
	for _, p := range res.Spawned {
		fmt.Println("spawned", string(p))
	}

	res = workertest.Run(ctx, crawl, worker.Task{Payload: json.RawMessage(`{"Links": ["/c"]}`)}, nil)
	fmt.Println(res.Action, len(res.Spawned))
	// Output:
	// completed 2
	// spawned {"URL":"/a"}
	// spawned {"URL":"/b"}
	// retried 0
}
