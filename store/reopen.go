package store

import "github.com/warrenhq/warren"

// Reopening is what Store.ReopenTasks changed, kept for Store.UndoReopen
// to put back when the replay it was for never reached the broker. Pass it
// back as ReopenTasks returned it.
type Reopening struct {
	// JobID is the job of the tasks.
	JobID string
	// Tasks are the tasks reopened, in task id order; none when nothing
	// was (no task asked for was failed, or the job is cancelled).
	Tasks []ReopenedTask
	// Unknown lists the task ids asked for that the job does not have.
	Unknown []int64
	// Version is the job's version after the reopen: UndoReopen puts
	// things back only while the job is still at it.
	Version int64
	// Closed is the job as it was before, when the reopen reopened it (it
	// was failed or completed); nil when it was open.
	Closed *warren.Job
	// Result is the stored result of the Closed job, which the reopen
	// deleted; nil when it had none.
	Result []byte
}

// ReopenedTask is one task Store.ReopenTasks reopened.
type ReopenedTask struct {
	TaskID int64
	// Generation is the task's new generation, which the replayed
	// message must carry (Outcome.Generation).
	Generation int
	// Was is the task as it was before: failed, with its error, attempts,
	// worker, times and result.
	Was warren.TaskRecord
}
