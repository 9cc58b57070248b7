package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestSearchTextHoldsTypeQueueAndMetadataValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		md, queue, want string
	}{
		{``, "", "echo\ndefault"},
		{`null`, "gpu", "echo\ngpu"},
		{`{"a": "X", "b": {"c": [1, 2.50, true, false, null, "Y"]}, "d": {}}`, "", "echo\ndefault\nx\n1\n2.50\ntrue\nfalse\ny"},
		{`["K", {"k": "V"}]`, "", "echo\ndefault\nk\nv"},
		{`{"k": "v", "broken`, "", "echo\ndefault\nv"},
		{`{{`, "", "echo\ndefault"},
		{`"ÉCOLE"`, "", "echo\ndefault\nécole"},
	} {
		j := warren.Job{Type: "Echo", Metadata: json.RawMessage(tc.md), Policy: warren.Policy{Queue: tc.queue}}
		require.Equal(t, tc.want, SearchText(j), "%s", tc.md)
	}
}

func TestSearchTextIsCutAtACharacter(t *testing.T) {
	t.Parallel()
	md, err := json.Marshal([]string{strings.Repeat("é", store.MaxSearchTextBytes)})
	require.NoError(t, err)
	got := SearchText(warren.Job{Type: "t", Metadata: md})
	require.LessOrEqual(t, len(got), store.MaxSearchTextBytes)
	require.Greater(t, len(got), store.MaxSearchTextBytes-2)
	require.True(t, strings.HasPrefix(got, "t\ndefault\néé"))
	require.NotContains(t, got, "\uFFFD")
}

func TestSearchPatternsEscapeWhatTheyMatch(t *testing.T) {
	t.Parallel()
	require.Equal(t, `%100\% a\_b \\ c%`, SearchPattern(`100% a_b \ c`))
	require.Equal(t, `01J\_%`, PrefixPattern(`01J_`))
	require.Equal(t, `"say ""hi"""`, FTSPhrase(`say "hi"`))
	require.Equal(t, []string{"", "default"}, QueueValues("default"))
	require.Equal(t, []string{"gpu"}, QueueValues("gpu"))
}
