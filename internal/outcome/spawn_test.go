package outcome

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestSpawnsGatherUntilTaken(t *testing.T) {
	t.Parallel()
	s := NewSpawns(0, nil)
	require.NoError(t, s.Add(1, json.RawMessage(`{"a":1}`)))
	require.NoError(t, s.Add([]byte(`[2]`)))
	require.ErrorContains(t, s.Add(func() {}), "spawn payload 0", "a payload that does not marshal adds nothing")
	payloads, size := s.Take()
	require.Equal(t, []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`{"a":1}`), json.RawMessage(`[2]`)}, payloads)
	require.Equal(t, len(`1,{"a":1},[2],`), size)
	require.ErrorIs(t, s.Add(3), errSpawnEnded, "a spawn after the run returned is an error")
}

func TestSpawnsRefuseOverTheLimitOrInAReduceTask(t *testing.T) {
	t.Parallel()
	s := NewSpawns(8, nil)
	require.NoError(t, s.Add("abc")) // 6 bytes with its comma
	require.ErrorContains(t, s.Add("d"), "the spawned tasks are 10 bytes of JSON, over the 8 one run may spawn")
	payloads, _ := s.Take()
	require.Len(t, payloads, 1, "the refused payload was not added")

	require.ErrorIs(t, NewSpawns(0, ErrReduceSpawn).Add(1), ErrReduceSpawn)
	var none *Spawns
	require.Error(t, none.Add(1), "a Task the worker did not make cannot spawn")
}

func TestWithSpawnOnlyForACompletedRun(t *testing.T) {
	t.Parallel()
	s := NewSpawns(0, nil)
	require.NoError(t, s.Add(1, 2))
	d := WithSpawn(Decision{Action: Complete, Result: json.RawMessage(`"ok"`)}, s, 0)
	require.Equal(t, []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}, d.Spawn)

	s = NewSpawns(0, nil)
	require.NoError(t, s.Add(1))
	d = WithSpawn(Decision{Action: Retry}, s, 0)
	require.Nil(t, d.Spawn, "a failed run's spawn is dropped")

	// Over one message: parts that each fit with the result, in order.
	s = NewSpawns(0, nil)
	for i := range 10 {
		require.NoError(t, s.Add(strings.Repeat(strconv.Itoa(i), 48))) // 50 bytes of JSON and a comma each
	}
	d = WithSpawn(Decision{Action: Complete, Result: json.RawMessage(`"ok"`)}, s, partOverhead+4+3*51)
	require.Equal(t, Complete, d.Action)
	require.Len(t, d.Spawn, 10, "every payload, in order")
	var sizes []int
	var all []json.RawMessage
	for _, p := range d.SpawnParts {
		sizes = append(sizes, len(p))
		all = append(all, p...)
	}
	require.Equal(t, []int{3, 3, 3, 1}, sizes)
	require.Equal(t, d.Spawn, all, "the parts are the spawn cut in order")

	// One payload that cannot fit with the result fails the task.
	s = NewSpawns(0, nil)
	require.NoError(t, s.Add(strings.Repeat("x", 300)))
	d = WithSpawn(Decision{Action: Complete, Result: json.RawMessage(`"ok"`)}, s, 300)
	require.Equal(t, Fail, d.Action)
	require.Equal(t, protocol.ReasonResultTooLarge, d.Reason)
	require.ErrorContains(t, d.Err, "a spawned task with the result is")
}
