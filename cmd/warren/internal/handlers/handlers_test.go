package handlers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

func task(payload string, attempt int) worker.Task {
	return worker.Task{JobID: "j", TaskID: 1, Attempt: attempt, Payload: json.RawMessage(payload)}
}

func TestWordcountCountsUnicodeWordsLowercased(t *testing.T) {
	t.Parallel()
	got, err := Wordcount(context.Background(), task(`{"text": "Élan, élan! x2 x2 don't ÉLAN—über"}`, 1))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"élan": 3, "x2": 2, "don": 1, "t": 1, "über": 1}, got)
	_, err = Wordcount(context.Background(), task(`{"txt": "x"}`, 1))
	require.True(t, worker.IsPermanent(err))
}

func TestEchoReturnsThePayload(t *testing.T) {
	t.Parallel()
	got, err := Echo(context.Background(), task(`{"a":[1,2]}`, 1))
	require.NoError(t, err)
	require.Equal(t, json.RawMessage(`{"a":[1,2]}`), got)
}

func TestSleepValidatesAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	_, err := Sleep(context.Background(), task(`{"ms": -1}`, 1))
	require.True(t, worker.IsPermanent(err))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Sleep(ctx, task(`{"ms": 60000}`, 1))
	require.ErrorIs(t, err, context.Canceled)
	got, err := Sleep(context.Background(), task(`{"ms": 1}`, 1))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"slept_ms": 1}, got)
}

func TestFlakyFollowsItsPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := Flaky(ctx, task(`{"value": 7, "fail_times": 2}`, 2))
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err))
	got, err := Flaky(ctx, task(`{"value": 7, "fail_times": 2}`, 3))
	require.NoError(t, err)
	require.JSONEq(t, `7`, string(got.(json.RawMessage)))

	_, err = Flaky(ctx, task(`{"permanent": true}`, 1))
	require.True(t, worker.IsPermanent(err))
	require.Panics(t, func() { _, _ = Flaky(ctx, task(`{"panic": true}`, 1)) })

	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	_, err = Flaky(ctx, task(`{"fail_until": "`+until+`"}`, 9))
	require.Error(t, err)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	got, err = Flaky(ctx, task(`{"value": "ok", "fail_until": "`+past+`"}`, 1))
	require.NoError(t, err)
	require.JSONEq(t, `"ok"`, string(got.(json.RawMessage)))
}

func TestTopWordsMergesCompletedCountsAndCountsFailures(t *testing.T) {
	t.Parallel()
	outcomes := []worker.TaskOutcome{
		{TaskID: 1, State: "completed", Result: json.RawMessage(`{"the": 2, "cat": 1}`)},
		{TaskID: 2, State: "failed", Error: "boom"},
		{TaskID: 3, State: "completed", Result: json.RawMessage(`{"the": 1, "hat": 1}`)},
	}
	res := workertest.RunReducer(context.Background(), TopWords, worker.ReduceJob{JobID: "j", Payload: json.RawMessage(`{"n": 2}`)}, outcomes, nil)
	require.Equal(t, workertest.Completed, res.Action, "%v", res.Err)
	require.JSONEq(t, `{"top": [{"word": "the", "count": 3}, {"word": "cat", "count": 1}], "failed_tasks": 1}`, string(res.Output))

	res = workertest.RunReducer(context.Background(), TopWords, worker.ReduceJob{JobID: "j", Payload: json.RawMessage(`{"n": 0}`)}, outcomes, nil)
	require.Equal(t, workertest.Failed, res.Action, "a bad payload is permanent")
	bad := []worker.TaskOutcome{{TaskID: 1, State: "completed", Result: json.RawMessage(`[1]`)}}
	res = workertest.RunReducer(context.Background(), TopWords, worker.ReduceJob{JobID: "j"}, bad, nil)
	require.Equal(t, workertest.Failed, res.Action, "a result that is not counts is permanent")
}

func TestTreeSpawnsItsChildrenAboveTheLastLevel(t *testing.T) {
	t.Parallel()
	res := workertest.Run(context.Background(), Tree, task(`{"fanout": 2, "levels": 2}`, 1), nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.JSONEq(t, `0`, string(res.Output))
	require.Len(t, res.Spawned, 2)
	require.JSONEq(t, `{"depth": 1, "fanout": 2, "levels": 2}`, string(res.Spawned[0]))
	leaf := workertest.Run(context.Background(), Tree, task(`{"depth": 2, "fanout": 2, "levels": 2}`, 1), nil)
	require.Empty(t, leaf.Spawned, "the last level spawns nothing")
	bad := workertest.Run(context.Background(), Tree, task(`{"depth": -1}`, 1), nil)
	require.Equal(t, workertest.Failed, bad.Action)
}
