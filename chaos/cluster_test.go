package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRestartedQueuesParsesTheWatchdogsAnswer(t *testing.T) {
	t.Parallel()
	require.Empty(t, restartedQueues("[]"))
	require.Equal(t, []string{"p.retry.1s.q", "p.retry.5s.q"},
		restartedQueues("[<<\"p.retry.1s.q\">>,\n <<\"p.retry.5s.q\">>]"))
}
