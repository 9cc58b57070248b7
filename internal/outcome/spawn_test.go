package outcome

import (
	"encoding/json"
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
	require.ErrorContains(t, s.Add("d"), "are 10 bytes of JSON, over the 8 one result message carries")
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

	s = NewSpawns(0, nil)
	require.NoError(t, s.Add("0123456789"))
	d = WithSpawn(Decision{Action: Complete, Result: json.RawMessage(`"ok"`)}, s, 10)
	require.Equal(t, Fail, d.Action, "the result and the spawn over one message fail the task")
	require.Equal(t, protocol.ReasonResultTooLarge, d.Reason)
	require.ErrorContains(t, d.Err, "the spawned tasks and the result are 17 bytes")
}
