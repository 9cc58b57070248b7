package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

func TestHandlerReturnsTheRegisteredHandler(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	w.Handle("one", func(context.Context, worker.Task) (any, error) { return "one", nil })
	w.HandleBatch("many", func(_ context.Context, ts []worker.Task) []worker.Outcome {
		return []worker.Outcome{{Value: "many"}}
	})

	h, batch, ok := w.Handler("one")
	require.True(t, ok)
	require.Nil(t, batch)
	v, err := h(context.Background(), worker.Task{})
	require.NoError(t, err)
	require.Equal(t, "one", v)

	h, batch, ok = w.Handler("many")
	require.True(t, ok)
	require.Nil(t, h)
	require.Equal(t, []worker.Outcome{{Value: "many"}}, batch(context.Background(), []worker.Task{{}}))

	h, batch, ok = w.Handler("none")
	require.False(t, ok)
	require.Nil(t, h)
	require.Nil(t, batch)
}

func TestRetryTiers(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	require.Equal(t, protocol.DefaultRetryTiers, w.RetryTiers(), "the default")

	w, err = worker.New(worker.Config{RetryTiers: []time.Duration{time.Second, time.Minute}})
	require.NoError(t, err)
	tiers := w.RetryTiers()
	require.Equal(t, []time.Duration{time.Second, time.Minute}, tiers)
	tiers[0] = time.Hour
	require.Equal(t, time.Second, w.RetryTiers()[0], "the caller gets a copy")
}
