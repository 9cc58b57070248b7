package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

func TestSplitLost(t *testing.T) {
	t.Parallel()
	ref := func(id int64) store.TaskRef { return store.TaskRef{JobID: "j", TaskID: id} }
	requeue, fail := splitLost([]StaleTask{
		{TaskRef: ref(1), Attempts: 0, MaxRetries: 3},
		{TaskRef: ref(2), Attempts: 2, MaxRetries: 3},
		{TaskRef: ref(3), Attempts: 3, MaxRetries: 3},
		{TaskRef: ref(4), Attempts: 0, MaxRetries: 0},
		{TaskRef: ref(5), Attempts: 0, MaxRetries: 1},
	})
	require.Equal(t, []store.TaskRef{ref(1), ref(2), ref(5)}, requeue, "the lost run counts: attempts+1 <= max_retries")
	require.Equal(t, []store.TaskRef{ref(3), ref(4)}, fail)
}
