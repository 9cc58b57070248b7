package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// CreateTx holds the primitives that create a job (CreateJob).
type CreateTx interface {
	// InsertJob writes a new job's row, j, with no task expected yet,
	// and returns true; it writes nothing and returns false when another
	// job holds j's idempotency key, even one whose transaction has not
	// committed yet (the insert waits for it to end, so that two creates
	// of one key never both write). A job that holds j's id is an error
	// wrapping ErrIDTaken. The key is looked at first: a job that holds
	// both is false, not an error.
	InsertJob(ctx context.Context, j NewJobRow) (bool, error)
	// JobByKey reads the job that holds an idempotency key, with the
	// digest of the request that created it; false when none does.
	JobByKey(ctx context.Context, key string) (KeyedJob, bool, error)
	// DeletedTasksLeft reports whether a deleted job of that id still
	// has task rows to purge (store.Store.PurgeDeletedTasks).
	DeletedTasksLeft(ctx context.Context, jobID string) (bool, error)
	// InsertTasks writes a pending task row of job jobID for each
	// payload tasks yields, with task ids 1..n in that order, and
	// returns n. It holds only a batch of payloads at a time, never all
	// of them. The first error tasks yields is returned as it is. A task
	// row of that job id that exists already (a deleted job's) is an
	// error wrapping ErrTasksLeft.
	InsertTasks(ctx context.Context, jobID string, tasks iter.Seq2[json.RawMessage, error]) (int64, error)
	// SetExpectedTasks records that job jobID has n tasks and returns
	// its row as written.
	SetExpectedTasks(ctx context.Context, jobID string, n int64) (warren.Job, error)
}

// ErrIDTaken is what InsertJob returns (wrapped) when a job holds the
// new job's id.
var ErrIDTaken = errors.New("a job holds that id")

// ErrTasksLeft is what InsertTasks returns (wrapped) when task rows of
// the new job's id exist: a deleted job's, not purged yet.
var ErrTasksLeft = errors.New("task rows of that job id exist")

// NewJobRow is a new job's row, as InsertJob writes it.
type NewJobRow struct {
	// Job holds the row's columns: its id, type, policy, metadata (nil
	// for none), idempotency key ("" for none), creation time, webhook
	// URL and trace context; pending, no task expected yet, nothing
	// counted.
	Job warren.Job
	// WebhookSecret signs the job's webhook deliveries ("" without a
	// webhook).
	WebhookSecret string
	// RequestHash is the submission's digest (store.NewJob.RequestHash).
	RequestHash string
	// Then is the job's follow-up spec (store.NewJob.Then), its webhook
	// secrets included; nil for none. Job.PreviousJob is the job whose
	// close starts this one ("" for a submitted job).
	Then *store.NewJob
}

// KeyedJob is the job that holds an idempotency key.
type KeyedJob struct {
	// Job is the job's row.
	Job warren.Job
	// RequestHash is the digest of the request that created it.
	RequestHash string
}

// StagedJob is what Driver.StageJob readied for a create.
type StagedJob struct {
	// Holder is the job that holds the key, when the driver looked it up
	// and one does; nil otherwise. Tasks are then not read.
	Holder *KeyedJob
	// Tasks are the tasks to write, to be read once in the transaction
	// (nil with a Holder).
	Tasks iter.Seq2[json.RawMessage, error]
	// Release frees what staging the tasks held; nil when it held
	// nothing.
	Release func()
	// Small says the tasks are few (at most GroupTasks) and may be read
	// more than once: the job may share its transaction with other
	// creates (group commit), and be written again alone when that
	// transaction fails.
	Small bool
}

// GroupTasks is the most tasks a job created in a group transaction with
// others may have (StagedJob.Small), and MaxGroup the most jobs in one.
const (
	GroupTasks = 1000
	MaxGroup   = 64
)

// DeliveryExecutor holds the primitives that settle webhook deliveries
// (ClaimDeliveries, RecordDeliveryAttempt), part of a Driver's Executor:
// each is atomic by itself, so a poll of the deliverer is one statement
// on PostgreSQL.
type DeliveryExecutor interface {
	// ClaimDeliveries claims up to c.Limit deliveries that are pending and
	// due at c.Due (next attempt not after it), the longest due first,
	// each to this claim alone even when several claim at once: their
	// attempts go up by one and they are due again at c.Until. It
	// returns them with their bodies and their jobs' webhooks, in no
	// particular order.
	ClaimDeliveries(ctx context.Context, c DeliveryClaim) ([]store.ClaimedDelivery, error)
	// RecordDelivery writes r into its delivery while that delivery is
	// pending and its attempts are still r.Attempt, and reports whether
	// it did (false for an unknown delivery too).
	RecordDelivery(ctx context.Context, r DeliveryRecord) (bool, error)
}

// DeliveryClaim is what ClaimDeliveries claims.
type DeliveryClaim struct {
	// Due is the time the claimed deliveries are due at.
	Due time.Time
	// Until is when they are due again, should their attempts never be
	// recorded.
	Until time.Time
	// Limit is the most deliveries claimed.
	Limit int
}

// DeliveryRecord is the end of an attempt, as RecordDelivery writes it.
type DeliveryRecord struct {
	// ID is the delivery's.
	ID string
	// Attempt is the attempts the delivery must still be at.
	Attempt int
	// State, Status and Error are the delivery's new state, last status
	// and last error.
	State  store.DeliveryState
	Status int
	Error  string
	// NextAttemptAt and DeliveredAt are the new values of the columns
	// (nil: NULL).
	NextAttemptAt, DeliveredAt *time.Time
	// Release hands the claim back (store.DeliveryAttempt.NotAttempted):
	// the delivery's attempts go down by one and only its next attempt
	// changes, to NextAttemptAt; State, Status, Error and DeliveredAt are
	// not written.
	Release bool
}

// CreateJob writes a job and its tasks in one transaction, as
// store.Store.CreateJob promises: an invalid spec (validateNewJob)
// is refused before anything is read or written; an idempotency key that
// names a job is a replay of it (replayOf), whatever id spec asks
// for, and reads no task (Driver.StageJob may look it up before the
// transaction); an explicit id that a job, or a deleted job whose
// tasks are not purged yet, holds is warren.ErrConflict; an empty id is a
// new ULID. The job is created now, by the engine's clock; an empty
// payload is stored as JSON null. An error of the tasks iterator is
// returned as it is, with nothing written.
func (e *Engine) CreateJob(ctx context.Context, spec store.NewJob, tasks iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	if err := validateNewJob(spec); err != nil {
		return warren.Job{}, false, e.errorf(err, "create job")
	}
	src := &taskSource{tasks: tasks}
	staged, err := e.drv.StageJob(ctx, spec.IdempotencyKey, src.all())
	if src.err != nil {
		return warren.Job{}, false, src.err
	}
	if err != nil {
		return warren.Job{}, false, e.errorf(err, "create job")
	}
	if staged.Release != nil {
		defer staged.Release()
	}
	if first := staged.Holder; first != nil {
		job, err := replayOf(*first, spec)
		if err != nil {
			return warren.Job{}, false, e.errorf(err, "create job")
		}
		return job, false, nil
	}
	row := newJobRow(spec, e.now())
	if staged.Small {
		r := &createReq{ctx: ctx, spec: spec, row: row, payloads: staged.Tasks, done: make(chan struct{}), lead: make(chan struct{})}
		e.createGrouped(r)
		return r.job, r.created, r.err
	}
	job, created, err := e.createAlone(ctx, spec, row, staged.Tasks)
	if src.err != nil {
		return warren.Job{}, false, src.err
	}
	return job, created, err
}

// createAlone writes one job in a transaction of its own.
func (e *Engine) createAlone(ctx context.Context, spec store.NewJob, row NewJobRow, payloads iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	var (
		job     warren.Job
		created bool
	)
	err := e.inTx(ctx, func(tx Tx) error {
		var err error
		job, created, err = createInTx(ctx, tx, spec, row, payloads)
		return err
	})
	if err != nil {
		return warren.Job{}, false, e.errorf(err, "create job")
	}
	return job, created, nil
}

// createInTx is CreateJob's tree inside tx: the job row (or the replay
// of the job its key names), then its tasks.
func createInTx(ctx context.Context, tx Tx, spec store.NewJob, row NewJobRow, payloads iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	id := row.Job.ID
	inserted, err := tx.InsertJob(ctx, row)
	if errors.Is(err, ErrIDTaken) {
		return warren.Job{}, false, fmt.Errorf("job %s already exists: %w", id, warren.ErrConflict)
	}
	if err != nil {
		return warren.Job{}, false, err
	}
	if !inserted {
		job, err := replay(ctx, tx, spec)
		return job, false, err
	}
	if spec.ID != "" {
		// A generated id is never a deleted job's.
		left, err := tx.DeletedTasksLeft(ctx, id)
		if err != nil {
			return warren.Job{}, false, err
		}
		if left {
			return warren.Job{}, false, deletedConflict(id)
		}
	}
	job, err := insertTasks(ctx, tx, id, payloads)
	return job, err == nil, err
}

// createReq is a small job's create waiting for a group transaction
// (createGrouped), and, once done is closed, its outcome.
type createReq struct {
	ctx      context.Context
	spec     store.NewJob
	row      NewJobRow
	payloads iter.Seq2[json.RawMessage, error]

	job     warren.Job
	created bool
	err     error
	done    chan struct{}
	// lead is closed when this create is to lead the next group.
	lead chan struct{}
}

// createGrouped writes r in a transaction shared with the creates that
// wait at the same time (group commit): the first to come leads a group
// of every create waiting, up to MaxGroup; those that come while it
// writes wait, and the first of them leads the next group once it is
// done. Under load, many jobs share a commit (and, on SQLite, one turn of
// the one writer); a lone create is written at once, as alone.
func (e *Engine) createGrouped(r *createReq) {
	e.groupMu.Lock()
	e.waiting = append(e.waiting, r)
	if e.grouping {
		e.groupMu.Unlock()
		select {
		case <-r.done:
			return
		case <-r.lead:
		}
	} else {
		e.grouping = true
		e.groupMu.Unlock()
	}
	e.leadGroup()
	<-r.done
}

// leadGroup writes the next group of waiting creates, then hands the
// lead to the first create still waiting, if any.
func (e *Engine) leadGroup() {
	e.groupMu.Lock()
	n := min(len(e.waiting), MaxGroup)
	group := slices.Clone(e.waiting[:n])
	e.waiting = slices.Delete(e.waiting, 0, n)
	e.groupMu.Unlock()

	e.createGroup(group)

	e.groupMu.Lock()
	if len(e.waiting) > 0 {
		close(e.waiting[0].lead)
	} else {
		e.grouping = false
	}
	e.groupMu.Unlock()
}

// createGroup writes group in one transaction, and, when that fails (one
// job's conflict, or anything else), each job alone, so that one create's
// error is its own.
func (e *Engine) createGroup(group []*createReq) {
	defer func() {
		for _, r := range group {
			close(r.done)
		}
	}()
	if len(group) > 1 {
		// The leader's request may end before the others': the group's
		// transaction is all of theirs.
		ctx := context.WithoutCancel(group[0].ctx)
		err := e.inTx(ctx, func(tx Tx) error {
			for _, r := range group {
				var err error
				if r.job, r.created, err = createInTx(ctx, tx, r.spec, r.row, r.payloads); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			return
		}
	}
	for _, r := range group {
		r.job, r.created, r.err = e.createAlone(r.ctx, r.spec, r.row, r.payloads)
	}
}

// insertTasks writes the tasks of job id, just inserted, and records
// how many it has (CreateJob, and a follow-up job: startFollowUp),
// returning its row as written.
func insertTasks(ctx context.Context, tx Tx, id string, payloads iter.Seq2[json.RawMessage, error]) (warren.Job, error) {
	n, err := tx.InsertTasks(ctx, id, payloads)
	if errors.Is(err, ErrTasksLeft) {
		// The job of that id was deleted as this one was created.
		return warren.Job{}, deletedConflict(id)
	}
	if err != nil {
		return warren.Job{}, err
	}
	return tx.SetExpectedTasks(ctx, id, n)
}

// newJobRow is the row of a job spec makes, created at.
func newJobRow(spec store.NewJob, at time.Time) NewJobRow {
	j := warren.Job{
		ID:             spec.ID,
		Type:           spec.Type,
		State:          warren.JobPending,
		Policy:         spec.Policy,
		IdempotencyKey: spec.IdempotencyKey,
		CreatedAt:      at,
		TraceParent:    spec.TraceParent,
		TraceState:     spec.TraceState,
	}
	if j.ID == "" {
		j.ID = ulid.Make().String()
	}
	if len(spec.Metadata) > 0 {
		j.Metadata = spec.Metadata
	}
	row := NewJobRow{Job: j, RequestHash: spec.RequestHash, Then: spec.Then}
	if w := spec.Webhook; w != nil {
		row.Job.WebhookURL, row.WebhookSecret = w.URL, w.Secret
	}
	return row
}

// replay answers a submission whose idempotency key a job took first,
// when InsertJob found it taken.
func replay(ctx context.Context, tx Tx, spec store.NewJob) (warren.Job, error) {
	first, found, err := tx.JobByKey(ctx, spec.IdempotencyKey)
	if err != nil {
		return warren.Job{}, err
	}
	if !found {
		// Deleted between the insert that found the key taken and now.
		return warren.Job{}, fmt.Errorf("the job of idempotency key %q was deleted as this one was created: %w",
			spec.IdempotencyKey, warren.ErrConflict)
	}
	return replayOf(first, spec)
}

// replayOf decides CreateJob's answer to a submission whose idempotency
// key names first.Job, created by a request whose digest was
// first.RequestHash: that job when the requests match (or either has no
// digest), else store.ErrKeyReused.
func replayOf(first KeyedJob, spec store.NewJob) (warren.Job, error) {
	if first.RequestHash != "" && spec.RequestHash != "" && first.RequestHash != spec.RequestHash {
		return warren.Job{}, fmt.Errorf("job %s: %w", first.Job.ID, store.ErrKeyReused)
	}
	return first.Job, nil
}

// validateNewJob returns an error saying what is wrong with spec when it
// cannot become a job: its policy is not valid (warren.Policy.Validate),
// or its webhook has no URL or secret, or one too long
// (store.MaxWebhookURLBytes, store.MaxWebhookSecretBytes), or one that is
// not UTF-8 without NUL; or its follow-ups are not valid (validateThen).
// CreateJob refuses such a spec before it reads or writes anything: its
// tasks are not consumed, and its idempotency key is not looked up.
func validateNewJob(spec store.NewJob) error {
	if err := validateJob(spec); err != nil {
		return err
	}
	return validateThen(spec)
}

// validateJob is validateNewJob for spec alone, without its follow-ups.
func validateJob(spec store.NewJob) error {
	if err := spec.Policy.Validate(); err != nil {
		return fmt.Errorf("invalid policy: %w", err)
	}
	if w := spec.Webhook; w != nil {
		switch {
		case w.URL == "" || len(w.URL) > store.MaxWebhookURLBytes:
			return fmt.Errorf("invalid webhook: the url must be 1 to %d bytes", store.MaxWebhookURLBytes)
		case w.Secret == "" || len(w.Secret) > store.MaxWebhookSecretBytes:
			return fmt.Errorf("invalid webhook: the secret must be 1 to %d bytes", store.MaxWebhookSecretBytes)
		case storedText(w.URL) != w.URL || storedText(w.Secret) != w.Secret:
			return fmt.Errorf("invalid webhook: the url and the secret must be UTF-8 without NUL")
		}
	}
	return nil
}

// deletedConflict is CreateJob's error for the id of a deleted job whose
// tasks are not purged yet.
func deletedConflict(id string) error {
	return fmt.Errorf("job %s was deleted and its tasks are not purged yet: %w", id, warren.ErrConflict)
}

// jsonNull is the payload of a task submitted without one.
var jsonNull = json.RawMessage("null")

// taskSource passes the caller's tasks on to a driver, an empty payload
// as JSON null, and keeps the first error they yield, which CreateJob
// returns as it is, however the driver reports it.
type taskSource struct {
	tasks iter.Seq2[json.RawMessage, error]
	err   error
}

// all yields the payloads of s.tasks up to its first error, which it
// yields and keeps.
func (s *taskSource) all() iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for payload, err := range s.tasks {
			if err != nil {
				s.err = err
				yield(nil, err)
				return
			}
			if len(payload) == 0 {
				payload = jsonNull
			}
			if !yield(payload, nil) {
				return
			}
		}
	}
}

// ClaimDeliveries claims the webhook deliveries due at claim.Now, as
// store.Store.ClaimDeliveries promises: leased until claim.Now plus
// claim.Lease, at most claim.Limit of them (PageSize), returned in
// id order.
func (e *Engine) ClaimDeliveries(ctx context.Context, claim store.DeliveryClaim) ([]store.ClaimedDelivery, error) {
	due := claim.Now.UTC().Truncate(time.Microsecond)
	claimed, err := e.drv.ClaimDeliveries(ctx, DeliveryClaim{Due: due, Until: due.Add(claim.Lease), Limit: PageSize(claim.Limit)})
	if err != nil {
		return nil, e.errorf(err, "claim webhook deliveries")
	}
	slices.SortFunc(claimed, func(a, b store.ClaimedDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return claimed, nil
}

// RecordDeliveryAttempt records how attempt a ended, as
// store.Store.RecordDeliveryAttempt promises: a is validated
// (validateAttempt) before anything is written; a
// delivered attempt keeps a.At as its delivery time, a pending one is
// due again at a.NextAttemptAt, a failed one is due never; its error is
// stored as storedText makes it; and it applies only while the
// delivery is pending and still at a.Attempt attempts.
func (e *Engine) RecordDeliveryAttempt(ctx context.Context, a store.DeliveryAttempt) (bool, error) {
	if err := validateAttempt(a); err != nil {
		return false, e.errorf(err, "record webhook attempt")
	}
	r := DeliveryRecord{ID: a.ID, Attempt: a.Attempt, State: a.State, Status: a.Status, Error: storedText(a.Error), Release: a.NotAttempted}
	switch a.State {
	case store.DeliveryPending:
		r.NextAttemptAt = storedTime(a.NextAttemptAt)
	case store.DeliveryDelivered:
		r.DeliveredAt = storedTime(a.At)
	}
	ok, err := e.drv.RecordDelivery(ctx, r)
	if err != nil {
		return false, e.errorf(err, "record webhook attempt of %s", a.ID)
	}
	return ok, nil
}

// validateAttempt returns an error naming what is wrong with a: a state
// that is not pending, delivered or failed, or a pending one without its
// NextAttemptAt.
func validateAttempt(a store.DeliveryAttempt) error {
	if a.NotAttempted && a.State != store.DeliveryPending {
		return fmt.Errorf("delivery %s: a claim handed back without an attempt stays pending, not %q", a.ID, a.State)
	}
	switch a.State {
	case store.DeliveryDelivered, store.DeliveryFailed:
	case store.DeliveryPending:
		if a.NextAttemptAt.IsZero() {
			return fmt.Errorf("delivery %s: a pending attempt needs NextAttemptAt", a.ID)
		}
	default:
		return fmt.Errorf("delivery %s: state %q is not pending, delivered or failed", a.ID, a.State)
	}
	return nil
}

// storedTime is t at the precision the drivers store (microseconds,
// UTC), so that a time written and read back compares equal.
func storedTime(t time.Time) *time.Time {
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}
