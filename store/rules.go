package store

import (
	"fmt"

	"github.com/warrenhq/warren"
)

// The rules below are those a caller of the store applies too (the
// aggregator's close, the API's result URL and error codes). The store
// applies them, with every rule only it applies, in its one engine
// (store/internal/engine), so that its drivers' SQL only selects
// candidates and applies guarded updates: a rule written in two SQL
// dialects drifts.

// ReadyToClose reports whether open job j can close, or start its reduce
// task: while its reduce task runs (j.ReduceState warren.ReduceRunning),
// never; once the reduce task's outcome is recorded
// (warren.ReduceCompleted, warren.ReduceFailed), always; before any
// reduce task (""), when every task finished, or the job fails fast and
// its failures are over its tolerance (warren.Policy.Tolerates).
// JobsToClose lists exactly the open jobs for which it holds.
func ReadyToClose(j warren.Job) bool {
	switch j.ReduceState {
	case warren.ReduceRunning:
		return false
	case warren.ReduceCompleted, warren.ReduceFailed:
		return true
	}
	return j.Finished() || (j.Policy.FailFast && !j.Policy.Tolerates(j.FailedTasks, j.ExpectedTasks))
}

// CancelledError is the Error CancelJob records on the job it cancels.
const CancelledError = "job cancelled"

// LostError is the error of a task that ReconcileStale fails as lost.
const LostError = "lost: no result within the task timeout"

// ResultLocation is the Job.ResultLocation that FinishJob records for job
// jobID when it stores a reduced result: the server's path for fetching it.
func ResultLocation(jobID string) string {
	return "/v1/jobs/" + jobID + "/result"
}

// ErrKeyReused is CreateJob's error for an idempotency key that names a
// job created by another request (another RequestHash). It wraps
// warren.ErrConflict.
var ErrKeyReused = fmt.Errorf("%w: the idempotency key was used for a different request", warren.ErrConflict)
