package queuestats_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/queuestats"
)

func TestConsumersRemembersSinceWhenAQueueHasNone(t *testing.T) {
	t.Parallel()
	c := queuestats.NewConsumers()
	t0 := time.Unix(1000, 0)
	_, ok := c.NoneSince("gpu")
	require.False(t, ok, "never read")

	c.Observe("gpu", 0, t0)
	c.Observe("gpu", 0, t0.Add(time.Minute))
	since, ok := c.NoneSince("gpu")
	require.True(t, ok)
	require.Equal(t, t0, since, "from the first reading without one")

	c.Observe("gpu", 2, t0.Add(2*time.Minute))
	_, ok = c.NoneSince("gpu")
	require.False(t, ok, "a consumer came")

	c.Observe("gpu", 0, t0.Add(3*time.Minute))
	since, ok = c.NoneSince("gpu")
	require.True(t, ok)
	require.Equal(t, t0.Add(3*time.Minute), since, "counted again from the reading after the consumer left")

	c.Forget("gpu")
	_, ok = c.NoneSince("gpu")
	require.False(t, ok)
}
