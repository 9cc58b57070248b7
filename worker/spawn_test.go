package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// spawnsOf maps each result's task id to its spawn, as strings.
func spawnsOf(rs []protocol.Result) map[int64][]string {
	got := map[int64][]string{}
	for _, r := range rs {
		for _, p := range r.Spawn {
			got[r.TaskID] = append(got[r.TaskID], string(p))
		}
	}
	return got
}

// A single task's spawn, from two calls, goes with its result; a task
// batch's completed tasks each carry their own in the result batch, and a
// failed task's spawn is dropped with its run.
func TestRunSendsASpawnWithItsCompletedResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.startWith(t, worker.Config{Name: "w-spawn"}, nil, func(w *worker.Worker) {
		w.Handle("crawl", func(_ context.Context, t worker.Task) (any, error) {
			if err := t.Spawn(map[string]int64{"from": t.TaskID}); err != nil {
				return nil, err
			}
			if err := t.Spawn(json.RawMessage(`"second"`)); err != nil {
				return nil, err
			}
			if t.TaskID == 2 {
				return nil, worker.Permanent(errors.New("page gone"))
			}
			return t.TaskID, nil
		})
	})
	b.publishTask(t, "crawl", "job-s", 7, `{}`, nil)
	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.Equal(t, []json.RawMessage{json.RawMessage(`{"from":7}`), json.RawMessage(`"second"`)}, r.Spawn)

	tasks := []protocol.BatchTask{{TaskID: 1, Payload: json.RawMessage(`{}`)}, {TaskID: 2, Payload: json.RawMessage(`{}`)}, {TaskID: 3, Payload: json.RawMessage(`{}`)}}
	body, err := protocol.EncodeBatch(protocol.Batch{JobID: "job-b", Tasks: tasks})
	require.NoError(t, err)
	b.publish(t, amqp.Publishing{ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: "crawl",
		MessageId: protocol.BatchMessageID("job-b", 1, 3), CorrelationId: "job-b", Body: body})
	rw.expect(t, worker.EventCompleted, worker.EventDeadLettered, worker.EventCompleted)
	require.NoError(t, rw.stop())
	require.Equal(t, map[int64][]string{1: {`{"from":1}`, `"second"`}, 3: {`{"from":3}`, `"second"`}}, spawnsOf(b.results(t)),
		"task 2 failed: its spawn is not sent")
}

// A spawn that cannot fit in one result message is refused by Spawn, and
// a result that takes a fitting spawn over it fails the task for good.
func TestRunASpawnOverOneMessageFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 32 << 10 // 16 KiB for the spawn and the result, with the envelope
	refused := make(chan error, 1)
	rw := b.startWith(t, worker.Config{Name: "w-spawn-big", MaxMessageBytes: limit, MaxResultBytes: 16 << 10}, nil, func(w *worker.Worker) {
		w.Handle("big", func(_ context.Context, t worker.Task) (any, error) {
			refused <- t.Spawn(strings.Repeat("x", 20<<10))
			if err := t.Spawn(strings.Repeat("y", 10<<10)); err != nil {
				return nil, err
			}
			return strings.Repeat("z", 10<<10), nil
		})
	})
	b.publishTask(t, "big", "job-big", 1, `{}`, nil)
	evs := rw.expect(t, worker.EventDeadLettered)
	require.ErrorContains(t, recv(t, refused, "the first spawn"), "over the 16384 one result message carries")
	require.Equal(t, protocol.ReasonResultTooLarge, evs[0].Reason)
	require.ErrorContains(t, evs[0].Err, "the spawned tasks and the result are")
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.ResultsQueue), "no result: the task failed")
}
