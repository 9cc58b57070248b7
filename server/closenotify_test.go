package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store/postgres/pgtest"
)

// On PostgreSQL, a job one server cancels (or closes) reaches the event
// streams of another at once, not at its next poll: the second server
// here polls once an hour.
func TestAnotherServersCloseReachesTheEventStreamsAtOnce(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.DatabaseURL = pgtest.URL(t)
	start := func(c server.Config) *server.Server {
		srv, err := server.New(c)
		require.NoError(t, err)
		require.NoError(t, srv.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, srv.Stop()) })
		return srv
	}
	a := start(cfg)
	slow := cfg
	slow.EventsPollInterval = time.Hour
	b := start(slow)

	ca, cb := client.New(a.URL()), client.New(b.URL())
	sub, err := ca.Submit(t.Context(), client.JobSpec{Type: "nobody-runs-this", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	following := make(chan struct{}, 1)
	watched := make(chan client.Job, 1)
	errs := make(chan error, 1)
	go func() {
		job, err := cb.Watch(ctx, sub.ID, func(client.Job) {
			select {
			case following <- struct{}{}:
			default:
			}
		})
		watched <- job
		errs <- err
	}()
	select {
	case <-following:
	case <-ctx.Done():
		t.Fatal("the stream on the second server showed nothing")
	}
	_, err = ca.Cancel(t.Context(), sub.ID)
	require.NoError(t, err)
	job := <-watched
	require.NoError(t, <-errs, "the closed event arrived before the test's deadline, an hour before the poll")
	require.Equal(t, warren.JobCancelled, job.State)
}
