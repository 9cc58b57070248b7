package engine

import (
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// AttemptWrite is one attempt row to record (store.Store.TaskAttempts),
// every field final: a repeat of its (task, attempt) at the same
// generation or an earlier one is a no-op, one of a later generation
// replaces the row.
type AttemptWrite struct {
	store.TaskRef
	Attempt    int
	Generation int
	Outcome    warren.AttemptOutcome
	Worker     string
	StartedAt  *time.Time
	FinishedAt time.Time
	Error      string
	Traceback  string
	// PruneThrough, when > 0, is the attempt number through which the
	// task's older attempt rows are deleted, after this one is written:
	// what keeps only the last KeepAttempts.
	PruneThrough int
}

// retryAttempt is the attempt row that retry outcome o of task row
// leaves.
func retryAttempt(o store.Outcome, row OutcomeTask, now time.Time) AttemptWrite {
	a := AttemptWrite{TaskRef: row.TaskRef, Attempt: max(o.Attempts, 1), Generation: row.Generation,
		Outcome: warren.AttemptRetried, Worker: o.Worker, StartedAt: o.StartedAt, FinishedAt: now,
		Error: o.Error, Traceback: o.Traceback}
	if o.FinishedAt != nil {
		a.FinishedAt = *o.FinishedAt
	}
	return bounded(a, o.KeepAttempts)
}

// terminalAttempt is the attempt row of the run that applied outcome o
// made write w: its attempt number is the task's attempts as written.
func terminalAttempt(o store.Outcome, w TaskWrite) AttemptWrite {
	outcome := warren.AttemptCompleted
	if w.State == warren.TaskFailed {
		outcome = warren.AttemptFailed
	}
	return bounded(AttemptWrite{TaskRef: w.TaskRef, Attempt: w.Attempts, Generation: w.Generation,
		Outcome: outcome, Worker: w.Worker, StartedAt: w.StartedAt, FinishedAt: w.FinishedAt,
		Error: w.Error, Traceback: o.Traceback}, o.KeepAttempts)
}

// keepsRow reports whether the run of applied write w needs an attempt
// row: every run but a map task's completing first run, the hot path,
// which costs no row at all. Its attempt is its task row's (a completed
// map task's row is final: nothing reopens it), which the reads give as
// it (WithFirstRun). A reduce task's completed row may be reset by a
// redrive's new reduce, so its run gets a row.
func keepsRow(w TaskWrite) bool {
	return w.State != warren.TaskCompleted || w.Attempts > 1 || w.TaskID == warren.ReduceTaskID
}

// WithFirstRun returns the attempts kept of task t (oldest first) with,
// for a map task completed on its first run, that run, which has no row
// (keepsRow): its worker and times are the task row's. The drivers'
// TaskAttempts read through it.
func WithFirstRun(t warren.TaskRecord, kept []warren.TaskAttempt) []warren.TaskAttempt {
	if t.State != warren.TaskCompleted || t.Attempts != 1 || t.TaskID == warren.ReduceTaskID || t.FinishedAt == nil {
		return kept
	}
	for _, a := range kept {
		if a.Attempt == 1 {
			return kept
		}
	}
	return append(kept, warren.TaskAttempt{Attempt: 1, Generation: t.Generation, Outcome: warren.AttemptCompleted,
		Worker: t.Worker, StartedAt: t.StartedAt, FinishedAt: *t.FinishedAt})
}

// bounded returns a with its error and traceback within the store's caps
// and the prune that keeps the task's last keep attempts (<= 0:
// store.DefaultKeepAttempts).
func bounded(a AttemptWrite, keep int) AttemptWrite {
	if keep <= 0 {
		keep = store.DefaultKeepAttempts
	}
	if a.Attempt > keep {
		a.PruneThrough = a.Attempt - keep
	}
	a.Error = headBytes(a.Error, store.MaxAttemptErrorBytes)
	a.Traceback = tailBytes(a.Traceback, store.MaxTracebackBytes)
	return a
}

// headBytes returns the first n bytes of s at most, cut at a character's
// boundary.
func headBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailBytes returns the last n bytes of s at most, cut at a character's
// boundary.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// distinctAttempts returns attempts with one row per task and attempt
// number, the first of those of the latest generation, in first-seen
// order: a batch may carry a message twice, and a driver's one set-wise
// insert must not meet its own row again (PostgreSQL refuses an ON
// CONFLICT that would).
func distinctAttempts(attempts []AttemptWrite) []AttemptWrite {
	type key struct {
		ref     store.TaskRef
		attempt int
	}
	at := make(map[key]int, len(attempts))
	out := attempts[:0:0]
	for _, a := range attempts {
		k := key{a.TaskRef, a.Attempt}
		i, seen := at[k]
		switch {
		case !seen:
			at[k] = len(out)
			out = append(out, a)
		case a.Generation > out[i].Generation:
			out[i] = a
		}
	}
	return out
}
