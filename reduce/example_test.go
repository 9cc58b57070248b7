package reduce_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warrenhq/warren/reduce"
)

// maxReducer is a custom reducer: the largest of the results, which must
// be JSON numbers; failed tasks are skipped, and no result at all is null.
// It streams: it holds the largest number so far, not the results.
type maxReducer struct {
	max  float64
	seen bool
}

func (m *maxReducer) Add(_ int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	var v float64
	if err := json.Unmarshal(result, &v); err != nil {
		return fmt.Errorf("want a JSON number, got %.20s", result)
	}
	if !m.seen || v > m.max {
		m.max, m.seen = v, true
	}
	return nil
}

func (m *maxReducer) Result() ([]byte, error) {
	if !m.seen {
		return []byte("null"), nil
	}
	return json.Marshal(m.max)
}

func ExampleRegistry_Register() {
	// A program that embeds the server passes its reducers in
	// server.Config.Reducers; the server builds a registry like this one
	// for its API, which then accepts jobs with "reduce": "max", and its
	// aggregator, which runs maxReducer when such a job closes.
	reducers := reduce.NewRegistry()
	newMax := func() reduce.Reducer { return &maxReducer{} }
	fmt.Println("register max:", reducers.Register("max", newMax))
	fmt.Println("register collect:", reducers.Register("collect", newMax))
	fmt.Println(reducers.Names())

	// results feeds tasks 1, 2, ... in order; "failed" is a failed task.
	// In the server the scan reads the store.
	results := func(results ...string) reduce.ScanFunc {
		return func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
			for i, r := range results {
				failed := r == "failed"
				if failed {
					r = ""
				}
				if err := fn(int64(i+1), failed, json.RawMessage(r)); err != nil {
					return err
				}
			}
			return nil
		}
	}

	out, err := reducers.Reduce("max", results(`3`, `7.5`, "failed", `-2`))
	fmt.Printf("max: %s (error: %v)\n", out, err)

	_, err = reducers.Reduce("max", results(`3`, `"seven"`, `7`))
	fmt.Println("error:", err)
	if refused, ok := errors.AsType[*reduce.Error](err); ok {
		fmt.Println("refused task:", refused.TaskID)
	}
	// Output:
	// register max: <nil>
	// register collect: reduce: Register("collect"): a reducer of that name is already registered
	// [collect concat max merge none sum]
	// max: 7.5 (error: <nil>)
	// error: reduce "max": task 2: want a JSON number, got "seven"
	// refused task: 2
}
