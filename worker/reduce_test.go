package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

const reduceType = "sum"

// fakeOutcomes answers the outcomes RPC in place of a warren server:
// pages of pageSize of its outcomes, or, with code set, that error, or,
// silent, nothing at all.
type fakeOutcomes struct {
	outcomes []protocol.TaskOutcome
	pageSize int
	code     string
	silent   bool

	requests atomic.Int64
	last     chan protocol.OutcomesRequest // every request, for tests that look
}

// numbers are n outcomes: task i completed with result i, but every
// failEvery-th task failed (none when failEvery is 0).
func numbers(n, failEvery int) []protocol.TaskOutcome {
	out := make([]protocol.TaskOutcome, n)
	for i := range out {
		id := int64(i + 1)
		out[i] = protocol.TaskOutcome{TaskID: id, State: protocol.StatusCompleted, Result: json.RawMessage(strconv.FormatInt(id, 10))}
		if failEvery > 0 && (i+1)%failEvery == 0 {
			out[i] = protocol.TaskOutcome{TaskID: id, State: protocol.StatusFailed, Error: "boom"}
		}
	}
	return out
}

// serveOutcomes consumes the bundle's outcomes queue and answers with f
// until the test ends.
func (b *testBundle) serveOutcomes(t *testing.T, f *fakeOutcomes) {
	t.Helper()
	f.last = make(chan protocol.OutcomesRequest, 1000)
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	reqs, err := ch.Consume(b.names.OutcomesQueue, "", true, false, false, false, nil)
	require.NoError(t, err)
	go func() {
		for d := range reqs {
			req, err := wire.ReadOutcomesRequest(d)
			f.requests.Add(1)
			if err == nil {
				f.last <- req
			}
			if f.silent {
				continue
			}
			var reply protocol.OutcomesReply
			switch {
			case err != nil:
				reply.Error = &protocol.OutcomesError{Code: protocol.OutcomesBadRequest, Message: err.Error()}
			case f.code != "":
				reply.Error = &protocol.OutcomesError{Code: f.code, Message: "the fake says so"}
			default:
				reply = f.page(req.After)
			}
			out, err := wire.OutcomesReply(d, reply, req.After)
			if err != nil {
				panic(err)
			}
			_ = ch.PublishWithContext(context.Background(), out.Exchange, out.Key, false, false, out.Msg)
		}
	}()
}

func (f *fakeOutcomes) page(after int64) protocol.OutcomesReply {
	var r protocol.OutcomesReply
	for _, o := range f.outcomes {
		if o.TaskID > after && len(r.Outcomes) < f.pageSize {
			r.Outcomes = append(r.Outcomes, o)
		}
	}
	if last := r.Outcomes[len(r.Outcomes)-1].TaskID; last < f.outcomes[len(f.outcomes)-1].TaskID {
		r.Next = &last
	}
	return r
}

// publishReduce publishes job jobID's reduce task of type typ, as the
// relay does, at generation 3.
func (b *testBundle) publishReduce(t *testing.T, typ, jobID, payload string, expected int64, maxRetries int) {
	t.Helper()
	out, err := wire.Tasks(b.names, wire.TaskMessage{JobID: jobID, Type: typ, Reduce: true, ExpectedTasks: expected,
		Tasks: []protocol.BatchTask{{TaskID: protocol.ReduceTaskID, Payload: json.RawMessage(payload)}}, MaxRetries: maxRetries, Generation: 3})
	require.NoError(t, err)
	require.Equal(t, int64(1), out.Msg.Headers[protocol.HeaderReduce])
	b.publish(t, out.Msg)
}

// startReducers runs a worker with reducers (and no task handlers).
func (b *testBundle) startReducers(t *testing.T, reducers map[string]worker.ReducerFunc, prepare func(*worker.Worker)) *runningWorker {
	t.Helper()
	return b.startWith(t, worker.Config{Name: "w-reduce"}, nil, func(w *worker.Worker) {
		for typ, fn := range reducers {
			w.Reducer(typ, fn)
		}
		if prepare != nil {
			prepare(w)
		}
	})
}

// sum adds up the completed results and counts the failures.
func sum(_ context.Context, _ worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
	var total, failed int64
	for o, err := range outcomes {
		if err != nil {
			return nil, err
		}
		if !o.Completed() {
			failed++
			continue
		}
		var n int64
		if err := json.Unmarshal(o.Result, &n); err != nil {
			return nil, worker.Permanent(err)
		}
		total += n
	}
	return map[string]int64{"sum": total, "failed": failed}, nil
}

func TestReduceReadsEveryPageAndPublishesTaskZero(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := &fakeOutcomes{outcomes: numbers(10, 5), pageSize: 3}
	b.serveOutcomes(t, f)
	var seen worker.ReduceJob
	rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: func(ctx context.Context, job worker.ReduceJob, o iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		seen = job
		return sum(ctx, job, o)
	}}, nil)
	b.publishReduce(t, reduceType, "job-r", `{"k":1}`, 10, 3)

	ev := rw.expect(t, worker.EventCompleted)[0]
	require.Equal(t, int64(0), ev.TaskID)
	r, d := b.result(t)
	require.Equal(t, "job-r", r.JobID)
	require.Equal(t, int64(protocol.ReduceTaskID), r.TaskID)
	require.JSONEq(t, `{"sum":40,"failed":2}`, string(r.Result), "1..10 less 5 and 10")
	require.Equal(t, "job-r:0", d.MessageId)
	require.Equal(t, int64(3), d.Headers[protocol.HeaderGeneration])
	require.Equal(t, int64(4), f.requests.Load(), "10 outcomes in pages of 3")

	var afters []int64
	for range 4 {
		req := <-f.last
		require.Equal(t, "job-r", req.JobID)
		require.Equal(t, 3, req.Generation, "the reduce task's x-generation")
		afters = append(afters, req.After)
	}
	require.Equal(t, []int64{0, 3, 6, 9}, afters)
	require.Equal(t, worker.ReduceJob{JobID: "job-r", Type: reduceType, Payload: json.RawMessage(`{"k":1}`), ExpectedTasks: 10,
		Attempt: 1, MaxRetries: 3, Generation: 3}, seen)
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue), "acked")
}

func TestReduceReadsPagesOnlyAsItIterates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := &fakeOutcomes{outcomes: numbers(100, 0), pageSize: 3}
	b.serveOutcomes(t, f)
	rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: func(_ context.Context, _ worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		var ids []int64
		for o, err := range outcomes {
			if err != nil {
				return nil, err
			}
			if ids = append(ids, o.TaskID); len(ids) == 4 {
				break
			}
		}
		return ids, nil
	}}, nil)
	b.publishReduce(t, reduceType, "job-early", `null`, 100, 3)

	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.JSONEq(t, `[1,2,3,4]`, string(r.Result))
	require.Equal(t, int64(2), f.requests.Load(), "4 outcomes are 2 pages of 3, not 34")
}

func TestReduceStaleIsAckedWithoutAResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serveOutcomes(t, &fakeOutcomes{code: protocol.OutcomesStale})
	var returned atomic.Bool
	rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: func(ctx context.Context, job worker.ReduceJob, o iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		for _, err := range o {
			var oe *protocol.OutcomesError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, protocol.OutcomesStale, oe.Code)
		}
		returned.Store(true)
		return "a result that must not be published", nil
	}}, nil)
	b.publishReduce(t, reduceType, "job-stale", `null`, 5, 3)

	rw.expect(t, worker.EventSkipped)
	require.True(t, returned.Load())
	require.NoError(t, rw.stop())
	for _, q := range []string{b.names.TasksQueue, b.names.ResultsQueue, b.names.TasksDLQ, b.names.DeadQueue} {
		require.Zero(t, b.depth(t, q), "nothing in %s", q)
	}
}

// No reply within the timeout, or an error other than stale, fails the
// run transiently, whatever the reducer returned: its outcomes were not
// all read.
func TestReduceWithoutAReplyIsRetried(t *testing.T) {
	t.Parallel()
	for _, f := range []*fakeOutcomes{{silent: true}, {code: protocol.OutcomesUnavailable}} {
		b := setup(t)
		b.serveOutcomes(t, f)
		ignoring := func(_ context.Context, _ worker.ReduceJob, o iter.Seq2[worker.TaskOutcome, error]) (any, error) {
			for range o {
			}
			return "partial", nil
		}
		rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: ignoring}, func(w *worker.Worker) {
			worker.SetOutcomesTimeout(w, 300*time.Millisecond)
		})
		b.publishReduce(t, reduceType, "job-silent", `null`, 5, 1)

		evs := rw.expect(t, worker.EventRetried, worker.EventDeadLettered)
		if f.silent {
			require.ErrorContains(t, evs[0].Err, "no reply within 300ms")
		} else {
			require.ErrorContains(t, evs[0].Err, "unavailable")
		}
		require.Equal(t, protocol.ReasonRetriesExhausted, evs[1].Reason)
		d := b.get(t, b.names.TasksDLQ)
		require.Equal(t, "job-silent:0", d.MessageId)
		task, err := protocol.DecodeTask(d.Body)
		require.NoError(t, err)
		require.True(t, task.Reduce, "the dead letter is the reduce task message")
		require.NoError(t, rw.stop())
		require.Zero(t, b.depth(t, b.names.ResultsQueue), "no result: %+v", f)
		require.Equal(t, int64(2), f.requests.Load(), "one request per run: %+v", f)
	}
}

func TestReducePermanentIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serveOutcomes(t, &fakeOutcomes{outcomes: numbers(3, 0), pageSize: 10})
	rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: func(context.Context, worker.ReduceJob, iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		return nil, worker.Permanent(errors.New("cannot reduce"))
	}}, nil)
	b.publishReduce(t, reduceType, "job-perm", `null`, 3, 3)

	ev := rw.expect(t, worker.EventDeadLettered)[0]
	require.Equal(t, protocol.ReasonPermanent, ev.Reason)
	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		d := b.get(t, q)
		requireDeadLetter(t, d, protocol.ReasonPermanent, "cannot reduce", "w-reduce")
		require.Equal(t, "job-perm:0", d.MessageId)
	}
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.ResultsQueue))
}

func TestTypedReducer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serveOutcomes(t, &fakeOutcomes{outcomes: numbers(6, 3), pageSize: 4})
	type params struct{ Scale int64 }
	rw := b.startReducers(t, map[string]worker.ReducerFunc{reduceType: worker.TypedReducer(
		func(_ context.Context, _ worker.ReduceJob, p params, outcomes iter.Seq2[worker.TypedOutcome[int64], error]) (int64, error) {
			var total int64
			for o, err := range outcomes {
				if err != nil {
					return 0, err
				}
				total += o.Result * p.Scale // a failed task's Result is 0
			}
			return total, nil
		})}, nil)
	b.publishReduce(t, reduceType, "job-typed", `{"Scale":10}`, 6, 3)

	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.JSONEq(t, `120`, string(r.Result), "(1+2+4+5)*10")
}

// A reduce task message reaches the worker as the relay publishes it.
func TestReduceTaskMessageHeaders(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(protocol.NamesFor(""), wire.TaskMessage{JobID: "j", Type: "t", Reduce: true, ExpectedTasks: 7,
		Tasks: []protocol.BatchTask{{TaskID: 0}}})
	require.NoError(t, err)
	require.Equal(t, "j:0", out.Msg.MessageId)
	require.JSONEq(t, `{"job_id":"j","task_id":0,"reduce":true,"expected_tasks":7,"payload":null}`, string(out.Msg.Body))
	m := wire.ReadTask(amqp.Delivery{Body: out.Msg.Body, Headers: out.Msg.Headers, Type: "t"})
	require.NoError(t, m.Malformed)
	require.True(t, m.Reduce)
	_, err = wire.Tasks(protocol.NamesFor(""), wire.TaskMessage{JobID: "j", Reduce: true, Tasks: []protocol.BatchTask{{TaskID: 0}, {TaskID: 1}}})
	require.ErrorIs(t, err, protocol.ErrMalformed, "never batched")
}
