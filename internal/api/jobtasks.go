package api

import (
	"encoding/json"
	"iter"
	"net/http"
)

// limitTasks yields tasks, and an error (413) in place of the first task
// past max when the submission holds more than max tasks: a job may not
// start over the per-job limit its tasks' spawns are held to. max <= 0
// means no limit.
func limitTasks(tasks iter.Seq2[json.RawMessage, error], max int64) iter.Seq2[json.RawMessage, error] {
	if max <= 0 {
		return tasks
	}
	return func(yield func(json.RawMessage, error) bool) {
		var n int64
		for raw, err := range tasks {
			if err == nil {
				if n++; n > max {
					yield(nil, errorf(http.StatusRequestEntityTooLarge, codeTooLarge,
						"the job has more than %d tasks, over the limit of %d tasks per job", max, max))
					return
				}
			}
			if !yield(raw, err) {
				return
			}
		}
	}
}
