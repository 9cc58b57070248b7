package server

import (
	"context"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// pauseBroadcastTimeout bounds the wait for the broker's confirm of one
// pause broadcast.
const pauseBroadcastTimeout = 10 * time.Second

// maxPausedJobsRefreshed bounds the paused jobs one refresh tells the
// workers of again (those paused first): a worker remembers a pause for
// protocol.PauseLease, so the jobs past it are held by the relay alone,
// which publishes nothing of them, until the list shrinks.
const maxPausedJobsRefreshed = 1000

// broadcastPause tells every worker of a pause or a resume the store
// committed (api.Config.Pause) and waits for the broker's confirm; a
// resume also wakes the relay, whose next round publishes the resumed
// tasks.
func (s *Server) broadcastPause(ctx context.Context, c protocol.Control) error {
	if c.Type == protocol.ControlResume {
		s.WakeRelay()
	}
	bs := s.current()
	if bs == nil {
		return errDisconnected
	}
	ctx, cancel := context.WithTimeout(ctx, pauseBroadcastTimeout)
	defer cancel()
	return broker.PublishPause(ctx, bs.pub, s.names, c)
}

// refreshPauses tells the workers again, every protocol.PauseRefresh,
// of every paused queue and (up to maxPausedJobsRefreshed) paused job,
// until ctx is done: a worker that connected since, or missed a
// broadcast, learns of them, and a worker's pause that is not refreshed
// ends after protocol.PauseLease (a resume it missed). A failed round is
// logged and the next one tries again.
//
// A worker heard from for the first time (nudgePauses) is told at once,
// not at the next tick: a worker that connects while a job is paused
// would otherwise run the job's tasks already in the broker for up to
// PauseRefresh.
func (s *Server) refreshPauses(ctx context.Context) error {
	tick := time.NewTicker(protocol.PauseRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-s.pauseNudge:
		}
		if err := s.refreshPausesOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("pause refresh failed; the workers are told again at the next one", "error", err)
		}
	}
}

// nudgePauses asks refreshPauses for a round now; nudges while one is
// pending make one round.
func (s *Server) nudgePauses() {
	select {
	case s.pauseNudge <- struct{}{}:
	default:
	}
}

func (s *Server) refreshPausesOnce(ctx context.Context) error {
	queues, err := s.store.PausedQueues(ctx)
	if err != nil {
		return err
	}
	jobs, err := s.store.PausedJobs(ctx, maxPausedJobsRefreshed)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if err := s.broadcastPause(ctx, protocol.Control{Type: protocol.ControlPause, Queue: q.Queue}); err != nil {
			return err
		}
	}
	for _, id := range jobs {
		if err := s.broadcastPause(ctx, protocol.Control{Type: protocol.ControlPause, JobID: id}); err != nil {
			return err
		}
	}
	return nil
}
