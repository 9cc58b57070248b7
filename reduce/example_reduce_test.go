package reduce_test

import (
	"encoding/json"
	"fmt"

	"github.com/warrenhq/warren/reduce"
)

func ExampleRegistry_Reduce() {
	// A word-count job of three tasks, the second of which failed. In the
	// server the scan is the store's ScanResults; here it is a slice.
	tasks := []struct {
		failed bool
		result string
	}{
		{result: `{"the": 2, "fox": 1}`},
		{failed: true},
		{result: `{"the": 1, "dog": 1}`},
	}
	scan := func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
		for i, t := range tasks {
			if err := fn(int64(i+1), t.failed, json.RawMessage(t.result)); err != nil {
				return err
			}
		}
		return nil
	}

	reducers := reduce.NewRegistry()
	for _, name := range []string{"collect", "merge", "sum"} {
		out, err := reducers.Reduce(name, scan)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Printf("%s: %s\n", name, out)
	}
	// Output:
	// collect: [{"the":2,"fox":1},null,{"the":1,"dog":1}]
	// merge: {"dog":1,"fox":1,"the":3}
	// error: reduce "sum": task 1: want a JSON number, got a JSON object "{\"the\": 2, \"fox\": 1}"
}
