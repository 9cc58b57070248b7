package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
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

// A spawn that does not fit in one result message with its result goes
// in parts, each message under the limit, the last with the result; a
// payload that cannot fit with the result even alone fails the task.
func TestRunASpawnOverOneMessageGoesInParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 32 << 10 // 16 KiB for a part and the result, with the envelope
	rw := b.startWith(t, worker.Config{Name: "w-spawn-big", MaxMessageBytes: limit, MaxResultBytes: 16 << 10}, nil, func(w *worker.Worker) {
		w.Handle("big", func(_ context.Context, t worker.Task) (any, error) {
			if t.TaskID == 2 {
				if err := t.Spawn(strings.Repeat("x", 17<<10)); err != nil {
					return nil, err
				}
				return "too big a child", nil
			}
			for i := range 20 {
				if err := t.Spawn(map[string]string{"i": strconv.Itoa(i), "pad": strings.Repeat("y", 2<<10)}); err != nil {
					return nil, err
				}
			}
			return strings.Repeat("z", 4<<10), nil
		})
	})
	b.publishTask(t, "big", "job-big", 1, `{}`, nil)
	rw.expect(t, worker.EventCompleted)
	b.publishTask(t, "big", "job-big", 2, `{}`, nil)
	evs := rw.expect(t, worker.EventDeadLettered)
	require.Equal(t, protocol.ReasonResultTooLarge, evs[0].Reason)
	require.ErrorContains(t, evs[0].Err, "a spawned task with the result is")
	require.NoError(t, rw.stop())

	var (
		parts []protocol.Result
		run   string
	)
	for b.depth(t, b.names.ResultsQueue) > 0 {
		d := b.get(t, b.names.ResultsQueue)
		require.LessOrEqual(t, len(d.Body), limit-protocol.EnvelopeBytes, "each message within the limit")
		rs, err := protocol.DecodeResults(d.Body)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		r := rs[0]
		require.EqualValues(t, 1, r.TaskID, "task 2 sent no result")
		if run == "" {
			run = r.SpawnRun
		}
		require.Equal(t, run, r.SpawnRun, "one run")
		parts = append(parts, r)
	}
	require.Greater(t, len(parts), 2, "20 payloads of 2 KiB and 4 KiB of result in 16 KiB messages")
	slices.SortFunc(parts, func(a, b protocol.Result) int { return a.SpawnPart - b.SpawnPart })
	var got []string
	for i, r := range parts {
		require.Equal(t, [2]int{i + 1, len(parts)}, [2]int{r.SpawnPart, r.SpawnParts})
		if i < len(parts)-1 {
			require.JSONEq(t, `null`, string(r.Result), "only the last part has the result")
		}
		for _, p := range r.Spawn {
			var v struct{ I string }
			require.NoError(t, json.Unmarshal(p, &v))
			got = append(got, v.I)
		}
	}
	require.JSONEq(t, strconv.Quote(strings.Repeat("z", 4<<10)), string(parts[len(parts)-1].Result))
	want := make([]string, 20)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	require.Equal(t, want, got, "every payload once, in order across the parts")
}
