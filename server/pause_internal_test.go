package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// A refresh of the pauses tells the workers again of every paused queue
// and paused job, so that a worker that connected after the pause (or
// missed its broadcast) learns of it.
func TestARefreshTellsTheWorkersOfEveryPauseAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{})
	s, err := New(Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Listen: "127.0.0.1:0",
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "warren.db")})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })

	// A consumer of the control broadcasts, as a worker has.
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", names.ControlExchange, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)

	create := func() string {
		job, _, err := s.store.CreateJob(ctx, store.NewJob{Type: "echo"}, func(yield func(json.RawMessage, error) bool) {
			yield(json.RawMessage(`1`), nil)
		})
		require.NoError(t, err)
		return job.ID
	}
	paused, resumed := create(), create()
	for _, id := range []string{paused, resumed} {
		_, err := s.store.PauseJob(ctx, id)
		require.NoError(t, err)
	}
	_, err = s.store.ResumeJob(ctx, resumed)
	require.NoError(t, err)
	_, err = s.store.PauseQueue(ctx, "gpu")
	require.NoError(t, err)

	require.NoError(t, s.refreshPausesOnce(ctx))
	var got []protocol.Control
	for len(got) < 2 {
		select {
		case d := <-deliveries:
			var c protocol.Control
			require.NoError(t, json.Unmarshal(d.Body, &c))
			got = append(got, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("the refresh told %v, want the paused queue and job", got)
		}
	}
	require.ElementsMatch(t, []protocol.Control{
		{Type: protocol.ControlPause, Queue: "gpu"},
		{Type: protocol.ControlPause, JobID: paused},
	}, got)
}

// A worker heard from for the first time is told of the pauses at once,
// not at the next refresh (protocol.PauseRefresh): it would run a paused
// job's tasks already in the broker until then.
func TestANewWorkerIsToldOfThePausesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{})
	s, err := New(Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Listen: "127.0.0.1:0",
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "warren.db")})
	require.NoError(t, err)
	started := time.Now()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop() })

	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", names.ControlExchange, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	job, _, err := s.store.CreateJob(ctx, store.NewJob{Type: "echo"}, func(yield func(json.RawMessage, error) bool) {
		yield(json.RawMessage(`1`), nil)
	})
	require.NoError(t, err)
	_, err = s.store.PauseJob(ctx, job.ID)
	require.NoError(t, err)

	out, err := wire.Heartbeat(names, protocol.Heartbeat{ID: "new-worker-1", Name: "new", State: protocol.HeartbeatRunning,
		Queues: []string{"default"}, Types: []string{"echo"}, Concurrency: 1, StartedAt: time.Now()}, time.Now())
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, out.Exchange, out.Key, false, false, out.Msg))
	select {
	case d := <-deliveries:
		var c protocol.Control
		require.NoError(t, json.Unmarshal(d.Body, &c))
		require.Equal(t, protocol.Control{Type: protocol.ControlPause, JobID: job.ID}, c)
		require.Less(t, time.Since(started), protocol.PauseRefresh, "told before the first refresh's tick")
	case <-time.After(protocol.PauseRefresh):
		t.Fatal("a new worker's first heartbeat brought no pause")
	}
}
