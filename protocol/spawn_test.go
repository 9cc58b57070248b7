package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestASpawnTravelsWithItsResult(t *testing.T) {
	t.Parallel()
	spawn := []json.RawMessage{json.RawMessage(`{"url":"/a"}`), json.RawMessage(`2`)}
	body, err := protocol.EncodeResult(protocol.Result{JobID: "j", TaskID: 1, Result: json.RawMessage(`1`), Spawn: spawn})
	require.NoError(t, err)
	require.JSONEq(t, `{"job_id":"j","task_id":1,"result":1,"spawn":[{"url":"/a"},2]}`, string(body))
	rs, err := protocol.DecodeResults(body)
	require.NoError(t, err)
	require.Equal(t, spawn, rs[0].Spawn)

	body, err = protocol.EncodeResultBatch(protocol.ResultBatch{JobID: "j", Results: []protocol.Result{
		{TaskID: 1, Result: json.RawMessage(`1`), Spawn: spawn}, {TaskID: 2, Result: json.RawMessage(`2`)}}})
	require.NoError(t, err)
	rs, err = protocol.DecodeResults(body)
	require.NoError(t, err)
	require.Equal(t, spawn, rs[0].Spawn, "a result batch's element carries its own spawn")
	require.Nil(t, rs[1].Spawn)

	plain, err := protocol.EncodeResult(protocol.Result{JobID: "j", TaskID: 1})
	require.NoError(t, err)
	require.NotContains(t, string(plain), "spawn", "a result without a spawn is as before")
}

func TestSpawnPartsAreValidated(t *testing.T) {
	t.Parallel()
	part := `{"job_id":"j","task_id":1,"result":null,"spawn":[1],"spawn_run":"r1","spawn_part":1,"spawn_parts":2}`
	rs, err := protocol.DecodeResults([]byte(part))
	require.NoError(t, err)
	require.Equal(t, [3]any{"r1", 1, 2}, [3]any{rs[0].SpawnRun, rs[0].SpawnPart, rs[0].SpawnParts})
	for body, want := range map[string]string{
		`{"job_id":"j","task_id":1,"result":null,"spawn_run":"r1","spawn_part":1,"spawn_parts":1}`:                  "spawn_parts must be between 2",
		`{"job_id":"j","task_id":1,"result":null,"spawn_run":"r1","spawn_part":3,"spawn_parts":2}`:                  "spawn_part must be between 1 and spawn_parts (2), got 3",
		`{"job_id":"j","task_id":1,"result":null,"spawn_part":1,"spawn_parts":2}`:                                   "spawn_run must be 1 to 64 bytes",
		`{"job_id":"j","task_id":1,"result":null,"status":"failed","spawn_run":"r","spawn_part":1,"spawn_parts":2}`: "only a completed result spawns in parts",
		`{"job_id":"j","task_id":0,"result":null,"spawn_run":"r","spawn_part":1,"spawn_parts":2}`:                   "a reduce task cannot spawn",
	} {
		_, err := protocol.DecodeResults([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, body)
		require.ErrorContains(t, err, want, body)
	}
}
