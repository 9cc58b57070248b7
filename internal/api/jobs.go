package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// maxErrorSample is how many failed tasks a job object lists.
const maxErrorSample = 10

// maxPageSize is the largest limit a list accepts.
const maxPageSize = 1000

// jobJSON is a job as the API shows it.
type jobJSON struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	State          warren.JobState `json:"state"`
	ExpectedTasks  int64           `json:"expected_tasks"`
	CompletedTasks int64           `json:"completed_tasks"`
	FailedTasks    int64           `json:"failed_tasks"`
	PendingTasks   int64           `json:"pending_tasks"`
	// SpawnedTasks counts the tasks the job's tasks spawned, within
	// ExpectedTasks (warren.Job.SpawnedTasks).
	SpawnedTasks int64 `json:"spawned_tasks"`
	// Reduce is the reducer's name, or the reduce task as an object.
	Reduce any `json:"reduce"`
	// ReduceState is the reduce task's progress (warren.Job.ReduceState),
	// absent for a job without a reduce task or before it starts.
	ReduceState             string          `json:"reduce_state,omitempty"`
	MaxRetries              int             `json:"max_retries"`
	ToleratedFailures       *int64          `json:"tolerated_failures"` // null when only the percent limits
	ToleratedFailurePercent float64         `json:"tolerated_failure_percent"`
	FailFast                bool            `json:"fail_fast"`
	TaskTimeout             float64         `json:"task_timeout"`
	BatchSize               int             `json:"batch_size"`
	Priority                int             `json:"priority"`
	MaxConcurrency          int             `json:"max_concurrency"` // 0 when uncapped
	Queue                   string          `json:"queue"`
	Retention               *float64        `json:"retention"`  // seconds; null when kept forever
	ExpiresAt               *time.Time      `json:"expires_at"` // null while open, or when kept forever
	Metadata                json.RawMessage `json:"metadata"`   // null when absent (or left out of a listing)
	// MetadataOmitted says that a listing left the job's metadata out
	// (over listMetadataBytes): GET /v1/jobs/{id} has it.
	MetadataOmitted bool       `json:"metadata_omitted,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at"`   // the first task's start, as its worker reported it
	PublishedAt     *time.Time `json:"published_at"` // when every task had been published
	LastFinishedAt  *time.Time `json:"last_finished_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	// Rate is finished tasks per second (warren.Job.Rate), null while it
	// cannot be measured: the one definition the dashboard and the CLI
	// show.
	Rate      *float64     `json:"rate"`
	ResultURL *string      `json:"result_url"`
	Error     *string      `json:"error"`   // why it failed or was cancelled; null otherwise
	Webhook   *webhookJSON `json:"webhook"` // null when none
	// Then is the job's follow-up (then.go), null for none; NextJob the
	// follow-up it started, null until it did; PreviousJob the job that
	// started it, null for the first job of a chain.
	Then        *thenJSON `json:"then"`
	NextJob     *string   `json:"next_job"`
	PreviousJob *string   `json:"previous_job"`
	// Paused says that the job itself is paused (warren.Job.PausedAt),
	// since PausedAt (null while it is not); a job of a paused queue
	// shows it in its waiting.
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at"`
}

// webhookJSON is a job's webhook as the API shows it: never its secret.
type webhookJSON struct {
	URL string `json:"url"`
}

// jobDetailJSON is a job with its sample of failed tasks, as GET
// /v1/jobs/{id} and cancel show it.
type jobDetailJSON struct {
	jobJSON
	Errors []taskErrorJSON `json:"errors"`
	// Waiting is why an open job makes no progress (waiting.go), null
	// when nothing is known to hold it up.
	Waiting *waitingJSON `json:"waiting"`
}

// taskErrorJSON is one failed task of a job's sample.
type taskErrorJSON struct {
	TaskID int64  `json:"task_id"`
	Error  string `json:"error"`
}

// jobList is the body of GET /v1/jobs.
type jobList struct {
	Jobs       []jobJSON `json:"jobs"`
	NextCursor *string   `json:"next_cursor"`
}

// taskJSON is a task as the API shows it.
type taskJSON struct {
	TaskID     int64            `json:"task_id"`
	State      warren.TaskState `json:"state"`
	Attempts   int              `json:"attempts"`
	Worker     string           `json:"worker"`
	Error      string           `json:"error"`
	QueuedAt   *time.Time       `json:"queued_at"`
	StartedAt  *time.Time       `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at"`
	Result     json.RawMessage  `json:"result"` // null until the task completed
}

// taskList is the body of GET /v1/jobs/{id}/tasks.
type taskList struct {
	Tasks      []taskJSON `json:"tasks"`
	NextCursor *string    `json:"next_cursor"`
}

func jobURL(id string) string    { return "/v1/jobs/" + id }
func resultURL(id string) string { return store.ResultLocation(id) }

// reduceTaskJSON is a reduce task as the API shows it.
type reduceTaskJSON struct {
	Task    string          `json:"task"`
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
}

// reduceJSON is a job's "reduce": the reducer's name, or its reduce task
// with the queue it runs on.
func reduceJSON(p warren.Policy) any {
	if p.ReduceTask == nil {
		return p.Reduce
	}
	payload := p.ReduceTask.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return reduceTaskJSON{Task: p.ReduceTask.Type, Queue: p.ReduceQueue(), Payload: payload}
}

// toJobJSON converts a stored job; retention is the server's retention of
// jobs that give none (Config.Retention).
func toJobJSON(j warren.Job, retention time.Duration) jobJSON {
	out := jobJSON{
		ID:                      j.ID,
		Type:                    j.Type,
		State:                   j.State,
		ExpectedTasks:           j.ExpectedTasks,
		CompletedTasks:          j.CompletedTasks,
		FailedTasks:             j.FailedTasks,
		PendingTasks:            j.PendingTasks(),
		SpawnedTasks:            j.SpawnedTasks,
		Reduce:                  reduceJSON(j.Policy),
		ReduceState:             j.ReduceState,
		MaxRetries:              j.Policy.MaxRetries,
		ToleratedFailurePercent: j.Policy.ToleratedFailurePercent,
		FailFast:                j.Policy.FailFast,
		TaskTimeout:             j.Policy.EffectiveTaskTimeout().Seconds(),
		BatchSize:               j.Policy.BatchSize,
		Priority:                j.Policy.EffectivePriority(),
		MaxConcurrency:          j.Policy.MaxConcurrency,
		Queue:                   j.Policy.EffectiveQueue(),
		Metadata:                j.Metadata,
		CreatedAt:               j.CreatedAt.UTC(),
		StartedAt:               utc(j.StartedAt),
		PublishedAt:             utc(j.PublishedAt),
		LastFinishedAt:          utc(j.LastFinishedAt),
		FinishedAt:              utc(j.FinishedAt),
		Paused:                  j.Paused(),
		PausedAt:                utc(j.PausedAt),
	}
	if r, ok := j.Rate(); ok {
		out.Rate = &r
	}
	if len(out.Metadata) == 0 {
		out.Metadata = nil
	}
	if j.Error != "" {
		msg := j.Error
		out.Error = &msg
	}
	if j.WebhookURL != "" {
		out.Webhook = &webhookJSON{URL: j.WebhookURL}
	}
	out.Then = toThenJSON(j.Then)
	if j.NextJob != "" {
		next := j.NextJob
		out.NextJob = &next
	}
	if j.PreviousJob != "" {
		prev := j.PreviousJob
		out.PreviousJob = &prev
	}
	if n := j.Policy.ToleratedFailures; n != warren.UnlimitedFailures {
		out.ToleratedFailures = &n
	}
	if j.State == warren.JobCompleted && j.ResultLocation != "" {
		u := resultURL(j.ID)
		out.ResultURL = &u
	}
	if r := cmp.Or(j.Policy.Retention, max(retention, 0)); r > 0 {
		secs := r.Seconds()
		out.Retention = &secs
	}
	if at, ok := store.ExpiresAt(j, retention); ok {
		at = at.UTC()
		out.ExpiresAt = &at
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// jobDetail returns job with its sample of failed tasks.
func (s *server) jobDetail(r *http.Request, job warren.Job) (jobDetailJSON, error) {
	return s.jobDetailContext(r.Context(), job)
}

// jobDetailContext is jobDetail outside a request (the events hub's).
func (s *server) jobDetailContext(ctx context.Context, job warren.Job) (jobDetailJSON, error) {
	out := jobDetailJSON{jobJSON: toJobJSON(job, s.cfg.Retention), Errors: []taskErrorJSON{}}
	out.Waiting = s.waiting(out)
	if out.FinishedAt == nil {
		if p := s.pausedWaiting(ctx, out); p != nil {
			out.Waiting = p // what holds the job above all
		}
	}
	if job.FailedTasks == 0 {
		return out, nil
	}
	sample, err := s.cfg.Store.JobErrors(ctx, job.ID, maxErrorSample)
	if err != nil {
		return jobDetailJSON{}, err
	}
	for _, e := range sample {
		out.Errors = append(out.Errors, taskErrorJSON{TaskID: e.TaskID, Error: e.Error})
	}
	return out, nil
}

// pathJobID returns the request's {id}. An id that no job can have (not
// UTF-8, or with control characters, which PostgreSQL would refuse to even
// look up) is answered 404 at once.
func pathJobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !validText(id) {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "job %q not found", id))
		return "", false
	}
	return id, true
}

// getJob handles GET /v1/jobs/{id}.
func (s *server) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	job, err := s.cfg.Store.GetJob(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "get job", "job_id", id)
		return
	}
	out, err := s.jobDetail(r, job)
	if err != nil {
		s.storeError(w, r, err, "job errors", "job_id", id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// listJobs handles GET /v1/jobs: a page of jobs, filtered by state,
// type, queue, creation time and search text (q).
func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	opts, aerr := listJobsOpts(r.URL.Query())
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	jobs, next, err := s.cfg.Store.ListJobs(r.Context(), opts)
	if err != nil && opts.Cursor != "" {
		err = s.blameCursor(r, err, func() error {
			first := opts
			first.Cursor, first.Limit = "", 1
			_, _, err := s.cfg.Store.ListJobs(r.Context(), first)
			return err
		})
	}
	if err != nil {
		s.storeError(w, r, err, "list jobs")
		return
	}
	out := jobList{Jobs: make([]jobJSON, 0, len(jobs)), NextCursor: cursorJSON(next)}
	for _, j := range jobs {
		jj := toJobJSON(j, s.cfg.Retention)
		if len(jj.Metadata) > listMetadataBytes {
			jj.Metadata, jj.MetadataOmitted = nil, true
		}
		out.Jobs = append(out.Jobs, jj)
	}
	writeJSON(w, http.StatusOK, out)
}

// listJobsOpts reads the query parameters of GET /v1/jobs, or the 400
// that names the first bad one.
func listJobsOpts(q url.Values) (store.ListJobsOpts, *apiError) {
	opts := store.ListJobsOpts{State: warren.JobState(q.Get("state")), Type: q.Get("type"), Queue: q.Get("queue"),
		Search: q.Get("q"), Cursor: q.Get("cursor")}
	if opts.State != "" && !opts.State.Valid() {
		return opts, errorf(http.StatusBadRequest, codeInvalidParameter,
			"state must be one of pending, running, completed, failed, cancelled; got %q", opts.State)
	}
	if !validText(opts.Type) {
		return opts, errorf(http.StatusBadRequest, codeInvalidParameter, "type must be UTF-8 without control characters")
	}
	if !validText(opts.Queue) {
		return opts, errorf(http.StatusBadRequest, codeInvalidParameter, "queue must be UTF-8 without control characters")
	}
	if err := store.ValidateSearch(opts.Search); err != nil {
		return opts, errorf(http.StatusBadRequest, codeInvalidParameter, "q: %v", err)
	}
	var aerr *apiError
	if opts.CreatedAfter, aerr = parseTimeParam(q, "created_after"); aerr != nil {
		return opts, aerr
	}
	if opts.CreatedBefore, aerr = parseTimeParam(q, "created_before"); aerr != nil {
		return opts, aerr
	}
	if opts.Limit, aerr = parseLimit(q.Get("limit")); aerr != nil {
		return opts, aerr
	}
	return opts, nil
}

// parseTimeParam reads query parameter name as an RFC 3339 time (the
// zero time when it is absent), or the 400 that says it is not one.
func parseTimeParam(q url.Values, name string) (time.Time, *apiError) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil && strings.Contains(v, " ") {
		// A zone offset's '+' unescaped in a URL arrives as a space.
		t, err = time.Parse(time.RFC3339Nano, strings.ReplaceAll(v, " ", "+"))
	}
	if err != nil {
		return time.Time{}, errorf(http.StatusBadRequest, codeInvalidParameter,
			"%s must be an RFC 3339 time such as 2026-12-02T06:45:00Z; got %q", name, v)
	}
	return t, nil
}

// listMetadataBytes is the most metadata a job shows in a listing: a page
// of jobs with large metadata each would be as large as all of it, and
// the dashboard lists jobs every two seconds. A job with more shows none
// there, and says so (metadata_omitted); GET /v1/jobs/{id} shows it all.
const listMetadataBytes = 1 << 10

// listTasks handles GET /v1/jobs/{id}/tasks.
func (s *server) listTasks(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	opts := store.ListTasksOpts{State: warren.TaskState(q.Get("state")), Cursor: q.Get("cursor")}
	if opts.State != "" && !opts.State.Valid() {
		writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter,
			"state must be one of pending, queued, completed, failed, cancelled; got %q", opts.State))
		return
	}
	limit, aerr := parseLimit(q.Get("limit"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	opts.Limit = limit
	tasks, next, err := s.cfg.Store.ListTasks(r.Context(), id, opts)
	if err != nil && opts.Cursor != "" && !errors.Is(err, warren.ErrNotFound) {
		err = s.blameCursor(r, err, func() error {
			_, _, err := s.cfg.Store.ListTasks(r.Context(), id, store.ListTasksOpts{State: opts.State, Limit: 1})
			return err
		})
	}
	if err != nil {
		s.storeError(w, r, err, "list tasks", "job_id", id)
		return
	}
	out := taskList{Tasks: make([]taskJSON, 0, len(tasks)), NextCursor: cursorJSON(next)}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, taskJSON{
			TaskID:     t.TaskID,
			State:      t.State,
			Attempts:   t.Attempts,
			Worker:     t.Worker,
			Error:      t.Error,
			QueuedAt:   utc(t.QueuedAt),
			StartedAt:  utc(t.StartedAt),
			FinishedAt: utc(t.FinishedAt),
			Result:     t.Result,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// blameCursor decides whether a list call failed because of its cursor.
// The store has no error value for a malformed cursor, so the call is
// repeated without one (retry): when that works, the cursor was to blame
// and the answer is a 400; otherwise retry's error stands, so an unknown
// job is still a 404 and a store outage a 503.
func (s *server) blameCursor(r *http.Request, err error, retry func() error) error {
	if r.Context().Err() != nil {
		return err
	}
	if retryErr := retry(); retryErr != nil {
		return retryErr
	}
	s.log.DebugContext(r.Context(), "api: rejected a cursor", "error", err)
	return errorf(http.StatusBadRequest, codeInvalidParameter, "cursor is not a next_cursor this server returned")
}

// parseLimit parses a limit query parameter: empty means the store's
// default page size.
func parseLimit(s string) (int, *apiError) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, errorf(http.StatusBadRequest, codeInvalidParameter, "limit must be an integer from 1 to %d; got %q", maxPageSize, s)
	}
	return n, nil
}

// cursorJSON is a next cursor as JSON: null at the end of a list.
func cursorJSON(next string) *string {
	if next == "" {
		return nil
	}
	return &next
}

// getResult handles GET /v1/jobs/{id}/result: the reduced result of a
// completed job, as stored.
func (s *server) getResult(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	job, err := s.cfg.Store.GetJob(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "get job", "job_id", id)
		return
	}
	switch job.State {
	case warren.JobCompleted:
	case warren.JobFailed, warren.JobCancelled:
		writeError(w, errorf(http.StatusConflict, codeConflict, "job %q is %s: it has no result", id, job.State))
		return
	default:
		writeError(w, errorf(http.StatusConflict, codeConflict, "job %q is %s: its result is available once it is completed", id, job.State))
		return
	}
	chunk, size, err := s.cfg.Store.JobResultRange(r.Context(), id, 0, resultChunkBytes)
	if errors.Is(err, warren.ErrNotFound) {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "job %q completed without a stored result", id))
		return
	}
	if err != nil {
		s.storeError(w, r, err, "job result", "job_id", id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	s.streamResult(w, r, id, chunk, size)
}

// resultChunkBytes is how much of a result the API reads from the store
// and writes at a time: what one request for a result holds, however
// large the result.
const resultChunkBytes = 256 << 10

// streamResult writes job id's result of size bytes, whose first chunk
// is read already, a chunk at a time, each under Config.ResultWriteTimeout:
// a client that reads too slowly is cut, so that no reader holds the
// server's memory, or a connection, for ever. A result that changes size
// meanwhile (a redrive closed the job again) is cut too: its client sees
// fewer bytes than Content-Length said.
func (s *server) streamResult(w http.ResponseWriter, r *http.Request, id string, chunk []byte, size int64) {
	rc := http.NewResponseController(w)
	for off := int64(0); ; {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.ResultWriteTimeout))
		if _, err := w.Write(chunk); err != nil {
			s.log.InfoContext(r.Context(), "api: result not read in time; cut", "job_id", id, "written", off, "size", size, "error", err)
			// Closed at once: net/http would flush what is left first,
			// with no deadline.
			panic(http.ErrAbortHandler)
		}
		off += int64(len(chunk))
		if off >= size {
			// The deadline must not outlive the response: the
			// connection may serve more requests, and net/http sets
			// none of its own here.
			if err := rc.Flush(); err != nil {
				panic(http.ErrAbortHandler)
			}
			_ = rc.SetWriteDeadline(time.Time{})
			return
		}
		next, n, err := s.cfg.Store.JobResultRange(r.Context(), id, off, resultChunkBytes)
		if err == nil && n != size {
			err = fmt.Errorf("the result changed size from %d to %d bytes", size, n)
		}
		if err == nil && len(next) == 0 {
			err = fmt.Errorf("the result ended at %d of %d bytes", off, size)
		}
		if err != nil {
			s.log.WarnContext(r.Context(), "api: result cut short", "job_id", id, "written", off, "size", size, "error", err)
			panic(http.ErrAbortHandler) // the client must see a short body, not a complete one
		}
		chunk = next
	}
}

// cancelJob handles POST /v1/jobs/{id}/cancel.
func (s *server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	job, err := s.cfg.Store.CancelJob(r.Context(), id)
	if errors.Is(err, warren.ErrConflict) {
		err = s.closedConflict(r, id, err)
	}
	if err != nil {
		s.storeError(w, r, err, "cancel job", "job_id", id)
		return
	}
	s.log.InfoContext(r.Context(), "api: job cancelled", "job_id", id)
	if s.cfg.OnCancel != nil {
		s.cfg.OnCancel(job)
	}
	out, err := s.jobDetail(r, job)
	if err != nil {
		s.storeError(w, r, err, "job errors", "job_id", id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// closedConflict turns a conflict from cancelling job id into a 409 that
// names the state the job is in.
func (s *server) closedConflict(r *http.Request, id string, err error) error {
	job, getErr := s.cfg.Store.GetJob(r.Context(), id)
	if getErr != nil {
		return err
	}
	return errorf(http.StatusConflict, codeConflict, "job %q is already %s", id, job.State)
}

// redriveJob handles POST /v1/jobs/{id}/redrive: the failed tasks of a
// closed job go back to the outbox and the job runs again.
func (s *server) redriveJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	job, requeued, err := s.cfg.Store.RedriveJob(r.Context(), id)
	if errors.Is(err, warren.ErrConflict) {
		err = s.redriveConflict(r, id, err)
	}
	if err != nil {
		s.storeError(w, r, err, "redrive job", "job_id", id)
		return
	}
	s.log.InfoContext(r.Context(), "api: job redriven", "job_id", id, "tasks", requeued)
	if s.cfg.OnRedrive != nil {
		s.cfg.OnRedrive(id)
	}
	out, err := s.jobDetail(r, job)
	if err != nil {
		s.storeError(w, r, err, "job errors", "job_id", id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// redriveConflict turns a conflict from redriving job id into a 409 that
// says why the job cannot be redriven.
func (s *server) redriveConflict(r *http.Request, id string, err error) error {
	job, getErr := s.cfg.Store.GetJob(r.Context(), id)
	if getErr != nil {
		return err
	}
	switch job.State {
	case warren.JobPending, warren.JobRunning:
		return errorf(http.StatusConflict, codeConflict, "job %q is %s: only a closed job with failed tasks can be redriven", id, job.State)
	case warren.JobCancelled:
		return errorf(http.StatusConflict, codeConflict, "job %q is cancelled: a cancelled job cannot be redriven", id)
	}
	return errorf(http.StatusConflict, codeConflict, "job %q is %s without failed tasks: there is nothing to redrive", id, job.State)
}

// deleteJob handles DELETE /v1/jobs/{id}: a closed job is deleted at once
// with its reduced result and its idempotency key, and its tasks soon
// after (the store purges them in batches); an open job must be
// cancelled first.
func (s *server) deleteJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	err := s.cfg.Store.DeleteJob(r.Context(), id)
	if errors.Is(err, store.ErrJobOpen) {
		err = s.openConflict(r, id, err)
	}
	if err != nil {
		s.storeError(w, r, err, "delete job", "job_id", id)
		return
	}
	s.log.InfoContext(r.Context(), "api: job deleted", "job_id", id)
	if s.cfg.OnDelete != nil {
		s.cfg.OnDelete(id)
	}
	w.WriteHeader(http.StatusNoContent)
}

// openConflict turns store.ErrJobOpen from deleting job id into a 409 that
// names the job's state and what to do.
func (s *server) openConflict(r *http.Request, id string, err error) error {
	job, getErr := s.cfg.Store.GetJob(r.Context(), id)
	if getErr != nil {
		return err
	}
	return errorf(http.StatusConflict, codeConflict, "job %q is %s: only a closed job can be deleted; cancel it first", id, job.State)
}
