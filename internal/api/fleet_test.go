package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/heartbeats"
)

func TestWorkersAndQueuesRoutes(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	grew := int64(4)
	b := setup(t, &options{tokens: "reader:read", onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Workers = func() []heartbeats.Worker {
			return []heartbeats.Worker{{ID: "w-1", Name: "host:1", Queues: []string{"default"}, Types: []string{"echo"},
				Concurrency: 8, InFlight: 3, StartedAt: started, LastSeen: started.Add(time.Minute), Alive: true}}
		}
		cfg.Queues = func(context.Context) ([]api.Queue, error) {
			return []api.Queue{
				{Name: "p.tasks.q", Kind: api.QueueWork, Messages: 5, Consumers: 2},
				{Name: "p.tasks.dlq", Kind: api.QueueDead, Messages: 7, DeadLetters1m: &grew},
			}, nil
		}
	}})
	resp := b.get(t, "/v1/workers")
	require.Equal(t, http.StatusUnauthorized, resp.status, "scope read")

	resp = b.get(t, "/v1/workers", bearer("reader")...)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	require.JSONEq(t, `{"workers":[{"id":"w-1","name":"host:1","queues":["default"],"types":["echo"],"concurrency":8,"in_flight":3,
		"started_at":"2026-12-01T00:00:00Z","last_seen":"2026-12-01T00:01:00Z","alive":true}]}`, string(resp.body))

	requireError(t, b.get(t, "/v1/queues"), http.StatusUnauthorized, "unauthorized")
	resp = b.get(t, "/v1/queues", bearer("reader")...)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	require.JSONEq(t, `{"queues":[{"name":"p.tasks.q","kind":"work","messages":5,"consumers":2},
		{"name":"p.tasks.dlq","kind":"dead","messages":7,"consumers":0,"dead_letters_1m":4,"dead_letters_15m":null}]}`, string(resp.body))
}

func TestWorkersAndQueuesUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	requireError(t, b.get(t, "/v1/workers"), http.StatusServiceUnavailable, "unavailable")
	requireError(t, b.get(t, "/v1/queues"), http.StatusServiceUnavailable, "unavailable")

	down := setup(t, &options{
		ready: func(context.Context) error { return errors.New("broker down") },
		onNew: func(_ *testing.T, cfg *api.Config) {
			cfg.Workers = func() []heartbeats.Worker { return nil }
			cfg.Queues = func(context.Context) ([]api.Queue, error) { return nil, errors.New("not connected") }
		},
	})
	resp := down.get(t, "/v1/workers")
	require.Equal(t, http.StatusOK, resp.status)
	require.JSONEq(t, `{"workers":[]}`, string(resp.body))
	requireError(t, down.get(t, "/v1/queues"), http.StatusServiceUnavailable, "unavailable")

	broken := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Queues = func(context.Context) ([]api.Queue, error) { return nil, errors.New("a bug") }
	}})
	requireError(t, broken.get(t, "/v1/queues"), http.StatusInternalServerError, "internal")
}
