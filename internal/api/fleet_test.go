package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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
		"started_at":"2026-12-01T00:00:00Z","last_seen":"2026-12-01T00:01:00Z","alive":true}],"next_cursor":null,"total":1}`, string(resp.body))

	requireError(t, b.get(t, "/v1/queues"), http.StatusUnauthorized, "unauthorized")
	resp = b.get(t, "/v1/queues", bearer("reader")...)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	require.JSONEq(t, `{"queues":[{"name":"p.tasks.q","kind":"work","messages":5,"consumers":2},
		{"name":"p.tasks.dlq","kind":"dead","messages":7,"consumers":0,"dead_letters_1m":4,"dead_letters_15m":null}],"paused":[]}`, string(resp.body))
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
	require.JSONEq(t, `{"workers":[],"next_cursor":null,"total":0}`, string(resp.body))
	requireError(t, down.get(t, "/v1/queues"), http.StatusServiceUnavailable, "unavailable")

	broken := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Queues = func(context.Context) ([]api.Queue, error) { return nil, errors.New("a bug") }
	}})
	requireError(t, broken.get(t, "/v1/queues"), http.StatusInternalServerError, "internal")
}

// GET /v1/workers is paged (issue 24, item 3: a list of 300 forged
// workers was one 159 MB answer): 100 workers a page by default, at most
// 1,000, and a cursor that goes on after the last worker of its page
// whatever came or went meanwhile.
func TestWorkersArePaged(t *testing.T) {
	t.Parallel()
	var workers []heartbeats.Worker
	for i := range 250 {
		workers = append(workers, heartbeats.Worker{ID: fmt.Sprintf("id-%03d", i), Name: fmt.Sprintf("host-%03d", i/2)})
	}
	current := workers
	b := setup(t, &options{tokens: "reader:read", onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Workers = func() []heartbeats.Worker { return current }
	}})
	type page struct {
		Workers []struct {
			ID string `json:"id"`
		} `json:"workers"`
		NextCursor *string `json:"next_cursor"`
		Total      int     `json:"total"`
	}
	get := func(query string) page {
		t.Helper()
		resp := b.get(t, "/v1/workers"+query, bearer("reader")...)
		require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
		var p page
		require.NoError(t, json.Unmarshal(resp.body, &p))
		return p
	}
	first := get("")
	require.Len(t, first.Workers, 100, "100 by default")
	require.Equal(t, 250, first.Total)
	require.NotNil(t, first.NextCursor)
	var seen []string
	for p := first; ; p = get("?limit=70&cursor=" + url.QueryEscape(*p.NextCursor)) {
		for _, w := range p.Workers {
			seen = append(seen, w.ID)
		}
		if p.NextCursor == nil {
			break
		}
	}
	require.Len(t, seen, 250)
	require.Equal(t, "id-249", seen[249], "every worker once, in order")

	p := get("?limit=1")
	require.Equal(t, []string{"id-000"}, []string{p.Workers[0].ID})
	current = workers[1:] // the cursor's worker went: the next page goes on after it
	p = get("?limit=2&cursor=" + url.QueryEscape(*p.NextCursor))
	require.Equal(t, "id-001", p.Workers[0].ID)
	require.Equal(t, 249, p.Total)

	for _, bad := range []string{"?limit=0", "?limit=1001", "?limit=x", "?cursor=%25%25", "?cursor=bm9wZQ"} {
		requireError(t, b.get(t, "/v1/workers"+bad, bearer("reader")...), http.StatusBadRequest, "invalid_parameter")
	}
}
