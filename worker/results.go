package worker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// maxResultRound bounds the results one round of the result publisher
// takes; it has at most Concurrency waiting, one per handler.
const maxResultRound = 4096

// pendingResult is the result of a completed single task message on its
// way through the result publisher, and, once done is closed, what became
// of it.
type pendingResult struct {
	d      *delivery
	result protocol.Result

	err    error // why the result was not confirmed; nil when it was
	ran    bool  // d was acked, or the ack tried
	ackErr error // the ack's error
	done   chan struct{}
}

// publishResult publishes r, the result of d, a single task message that
// completed, then acks d and reports evs, as publishThenAck does, through
// the session's result publisher: the results of single task messages
// that finish while a publish is out go together in one result batch
// per job and generation, and their deliveries are acked together once it
// is confirmed.
func (s *session) publishResult(d *delivery, r protocol.Result, evs []Event) {
	p := &pendingResult{d: d, result: r, done: make(chan struct{})}
	select {
	case s.results <- p:
		<-p.done
	case <-s.resultsQuit:
		p.err = errSessionEnded
	}
	if p.err != nil {
		s.publishFailed(d, evs, p.err)
		return
	}
	s.acked(d, p.ran, p.ackErr, evs)
}

// publishResults is the result publisher, one goroutine per session: it
// takes the results waiting, publishes them, waits for their confirms,
// acks their deliveries, and starts again with those that arrived
// meanwhile. An idle worker's result goes out at once, and under load a
// round carries what finished during the round before: group commit,
// without a wait added to either.
func (s *session) publishResults() {
	var round []*pendingResult
	for {
		select {
		case p := <-s.results:
			round = append(round[:0], p)
		case <-s.resultsQuit:
			return
		}
	more:
		for len(round) < maxResultRound {
			select {
			case p := <-s.results:
				round = append(round, p)
			default:
				break more
			}
		}
		s.publishRound(round)
		clear(round)
	}
}

// resultUnit is results published and acked together: one result
// message, or the parts it was cut into to fit MaxMessageBytes. Its
// deliveries are acked only once all of its parts are confirmed.
type resultUnit struct {
	ps    []*pendingResult
	outs  []wire.Outbound
	confs []*broker.Confirmation
	err   error
	span  trace.Span // its warren.result.publish span
}

// publishRound publishes the results of round, waits for their confirms,
// acks the deliveries of every unit confirmed in one call of the acker
// (a multiple-ack where the tags allow it), and answers each result.
func (s *session) publishRound(round []*pendingResult) {
	units := s.resultUnits(round)
	ctx, cancel := context.WithTimeout(s.handlers, confirmTimeout)
	for _, u := range units {
		if u.err != nil {
			continue
		}
		u.span = s.startResults(u.deliveries(), u.outs)
		for _, o := range u.outs {
			c, err := s.pub.Publish(ctx, o.Exchange, o.Key, o.Msg)
			if err != nil {
				u.err = fmt.Errorf("publish to %q/%q: %w", o.Exchange, o.Key, err)
				break
			}
			u.confs = append(u.confs, c)
		}
	}
	for _, u := range units {
		for _, c := range u.confs {
			if err := c.Wait(ctx); err != nil && u.err == nil {
				u.err = err
			}
		}
	}
	cancel()

	var (
		tags  []uint64
		acked []*pendingResult
	)
	for _, u := range units {
		if u.span != nil {
			endSpan(u.span, u.err)
		}
		if s.w.testHookResults != nil {
			s.w.testHookResults(len(u.ps), u.err)
		}
		if u.err != nil {
			for _, p := range u.ps {
				p.err = u.err
			}
			continue
		}
		s.publishFailures.Store(0)
		for _, p := range u.ps {
			if p.d.claim() {
				tags = append(tags, p.d.raw.DeliveryTag)
				acked = append(acked, p)
			}
		}
	}
	if len(tags) > 0 {
		ran, err := answer(s.acks.ack(tags...))
		for _, p := range acked {
			p.ran, p.ackErr = ran, err
		}
	}
	for _, p := range round {
		close(p.done)
	}
}

// deliveries are the deliveries u answers.
func (u *resultUnit) deliveries() []*delivery {
	ds := make([]*delivery, len(u.ps))
	for i, p := range u.ps {
		ds[i] = p.d
	}
	return ds
}

// resultUnits sorts round by job, generation and task, and cuts it into
// units: the results of one job and generation go in result batches
// (the generation is the batch's header), each with strictly increasing
// task ids and at most protocol.MaxBatchSize of them, so a task delivered
// twice has its second result in another one. A unit of one result is
// the single result message its task message always had.
func (s *session) resultUnits(round []*pendingResult) []*resultUnit {
	slices.SortFunc(round, func(a, b *pendingResult) int {
		return cmp.Or(strings.Compare(a.result.JobID, b.result.JobID),
			cmp.Compare(a.d.msg.Generation, b.d.msg.Generation),
			cmp.Compare(a.result.TaskID, b.result.TaskID))
	})
	var units []*resultUnit
	for start := 0; start < len(round); {
		end := start + 1
		for end < len(round) && round[end].result.JobID == round[start].result.JobID &&
			round[end].d.msg.Generation == round[start].d.msg.Generation {
			end++
		}
		units = s.appendUnits(units, round[start:end])
		start = end
	}
	return units
}

// appendUnits appends the units of ps, results of one job and generation
// in task order, to units.
func (s *session) appendUnits(units []*resultUnit, ps []*pendingResult) []*resultUnit {
	var parts [][]*pendingResult
	for _, p := range ps {
		i := slices.IndexFunc(parts, func(part []*pendingResult) bool {
			return len(part) < protocol.MaxBatchSize && part[len(part)-1].result.TaskID < p.result.TaskID
		})
		if i < 0 {
			parts = append(parts, []*pendingResult{p})
			continue
		}
		parts[i] = append(parts[i], p)
	}
	for _, part := range parts {
		results := make([]protocol.Result, len(part))
		for i, p := range part {
			results[i] = p.result
		}
		// Several results go as a result batch, whichever task messages
		// they answer; a batch carries the generation of m, which all of
		// them share.
		m := part[0].d.msg
		m.Batch = len(part) > 1
		u := &resultUnit{ps: part}
		u.outs, u.err = m.ResultsWithin(s.w.names, results, s.w.cfg.MaxMessageBytes)
		if u.err != nil {
			// Only a bug can get here: the results were built by settleRuns.
			s.log.Error("worker: cannot encode results; their tasks go back to the queue", "job_id", results[0].JobID, "tasks", len(results), "error", u.err)
		}
		units = append(units, u)
	}
	return units
}
