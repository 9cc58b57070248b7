package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// PauseTx holds the primitives that pause and resume jobs and work
// queues (PauseJob, ResumeJob, PauseQueue, ResumeQueue). Each writes one
// row and decides nothing: the engine has read the job (CloseTx.GetJob)
// and chosen the transition.
type PauseTx interface {
	// SetJobPaused sets job id's paused_at to at.
	SetJobPaused(ctx context.Context, id string, at time.Time) error
	// SetJobResumed clears job id's paused_at and sets its resumed_at to
	// at.
	SetJobResumed(ctx context.Context, id string, at time.Time) error
	// GetQueuePause reads queue's row of queue_pauses: its paused_at, nil
	// when it is not paused or has no row.
	GetQueuePause(ctx context.Context, queue string) (*time.Time, error)
	// SetQueuePaused writes queue's row with paused_at at, creating it
	// if there is none.
	SetQueuePaused(ctx context.Context, queue string, at time.Time) error
	// SetQueueResumed clears queue's paused_at and sets its resumed_at
	// to at.
	SetQueueResumed(ctx context.Context, queue string, at time.Time) error
}

// PauseJob pauses open job id: from its commit no relay round publishes
// a task of it, and the reconciler takes none of its queued tasks for
// lost. Its transaction is one of Driver.BeginPause, which waits for the
// relay round in flight, so that when PauseJob returns no round is still
// publishing the job's tasks. Pausing a paused job changes nothing (it
// keeps its first PausedAt). A closed job wraps warren.ErrConflict, an
// unknown one warren.ErrNotFound. The job's version does not move: a
// pause changes none of its counters or its state, so a close computed
// meanwhile still applies.
func (e *Engine) PauseJob(ctx context.Context, id string) (warren.Job, error) {
	var job warren.Job
	err := e.inTxBegun(ctx, e.drv.BeginPause, func(tx Tx) error {
		j, err := openJob(ctx, tx, id)
		if err != nil {
			return err
		}
		if j.PausedAt == nil {
			at := e.now()
			if err := tx.SetJobPaused(ctx, id, at); err != nil {
				return err
			}
			j.PausedAt = &at
		}
		job = j
		return nil
	})
	if err != nil {
		return warren.Job{}, e.errorf(err, "pause job %q", id)
	}
	return job, nil
}

// ResumeJob resumes paused open job id: its pending tasks are offered to
// the next relay rounds again, and its queued tasks' timeouts are counted
// from now (resumed_at) as well as from their publish. Resuming a job
// that is not paused changes nothing. A closed job wraps
// warren.ErrConflict, an unknown one warren.ErrNotFound.
func (e *Engine) ResumeJob(ctx context.Context, id string) (warren.Job, error) {
	var job warren.Job
	err := e.inTx(ctx, func(tx Tx) error {
		j, err := openJob(ctx, tx, id)
		if err != nil {
			return err
		}
		if j.PausedAt != nil {
			if err := tx.SetJobResumed(ctx, id, e.now()); err != nil {
				return err
			}
			j.PausedAt = nil
		}
		job = j
		return nil
	})
	if err != nil {
		return warren.Job{}, e.errorf(err, "resume job %q", id)
	}
	return job, nil
}

// openJob reads job id, and wraps warren.ErrConflict when it is closed.
func openJob(ctx context.Context, tx Tx, id string) (warren.Job, error) {
	j, err := tx.GetJob(ctx, id)
	if err != nil {
		return warren.Job{}, err
	}
	if j.State.Terminal() {
		return warren.Job{}, fmt.Errorf("%w: the job is %s", warren.ErrConflict, j.State)
	}
	return j, nil
}

// PauseQueue pauses work queue queue (its effective name: "" is
// protocol.DefaultQueue): from its commit no relay round publishes a task
// of a job of that queue (warren.Policy.EffectiveQueue), and the
// reconciler takes none of their queued tasks for lost; jobs submitted to
// it later wait too. Its transaction waits for the relay round in flight,
// as PauseJob's does. Pausing a paused queue keeps its first PausedAt. A
// queue needs no job to be paused. An invalid name is an error
// (protocol.CheckQueueName).
func (e *Engine) PauseQueue(ctx context.Context, queue string) (store.QueuePause, error) {
	queue = protocol.QueueOrDefault(queue)
	if err := protocol.CheckQueueName(queue); err != nil {
		return store.QueuePause{}, e.errorf(err, "pause queue %q", queue)
	}
	var p store.QueuePause
	err := e.inTxBegun(ctx, e.drv.BeginPause, func(tx Tx) error {
		at, err := tx.GetQueuePause(ctx, queue)
		if err != nil {
			return err
		}
		if at == nil {
			now := e.now()
			if err := tx.SetQueuePaused(ctx, queue, now); err != nil {
				return err
			}
			at = &now
		}
		p = store.QueuePause{Queue: queue, PausedAt: *at}
		return nil
	})
	if err != nil {
		return store.QueuePause{}, e.errorf(err, "pause queue %q", queue)
	}
	return p, nil
}

// ResumeQueue resumes work queue queue, and reports whether it was
// paused: its jobs' pending tasks are offered to the relay again, and
// their queued tasks' timeouts are counted from now as well. Resuming a
// queue that is not paused changes nothing.
func (e *Engine) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	queue = protocol.QueueOrDefault(queue)
	if err := protocol.CheckQueueName(queue); err != nil {
		return false, e.errorf(err, "resume queue %q", queue)
	}
	var resumed bool
	err := e.inTx(ctx, func(tx Tx) error {
		at, err := tx.GetQueuePause(ctx, queue)
		if err != nil || at == nil {
			return err
		}
		resumed = true
		return tx.SetQueueResumed(ctx, queue, e.now())
	})
	if err != nil {
		return false, e.errorf(err, "resume queue %q", queue)
	}
	return resumed, nil
}
