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
	// Reason is WaitingNoConsumer.
	Reason string
	// Queue is the work queue (protocol queue name) that has no consumer.
	Queue string
	// Since is the first reading of the queue that found no consumer.
	Since time.Time
}

// waitingJSON is Waiting in a job's JSON.
type waitingJSON struct {
	Reason string    `json:"reason"`
	Queue  string    `json:"queue"`
	Since  time.Time `json:"since"`
}

// waiting is why job (open) waits, from Config.Waiting, or nil.
func (s *server) waiting(job jobDetailJSON) *waitingJSON {
	if s.cfg.Waiting == nil || job.FinishedAt != nil {
		return nil
	}
	w := s.cfg.Waiting(job.ID, job.Queue)
	if w == nil {
		return nil
	}
	return &waitingJSON{Reason: w.Reason, Queue: w.Queue, Since: w.Since.UTC()}
}
