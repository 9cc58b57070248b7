package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// Waiting reasons of a paused job (docs/operations.md, "Pausing a job or
// a queue").
const (
	// WaitingPaused is Waiting.Reason for a job that is paused itself
	// (POST /v1/jobs/{id}/pause); Since is when.
	WaitingPaused = "paused"
	// WaitingQueuePaused is Waiting.Reason for a job whose work queue is
	// paused (POST /v1/queues/{queue}/pause); Since is when.
	WaitingQueuePaused = "queue_paused"
)

// pausedJobJSON is the answer of the job pause routes: the job, and a
// warning when the workers could not be told.
type pausedJobJSON struct {
	jobDetailJSON
	Warnings []string `json:"warnings,omitempty"`
}

// queuePauseJSON is the answer of the queue pause routes.
type queuePauseJSON struct {
	Queue    string     `json:"queue"`
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at"` // null when not paused
	Warnings []string   `json:"warnings,omitempty"`
}

// pauseJob handles POST /v1/jobs/{id}/pause: no new task of the job
// starts until it is resumed.
func (s *server) pauseJob(w http.ResponseWriter, r *http.Request) {
	s.setJobPause(w, r, true)
}

// resumeJob handles POST /v1/jobs/{id}/resume.
func (s *server) resumeJob(w http.ResponseWriter, r *http.Request) {
	s.setJobPause(w, r, false)
}

// setJobPause pauses (pause) or resumes the request's job in the store,
// then tells the workers and waits for the broker's confirm before it
// answers, so that once the answer is in, every connected worker has the
// broadcast in its control queue.
func (s *server) setJobPause(w http.ResponseWriter, r *http.Request, pause bool) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	what, kind, change := "resume job", protocol.ControlResume, s.cfg.Store.ResumeJob
	if pause {
		what, kind, change = "pause job", protocol.ControlPause, s.cfg.Store.PauseJob
	}
	job, err := change(r.Context(), id)
	if errors.Is(err, warren.ErrConflict) {
		err = s.closedConflict(r, id, err)
	}
	if err != nil {
		s.storeError(w, r, err, what, "job_id", id)
		return
	}
	s.log.InfoContext(r.Context(), "api: "+what, "job_id", id)
	warnings := s.tellWorkers(r.Context(), protocol.Control{Type: kind, JobID: id})
	s.events.Notify(id)
	detail, err := s.jobDetail(r, job)
	if err != nil {
		s.storeError(w, r, err, "job errors", "job_id", id)
		return
	}
	writeJSON(w, http.StatusOK, pausedJobJSON{jobDetailJSON: detail, Warnings: warnings})
}

// pauseQueue handles POST /v1/queues/{queue}/pause: no new task of a job
// of the work queue starts until it is resumed, whatever the job.
func (s *server) pauseQueue(w http.ResponseWriter, r *http.Request) {
	s.setQueuePause(w, r, true)
}

// resumeQueue handles POST /v1/queues/{queue}/resume.
func (s *server) resumeQueue(w http.ResponseWriter, r *http.Request) {
	s.setQueuePause(w, r, false)
}

func (s *server) setQueuePause(w http.ResponseWriter, r *http.Request, pause bool) {
	queue := r.PathValue("queue")
	if err := protocol.CheckQueueName(queue); err != nil || !validText(queue) {
		writeError(w, errorf(http.StatusUnprocessableEntity, codeValidation, "queue: not a queue name: %q", queue))
		return
	}
	out := queuePauseJSON{Queue: queue, Paused: pause}
	kind := protocol.ControlResume
	if pause {
		kind = protocol.ControlPause
		p, err := s.cfg.Store.PauseQueue(r.Context(), queue)
		if err != nil {
			s.storeError(w, r, err, "pause queue", "queue", queue)
			return
		}
		at := p.PausedAt.UTC()
		out.PausedAt = &at
	} else if _, err := s.cfg.Store.ResumeQueue(r.Context(), queue); err != nil {
		s.storeError(w, r, err, "resume queue", "queue", queue)
		return
	}
	s.log.InfoContext(r.Context(), "api: "+kind+" queue", "queue", queue)
	out.Warnings = s.tellWorkers(r.Context(), protocol.Control{Type: kind, Queue: queue})
	writeJSON(w, http.StatusOK, out)
}

// tellWorkers broadcasts c (Config.Pause) and returns the answer's
// warnings: none once the broker confirmed it.
func (s *server) tellWorkers(ctx context.Context, c protocol.Control) []string {
	if s.cfg.Pause == nil {
		return nil
	}
	if err := s.cfg.Pause(ctx, c); err != nil {
		s.log.WarnContext(ctx, "api: the workers were not told", "type", c.Type, "job_id", c.JobID, "queue", c.Queue, "error", err)
		return []string{fmt.Sprintf("the %s is recorded, but the workers were not told (%v): the server tells them again within %s; "+
			"until then, tasks already in the broker may start", c.Type, err, protocol.PauseRefresh)}
	}
	return nil
}

// pausedWaiting is the waiting of open job when it or its work queue is
// paused, else nil.
func (s *server) pausedWaiting(ctx context.Context, job jobDetailJSON) *waitingJSON {
	if job.PausedAt != nil {
		return &waitingJSON{Reason: WaitingPaused, Queue: job.Queue, Since: *job.PausedAt}
	}
	queues, err := s.cfg.Store.PausedQueues(ctx)
	if err != nil {
		// The job's other waiting reasons are still worth showing.
		s.log.WarnContext(ctx, "api: read the paused queues", "error", err)
		return nil
	}
	for _, q := range queues {
		if q.Queue == job.Queue {
			return &waitingJSON{Reason: WaitingQueuePaused, Queue: q.Queue, Since: q.PausedAt.UTC()}
		}
	}
	return nil
}
