package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// A job with a follow-up (store.NewJob.Then) starts it in the transaction
// that closes it as completed: one task per element of its result.
func ExampleStore_FinishJob_then() {
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

	one := func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`"https://example.com/"`), nil) }
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "list-pages", Policy: warren.Policy{Reduce: "concat"},
		Then: &store.NewJob{Type: "fetch-page", Policy: warren.Policy{Reduce: "collect"}}}, one)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		return []store.TaskRef{tasks[0].Ref()}, nil
	}); err != nil {
		log.Fatal(err)
	}
	if _, err := st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted,
		Result: json.RawMessage(`["/a", "/b", "/c"]`)}}); err != nil {
		log.Fatal(err)
	}
	job, err = st.GetJob(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	// The aggregator closes the job with its reduced result: here, the
	// one task's list of pages.
	if _, err := st.FinishJob(ctx, job.ID, job.Version, warren.JobCompleted, []byte(`["/a", "/b", "/c"]`), ""); err != nil {
		log.Fatal(err)
	}
	job, err = st.GetJob(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	next, err := st.GetJob(ctx, job.NextJob)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, "->", next.Type, next.State, next.ExpectedTasks, "tasks, previous job is the first:", next.PreviousJob == job.ID)
	// Output:
	// completed -> fetch-page pending 3 tasks, previous job is the first: true
}
