package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/deadletters"
)

// attemptJSON is one run of a task as GET /v1/jobs/{id}/tasks/{task_id}
// shows it.
type attemptJSON struct {
	Attempt    int                   `json:"attempt"`
	Generation int                   `json:"generation"`
	Outcome    warren.AttemptOutcome `json:"outcome"`
	Worker     string                `json:"worker"`
	StartedAt  *time.Time            `json:"started_at"`
	FinishedAt time.Time             `json:"finished_at"`
	Error      string                `json:"error"`
	Traceback  string                `json:"traceback"`
}

// taskDeadLetterJSON is the dead letter of a task, as the dead-letter
// queue holds it.
type taskDeadLetterJSON struct {
	MessageID string     `json:"message_id"`
	Reason    string     `json:"reason"`
	Error     string     `json:"error"`
	Attempts  int        `json:"attempts"`
	Time      *time.Time `json:"time"`
}

// taskDetailJSON is the body of GET /v1/jobs/{id}/tasks/{task_id}: the
// task as the list shows it, with its payload, every attempt the store
// kept, and its dead letter.
type taskDetailJSON struct {
	JobID string `json:"job_id"`
	taskJSON
	Generation     int                 `json:"generation"`
	Payload        json.RawMessage     `json:"payload"`
	AttemptHistory []attemptJSON       `json:"attempt_history"`
	DeadLetter     *taskDeadLetterJSON `json:"dead_letter"`
}

// getTask handles GET /v1/jobs/{id}/tasks/{task_id}: one task whole.
func (s *server) getTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	raw := r.PathValue("task_id")
	taskID, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || taskID < warren.ReduceTaskID {
		writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter,
			"task_id must be a task's id, an integer >= %d (%d is the reduce task); got %q", warren.ReduceTaskID, warren.ReduceTaskID, raw))
		return
	}
	ctx := r.Context()
	t, err := s.cfg.Store.GetTask(ctx, id, taskID)
	if err != nil {
		s.storeError(w, r, err, "get task", "job_id", id, "task_id", taskID)
		return
	}
	payload, err := s.cfg.Store.TaskPayload(ctx, id, taskID)
	if err != nil {
		s.storeError(w, r, err, "get task payload", "job_id", id, "task_id", taskID)
		return
	}
	attempts, err := s.cfg.Store.TaskAttempts(ctx, id, taskID)
	if err != nil {
		s.storeError(w, r, err, "get task attempts", "job_id", id, "task_id", taskID)
		return
	}
	out := taskDetailJSON{JobID: id, Generation: t.Generation, Payload: payload,
		AttemptHistory: make([]attemptJSON, 0, len(attempts)),
		taskJSON: taskJSON{TaskID: t.TaskID, State: t.State, Attempts: t.Attempts, Worker: t.Worker, Error: t.Error,
			QueuedAt: utc(t.QueuedAt), StartedAt: utc(t.StartedAt), FinishedAt: utc(t.FinishedAt), Result: t.Result}}
	for _, a := range attempts {
		out.AttemptHistory = append(out.AttemptHistory, attemptJSON{Attempt: a.Attempt, Generation: a.Generation,
			Outcome: a.Outcome, Worker: a.Worker, StartedAt: utc(a.StartedAt), FinishedAt: a.FinishedAt.UTC(),
			Error: a.Error, Traceback: a.Traceback})
	}
	if t.State == warren.TaskFailed {
		out.DeadLetter = s.taskDeadLetter(r, id, taskID)
	}
	writeJSON(w, http.StatusOK, out)
}

// taskDeadLetter returns the dead letter of a failed task in the
// dead-letter queue, the newest when there are several, or nil: none
// there (a task failed as lost, or whose dead letter was purged or
// replayed), or no queue to read, or one that does not answer now (the
// rest of the task is worth showing all the same; the failure is logged).
func (s *server) taskDeadLetter(r *http.Request, jobID string, taskID int64) *taskDeadLetterJSON {
	if s.cfg.DeadLetters == nil {
		return nil
	}
	msgs, err := s.cfg.DeadLetters.List(r.Context(), deadletters.Filter{JobID: jobID})
	if err != nil {
		s.log.WarnContext(r.Context(), "api: a task's dead letter could not be read", "job_id", jobID, "task_id", taskID, "error", err)
		return nil
	}
	var found *taskDeadLetterJSON
	for _, m := range msgs { // oldest first
		if m.TaskID != taskID && !slices.Contains(m.TaskIDs, taskID) {
			continue
		}
		found = &taskDeadLetterJSON{MessageID: m.MessageID, Reason: m.Reason, Error: m.Error, Attempts: m.Attempts}
		if !m.Time.IsZero() {
			found.Time = utc(&m.Time)
		}
	}
	return found
}
