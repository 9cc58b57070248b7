package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// FollowUpTx holds the primitives that start a job's follow-up
// (FinishJob), beside CreateTx's, which write the follow-up itself.
type FollowUpTx interface {
	// FollowUpOf reads job jobID's follow-up spec as it was stored, its
	// webhook secret included, and the job's own webhook secret. An
	// unknown job wraps warren.ErrNotFound.
	FollowUpOf(ctx context.Context, jobID string) (FollowUpRow, error)
	// SetNextJob records that job jobID started job next (its next_job).
	// It moves no version: it is written in the transaction that closes
	// the job, which moves it.
	SetNextJob(ctx context.Context, jobID, next string) error
}

// FollowUpRow is what FollowUpOf reads.
type FollowUpRow struct {
	// Then is the job's follow-up spec (store.NewJob.Then), nil for none.
	Then *store.NewJob
	// WebhookSecret is the job's own webhook secret ("" without one),
	// which a follow-up that names no webhook inherits with its URL.
	WebhookSecret string
}

// startFollowUp creates the follow-up of job prev, just closed as
// completed with result at at, in the close's transaction, as
// store.Store.FinishJob promises: a new job of prev's follow-up spec, one
// task per element of result; or, when result cannot make its tasks
// (followUpProblem), the job closed at once as failed with the reason.
// prev's next_job names it either way.
func startFollowUp(ctx context.Context, tx Tx, prev warren.Job, result []byte, at time.Time) error {
	row, err := tx.FollowUpOf(ctx, prev.ID)
	if err != nil {
		return fmt.Errorf("read the follow-up of job %s: %w", prev.ID, err)
	}
	spec := row.Then
	if spec == nil {
		return nil
	}
	if spec.Webhook == nil && prev.WebhookURL != "" {
		spec.Webhook = &store.Webhook{URL: prev.WebhookURL, Secret: row.WebhookSecret}
	}
	// The chain is one trace: its jobs' spans continue the submission's.
	spec.TraceParent, spec.TraceState = prev.TraceParent, prev.TraceState
	next := newJobRow(*spec, at)
	next.Job.PreviousJob = prev.ID
	inserted, err := tx.InsertJob(ctx, next)
	if err != nil {
		return fmt.Errorf("create the follow-up of job %s: %w", prev.ID, err)
	}
	if !inserted { // a follow-up has no idempotency key
		return fmt.Errorf("create the follow-up of job %s: its row was not written", prev.ID)
	}
	id := next.Job.ID
	if problem := followUpProblem(result, spec.MaxTaskBytes, spec.MaxTasks); problem != "" {
		j, ok, err := tx.CloseJob(ctx, JobClose{ID: id, State: warren.JobFailed, FinishedAt: at,
			Error: storedText(problem), Version: AnyVersion})
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("fail the follow-up %s of job %s: the close did not apply", id, prev.ID)
		}
		if err := deliverClosed(ctx, tx, j); err != nil {
			return err
		}
	} else if _, err := insertTasks(ctx, tx, id, resultElements(result)); err != nil {
		return err
	}
	return tx.SetNextJob(ctx, prev.ID, id)
}

// followUpProblem says why result cannot be the tasks of a follow-up
// whose task payloads may be maxTaskBytes long and which may have
// maxTasks tasks (0: no limit, for either), or "" when it can: it must be
// a JSON array of at least one element (a job has at least one task, as
// a submission must) and at most maxTasks, each within maxTaskBytes and
// protocol.MaxPayloadDepth. It reads the elements one at a time, never a
// second copy of the whole result.
func followUpProblem(result []byte, maxTaskBytes, maxTasks int64) string {
	const prefix = "the previous job's result "
	dec := json.NewDecoder(bytes.NewReader(result))
	tok, err := dec.Token()
	switch {
	case err != nil:
		return prefix + "is not JSON, so not an array of task payloads"
	case tok != json.Delim('['):
		return prefix + "is not a JSON array (it is " + tokenKind(tok) + "): a follow-up job has one task per element of its previous job's result"
	}
	n := 0
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return prefix + "is not a valid JSON array: " + err.Error()
		}
		n++
		if maxTasks > 0 && int64(n) > maxTasks {
			return fmt.Sprintf(prefix+"has more than %d elements, the most tasks a job may have (WARREN_MAX_JOB_TASKS)", maxTasks)
		}
		if maxTaskBytes > 0 && int64(len(raw)) > maxTaskBytes {
			return fmt.Sprintf(prefix+"has element %d of %d bytes, over the limit of %d bytes per task", n, len(raw), maxTaskBytes)
		}
		if d := protocol.Depth(raw); d > protocol.MaxPayloadDepth {
			return fmt.Sprintf(prefix+"has element %d nested %d levels deep: payloads may nest at most %d levels", n, d, protocol.MaxPayloadDepth)
		}
	}
	if n == 0 {
		return prefix + "is an empty array: a job has at least one task"
	}
	return ""
}

// resultElements yields the elements of result, a JSON array that
// followUpProblem accepted, in order, one at a time.
func resultElements(result []byte) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		dec := json.NewDecoder(bytes.NewReader(result))
		if _, err := dec.Token(); err != nil {
			yield(nil, err)
			return
		}
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				yield(nil, err)
				return
			}
			if !yield(raw, nil) {
				return
			}
		}
	}
}

// tokenKind names the JSON kind of a token from json.Decoder.Token.
func tokenKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// validateThen returns an error naming what is wrong with spec's
// follow-ups: one that cannot become a job (validateNewJob), one with an
// id, idempotency key, request hash or trace context of its own, or a
// chain longer than warren.MaxChainLength.
func validateThen(spec store.NewJob) error {
	length := 1
	for path, t := "then", spec.Then; t != nil; path, t = path+".then", t.Then {
		length++
		switch {
		case length > warren.MaxChainLength:
			return fmt.Errorf("invalid %s: a chain holds at most %d jobs", path, warren.MaxChainLength)
		case t.ID != "" || t.IdempotencyKey != "" || t.RequestHash != "":
			return fmt.Errorf("invalid %s: a follow-up has no id, idempotency key or request hash of its own", path)
		case t.TraceParent != "" || t.TraceState != "":
			return fmt.Errorf("invalid %s: a follow-up continues its previous job's trace", path)
		case t.MaxTaskBytes < 0 || t.MaxTasks < 0:
			return fmt.Errorf("invalid %s: max task bytes and max tasks must be >= 0", path)
		}
		if err := validateJob(*t); err != nil {
			return fmt.Errorf("invalid %s: %w", path, err)
		}
	}
	return nil
}
