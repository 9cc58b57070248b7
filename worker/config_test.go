package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

// Config alone checks the ranges of its fields (the warren command checks
// none): New refuses a value past a bound with a *ConfigError that names
// the field, which a command can map onto its flag.
func TestNewNamesTheInvalidField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   worker.Config
		field string
		want  string
	}{
		{worker.Config{Concurrency: -1}, "Concurrency", "Config.Concurrency"},
		{worker.Config{Prefetch: -1}, "Prefetch", "Config.Prefetch"},
		{worker.Config{Concurrency: 4, Prefetch: 2}, "Prefetch", "Config.Prefetch (2)"},
		{worker.Config{Prefetch: 65536, MaxInflightBytes: 1 << 40}, "Prefetch", "Config.Prefetch must be at most 65535"},
		{worker.Config{ShutdownTimeout: -time.Second}, "ShutdownTimeout", "Config.ShutdownTimeout"},
		{worker.Config{HeartbeatInterval: time.Microsecond}, "HeartbeatInterval", "Config.HeartbeatInterval must be at least 1ms"},
		{worker.Config{DeliveryLimit: -1}, "DeliveryLimit", "Config.DeliveryLimit"},
		{worker.Config{QuorumReplicas: -1}, "QuorumReplicas", "Config.QuorumReplicas must be >= 0"},
		{worker.Config{ReconnectBackoffMax: -time.Second}, "ReconnectBackoffMax", "Config.ReconnectBackoffMax"},
		{worker.Config{RetryTiers: []time.Duration{time.Second, 0}}, "RetryTiers", "Config.RetryTiers"},
		{worker.Config{RetryTiers: []time.Duration{5 * time.Second, time.Second}}, "RetryTiers",
			"Config.RetryTiers: retry tier 1 (1s) is not longer than tier 0 (5s); tiers must increase"},
		{worker.Config{Queues: []string{"Bad.Name"}}, "Queues", "Config.Queues"},
		{worker.Config{AMQPURL: "http://127.0.0.1:5672/"}, "AMQPURL", "Config.AMQPURL"},
	} {
		_, err := worker.New(tc.cfg)
		require.ErrorContains(t, err, tc.want, "%+v", tc.cfg)
		var ce *worker.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		require.Equal(t, tc.field, ce.Field, "%+v", tc.cfg)
		require.Equal(t, "worker: "+ce.Message, err.Error())
	}
	_, err := worker.New(worker.Config{RetryTiers: []time.Duration{time.Millisecond, 2 * time.Millisecond}})
	require.NoError(t, err, "increasing whole milliseconds")
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
