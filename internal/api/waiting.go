package api

import "time"

// WaitingNoConsumer is Waiting.Reason for a job whose work queue has no
// consumer: no worker runs, it consumes other queues, or it has another
// WARREN_PREFIX.
const WaitingNoConsumer = "no_consumer"

// Waiting is why an open job makes no progress, as GET /v1/jobs/{id}
// shows it in its "waiting" field (null when nothing is known to hold it
// up).
type Waiting struct {
	// Reason is WaitingNoConsumer or WaitingNoWorkerForType (or, in a
	// job's JSON, WaitingPaused or WaitingQueuePaused, which the API
	// finds itself).
	Reason string
	// Queue is the work queue (protocol queue name) that has no consumer,
	// or no live worker serving Type.
	Queue string
	// Type is the task type no live worker serves, for
	// WaitingNoWorkerForType; "" otherwise.
	Type string
	// Since is the first reading of the queue that found no consumer.
	Since time.Time
}

// waitingJSON is Waiting in a job's JSON.
type waitingJSON struct {
	Reason string    `json:"reason"`
	Queue  string    `json:"queue"`
	Type   string    `json:"type,omitempty"` // no_worker_for_type only
	Since  time.Time `json:"since"`
}

// waiting is why job (open) waits, from Config.Waiting, or nil.
func (s *server) waiting(job jobDetailJSON) *waitingJSON {
	if job.FinishedAt != nil {
		return nil
	}
	if s.cfg.Waiting == nil {
		return s.unservedWaiting(job)
	}
	w := s.cfg.Waiting(job.ID, job.Queue)
	if w == nil {
		return s.unservedWaiting(job)
	}
	return &waitingJSON{Reason: w.Reason, Queue: w.Queue, Type: w.Type, Since: w.Since.UTC()}
}
