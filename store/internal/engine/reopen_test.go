package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

func TestReopenable(t *testing.T) {
	t.Parallel()
	for state, want := range map[warren.JobState]bool{
		warren.JobFailed:    true,
		warren.JobCompleted: true,
		warren.JobCancelled: false,
		warren.JobPending:   false,
		warren.JobRunning:   false,
	} {
		require.Equal(t, want, reopenable(state), "state %s", state)
	}
}
