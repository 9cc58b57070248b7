package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// A job of max_concurrency 2 has at most two tasks out at once: the relay
// offers the next one only once an outcome frees a slot.
func ExampleStore_RelayBatch_maxConcurrency() {
	dir, err := os.MkdirTemp("", "warren-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warren.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= 5; i++ {
			if !yield(json.RawMessage(strconv.Itoa(i)), nil) {
				return
			}
		}
	}
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "resize", Policy: warren.Policy{MaxConcurrency: 2}}, tasks)
	if err != nil {
		log.Fatal(err)
	}
	relay := func() {
		n, err := st.RelayBatch(ctx, 100, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			var refs []store.TaskRef
			for _, t := range tasks {
				refs = append(refs, t.Ref())
			}
			return refs, nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(n, "out")
	}
	relay()
	relay() // two are out: none more
	if _, err := st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`)}}); err != nil {
		log.Fatal(err)
	}
	relay()
	// Output:
	// 2 out
	// 0 out
	// 1 out
}
