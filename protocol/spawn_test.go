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
