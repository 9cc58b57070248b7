package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

func TestValidateFinishState(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateFinishState(warren.JobCompleted))
	require.NoError(t, validateFinishState(warren.JobFailed))
	for _, state := range []warren.JobState{warren.JobCancelled, warren.JobPending, warren.JobRunning, "", "done"} {
		err := validateFinishState(state)
		require.Error(t, err, "state %q", state)
		require.ErrorContains(t, err, fmt.Sprintf("%q", state), "the error names the state")
	}
}
