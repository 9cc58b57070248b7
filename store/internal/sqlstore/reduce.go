package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/warrenhq/warren"
)

// reduceTaskJSON is the stored form of a warren.ReduceTask (the jobs
// table's reduce_task column): its own field names, so that renaming a Go
// field never changes what is stored.
type reduceTaskJSON struct {
	Type    string          `json:"type"`
	Queue   string          `json:"queue,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// EncodeReduceTask returns r as the reduce_task column stores it: nil
// (NULL) for a job without a reduce task.
func EncodeReduceTask(r *warren.ReduceTask) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(reduceTaskJSON{Type: r.Type, Queue: r.Queue, Payload: r.Payload})
	if err != nil {
		return nil, fmt.Errorf("encode the reduce task: %w", err)
	}
	return b, nil
}

// DecodeReduceTask reads a reduce_task column: nil for NULL.
func DecodeReduceTask(b []byte) (*warren.ReduceTask, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var r reduceTaskJSON
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode the reduce task: %w", err)
	}
	return &warren.ReduceTask{Type: r.Type, Queue: r.Queue, Payload: r.Payload}, nil
}
