package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestDepthCountsArraysAndObjectsNotStrings(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{
		`1`:                              0,
		`"[[[{{{"`:                       0,
		`"a\"[[\\"`:                      0,
		`[]`:                             1,
		`{"a":1}`:                        1,
		`[[1],[2]]`:                      2,
		`{"a":{"b":[1]},"c":[]}`:         3,
		`["]\\",[{"x":"\"{"}]]`:          3,
		` [ [ [ ] ] , [ ] ] `:            3,
		nested(protocol.MaxPayloadDepth): protocol.MaxPayloadDepth,
	} {
		require.Equal(t, want, protocol.Depth([]byte(v)), "%s", v)
	}
}

// nested returns an array nested n levels deep.
func nested(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}

// A task message whose payload is deeper than the protocol allows is
// malformed, single or batched; one at the limit is not. The API refuses
// such payloads at submit, so warren never sends one.
func TestDecodeTasksRefusesPayloadsDeeperThanTheLimit(t *testing.T) {
	t.Parallel()
	atLimit, over := nested(protocol.MaxPayloadDepth), nested(protocol.MaxPayloadDepth+1)

	_, err := protocol.DecodeTask([]byte(`{"job_id":"j","task_id":1,"payload":` + atLimit + `}`))
	require.NoError(t, err)
	_, _, err = protocol.DecodeTasks([]byte(`{"job_id":"j","tasks":[{"task_id":1,"payload":` + atLimit + `}]}`))
	require.NoError(t, err)
	batch := `{"job_id":"j","tasks":[{"task_id":1,"payload":` + atLimit + `}]}`
	require.LessOrEqual(t, protocol.Depth([]byte(batch)), protocol.MaxMessageDepth, "a batch at the payload limit stays within the message limit")

	for _, body := range []string{
		`{"job_id":"j","task_id":1,"payload":` + over + `}`,
		`{"job_id":"j","tasks":[{"task_id":1,"payload":1},{"task_id":2,"payload":` + over + `}]}`,
	} {
		_, err := protocol.DecodeTask([]byte(body))
		if !strings.Contains(body, `"tasks"`) {
			require.ErrorIs(t, err, protocol.ErrMalformed)
			require.ErrorContains(t, err, "nested")
		}
		_, _, err = protocol.DecodeTasks([]byte(body))
		require.ErrorIs(t, err, protocol.ErrMalformed, "%.60s", body)
		require.ErrorContains(t, err, "nested")
	}
}
