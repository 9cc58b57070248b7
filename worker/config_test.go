package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

func TestNewNamesTheInvalidField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]worker.Config{
		"Config.Concurrency":         {Concurrency: -1},
		"Config.Prefetch":            {Prefetch: -1},
		"Config.Prefetch (2)":        {Concurrency: 4, Prefetch: 2},
		"Config.ShutdownTimeout":     {ShutdownTimeout: -time.Second},
		"Config.DeliveryLimit":       {DeliveryLimit: -1},
		"Config.ReconnectBackoffMax": {ReconnectBackoffMax: -time.Second},
		"Config.RetryTiers":          {RetryTiers: []time.Duration{time.Second, 0}},
		"Config.AMQPURL":             {AMQPURL: "http://127.0.0.1:5672/"},
	} {
		_, err := worker.New(cfg)
		require.ErrorContains(t, err, field)
	}
}

func TestNewKeepsTheAMQPPasswordOutOfErrors(t *testing.T) {
	t.Parallel()
	_, err := worker.New(worker.Config{AMQPURL: "amqp://user:s3cret@127.0.0.1:bad/"})
	require.ErrorContains(t, err, "Config.AMQPURL")
	require.NotContains(t, err.Error(), "s3cret")
}

func TestHandlePanicsOnAMistake(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	h := func(context.Context, worker.Task) (any, error) { return nil, nil }
	require.Same(t, w, w.Handle("a", h), "Handle chains")
	require.PanicsWithValue(t, `worker: Handle("a"): the type already has a handler`, func() { w.Handle("a", h) })
	require.Panics(t, func() { w.Handle("", h) })
	require.Panics(t, func() { w.Handle("b", nil) })

	bh := func(_ context.Context, ts []worker.Task) []worker.Outcome { return make([]worker.Outcome, len(ts)) }
	require.Same(t, w, w.HandleBatch("c", bh), "HandleBatch chains")
	require.PanicsWithValue(t, `worker: HandleBatch("a"): the type already has a handler`, func() { w.HandleBatch("a", bh) },
		"a type has one handler, per task or per batch")
	require.PanicsWithValue(t, `worker: Handle("c"): the type already has a handler`, func() { w.Handle("c", h) })
	require.Panics(t, func() { w.HandleBatch("", bh) })
	require.Panics(t, func() { w.HandleBatch("d", nil) })
}

func TestRunWithoutHandlersFails(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	require.ErrorContains(t, w.Run(context.Background()), "no handlers")
}

// A worker stopped while it is still connecting returns nil: it took
// nothing.
func TestRunStoppedWhileConnectingReturnsNil(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	require.NoError(t, err)
	w.Handle("x", func(context.Context, worker.Task) (any, error) { return nil, nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, w.Run(ctx))
}

// The broker's prefetch counts messages; with MaxMessageBytes bounding
// each, the worker picks a prefetch whose messages fit in
// MaxInflightBytes, and refuses settings under which they cannot.
func TestPrefetchIsBoundedByMaxInflightBytes(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, c := range []struct {
		cfg  worker.Config
		want int
	}{
		{worker.Config{}, 2 * worker.DefaultConcurrency},
		{worker.Config{Concurrency: 100}, 100}, // 400 MiB: the default grows to Concurrency messages
		{worker.Config{Concurrency: 4, MaxInflightBytes: 32 * mib}, 8},
		{worker.Config{Concurrency: 8, MaxInflightBytes: 32 * mib}, 8},
		{worker.Config{Concurrency: 8, MaxInflightBytes: 32 * mib, MaxMessageBytes: mib}, 16},
		{worker.Config{Concurrency: 2, Prefetch: 5, MaxInflightBytes: 20 * mib}, 5},
	} {
		w, err := worker.New(c.cfg)
		require.NoError(t, err, "%+v", c.cfg)
		require.Equal(t, c.want, worker.Prefetch(w), "%+v", c.cfg)
	}
	for _, c := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Concurrency: 9, MaxInflightBytes: 32 * mib}, "Config.Prefetch (8) must be at least Config.Concurrency (9)"},
		{worker.Config{Concurrency: 2, Prefetch: 9, MaxInflightBytes: 32 * mib}, "Config.Prefetch (9) messages of Config.MaxMessageBytes (4194304) do not fit in Config.MaxInflightBytes (33554432)"},
		{worker.Config{MaxResultBytes: 4 * mib}, "Config.MaxResultBytes must be between 1 and Config.MaxMessageBytes less 16384"},
		{worker.Config{MaxMessageBytes: 1000}, "Config.MaxMessageBytes must be more than 16384"},
		{worker.Config{MaxInflightBytes: -1}, "Config.MaxInflightBytes must be >= 0"},
	} {
		_, err := worker.New(c.cfg)
		require.ErrorContains(t, err, c.want, "%+v", c.cfg)
	}
}
