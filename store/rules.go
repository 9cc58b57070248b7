package store

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren"
)

// The rules below are the business rules every driver must apply alike.
// They live here, in Go, so that a driver's SQL only selects candidates and
// applies guarded updates: a rule written in two SQL dialects drifts.

// ReadyToClose reports whether open job j can close: every task finished,
// or the job fails fast and its failures are over its tolerance
// (warren.Policy.Tolerates). JobsToClose lists exactly the open jobs for
// which it holds.
func ReadyToClose(j warren.Job) bool {
	return j.Finished() || (j.Policy.FailFast && !j.Policy.Tolerates(j.FailedTasks, j.ExpectedTasks))
}

// BecameReady reports whether job j, whose counters were just moved by
// completed and failed tasks, is open and ready to close and was not ready
// before the move. ApplyOutcomes and ReconcileStale list exactly these jobs
// in ReadyToClose, so a job is reported ready once, by the batch that made
// it so, however many batches touch it afterwards.
func BecameReady(j warren.Job, completed, failed int64) bool {
	if j.State.Terminal() || !ReadyToClose(j) {
		return false
	}
	before := j
	before.CompletedTasks -= completed
	before.FailedTasks -= failed
	return !ReadyToClose(before)
}

// CancelledError is the Error CancelJob records on the job it cancels.
const CancelledError = "job cancelled"

// LostError is the error of a task that ReconcileStale fails as lost.
const LostError = "lost: no result within the task timeout"

// StaleTask is a queued task that ReconcileStale found past its job's task
// timeout, with what the retry-or-fail decision needs.
type StaleTask struct {
	TaskRef
	// Attempts is the task's recorded runs, not counting the lost one.
	Attempts int
	// MaxRetries is the job's retry budget (warren.Policy.MaxRetries).
	MaxRetries int
}

// Cutoff is the time that, less a job's task timeout, both a task's
// queued_at and s.Busy must be before for the task to be stale: Now less
// Grace. ReconcileStale's drivers compare with it in SQL.
func (s Staleness) Cutoff() time.Time {
	return s.Now.Add(-s.Grace)
}

// SplitLost decides what becomes of stale tasks whose run was lost. The
// lost run counts as an attempt: a task whose Attempts+1 is at most its
// MaxRetries goes back to pending (requeue), any other fails as lost with
// LostError (fail). Both keep the order of tasks.
func SplitLost(tasks []StaleTask) (requeue, fail []TaskRef) {
	for _, t := range tasks {
		if t.Attempts+1 <= t.MaxRetries {
			requeue = append(requeue, t.TaskRef)
		} else {
			fail = append(fail, t.TaskRef)
		}
	}
	return requeue, fail
}

// PageSize returns the page size for a requested limit: limit, or
// DefaultPageSize when limit is not positive, as the Store methods whose
// doc says so take it.
func PageSize(limit int) int {
	if limit <= 0 {
		return DefaultPageSize
	}
	return limit
}

// Reopenable reports whether a job closed in state can be reopened by
// RedriveJob or ReopenTask: failed, or completed (with tolerated
// failures). A cancelled job stays cancelled, and an open job has nothing
// to reopen.
func Reopenable(state warren.JobState) bool {
	return state == warren.JobFailed || state == warren.JobCompleted
}

// ResultLocation is the Job.ResultLocation that FinishJob records for job
// jobID when it stores a reduced result: the server's path for fetching it.
func ResultLocation(jobID string) string {
	return "/v1/jobs/" + jobID + "/result"
}

// ErrKeyReused is CreateJob's error for an idempotency key that names a
// job created by another request (another RequestHash). It wraps
// warren.ErrConflict.
var ErrKeyReused = fmt.Errorf("%w: the idempotency key was used for a different request", warren.ErrConflict)

// Replay decides CreateJob's answer to a submission whose idempotency key
// names first, created by a request whose digest was firstHash: first
// itself when the requests match (or either has no digest), else
// ErrKeyReused.
func Replay(first warren.Job, firstHash string, spec NewJob) (warren.Job, error) {
	if firstHash != "" && spec.RequestHash != "" && firstHash != spec.RequestHash {
		return warren.Job{}, fmt.Errorf("job %s: %w", first.ID, ErrKeyReused)
	}
	return first, nil
}

// ValidateNewJob returns an error saying what is wrong with spec when it
// cannot become a job: its policy is not valid (warren.Policy.Validate),
// or its webhook has no URL or secret, or one too long.
// CreateJob refuses such a spec before it reads or writes anything: its
// tasks are not consumed, and its idempotency key is not looked up.
func ValidateNewJob(spec NewJob) error {
	if err := spec.Policy.Validate(); err != nil {
		return fmt.Errorf("invalid policy: %w", err)
	}
	if w := spec.Webhook; w != nil {
		switch {
		case w.URL == "" || len(w.URL) > MaxWebhookURLBytes:
			return fmt.Errorf("invalid webhook: the url must be 1 to %d bytes", MaxWebhookURLBytes)
		case w.Secret == "" || len(w.Secret) > MaxWebhookSecretBytes:
			return fmt.Errorf("invalid webhook: the secret must be 1 to %d bytes", MaxWebhookSecretBytes)
		case StoredText(w.URL) != w.URL || StoredText(w.Secret) != w.Secret:
			return fmt.Errorf("invalid webhook: the url and the secret must be UTF-8 without NUL")
		}
	}
	return nil
}

// ValidateFinishState returns an error naming state unless it is
// warren.JobCompleted or warren.JobFailed, the states FinishJob closes a
// job in: FinishJob refuses any other before it writes anything, or even
// looks the job up. A job is cancelled by CancelJob, which also records
// why, not by FinishJob.
func ValidateFinishState(state warren.JobState) error {
	if state != warren.JobCompleted && state != warren.JobFailed {
		return fmt.Errorf("state %q is not a closed state FinishJob sets (completed or failed)", state)
	}
	return nil
}

// ValidateOutcomes returns an error naming the first outcome whose State is
// neither warren.TaskCompleted nor warren.TaskFailed: ApplyOutcomes fails
// such a batch whole, before it writes anything.
func ValidateOutcomes(outcomes []Outcome) error {
	for i, o := range outcomes {
		if o.State != warren.TaskCompleted && o.State != warren.TaskFailed {
			return fmt.Errorf("outcome %d (job %q task %d): state must be completed or failed, got %q", i, o.JobID, o.TaskID, o.State)
		}
	}
	return nil
}

// StoredText returns text from outside (a worker's error or name, a
// reducer's error quoting a result) as both drivers store it: valid UTF-8
// without NUL bytes, which PostgreSQL refuses in text (SQLSTATE 22021) and
// would make a whole outcome batch fail again and again. Each run of
// bytes that is not valid UTF-8 becomes one U+FFFD, and so does each NUL
// byte; valid text without NUL comes back as it is.
func StoredText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// SanitizeOutcomes returns outcomes with their Error and Worker as
// StoredText makes them, for ApplyOutcomes to store: outcomes itself when
// none needs it, else a copy (the caller's slice is left as it is).
// Results are not text: they are stored byte for byte.
func SanitizeOutcomes(outcomes []Outcome) []Outcome {
	var clean []Outcome
	for i, o := range outcomes {
		e, w := StoredText(o.Error), StoredText(o.Worker)
		if e == o.Error && w == o.Worker {
			continue
		}
		if clean == nil {
			clean = slices.Clone(outcomes)
		}
		clean[i].Error, clean[i].Worker = e, w
	}
	if clean == nil {
		return outcomes
	}
	return clean
}
