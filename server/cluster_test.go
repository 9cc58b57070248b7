package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// A server given the nodes of a cluster starts on a live one (the first
// of the list is down), and when the node it is connected to dies and
// stays down, it is connected again through another within a moment,
// not after backoffs or a timeout on the dead one, and runs jobs.
func TestServerFailsOverToAnotherNodeWhenItsNodeDies(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	nodes := []*amqptest.Node{amqptest.NewNode(t), amqptest.NewNode(t)}
	cfg.AMQPURL = "amqp://guest:guest@127.0.0.1:1/," + nodes[0].URL() + "," + nodes[1].URL()
	srv, err := server.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })

	// The worker goes to the broker directly: only the server loses its node.
	w, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: cfg.Prefix, RetryTiers: cfg.RetryTiers, Concurrency: 4})
	require.NoError(t, err)
	w.Handle("len", func(_ context.Context, tk worker.Task) (any, error) { return len(tk.Payload), nil })
	wctx, stopWorker := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); require.NoError(t, <-werr) })

	c := client.New(srv.URL())
	job := func() {
		t.Helper()
		sub, err := c.Submit(ctx, client.JobSpec{Type: "len", Reduce: "sum",
			Tasks: []json.RawMessage{json.RawMessage(`"a"`), json.RawMessage(`"bb"`), json.RawMessage(`"ccc"`)}})
		require.NoError(t, err)
		j, err := c.Wait(ctx, sub.ID, nil)
		require.NoError(t, err)
		require.EqualValues(t, "completed", j.State)
		res, err := c.Result(ctx, sub.ID)
		require.NoError(t, err)
		require.JSONEq(t, `12`, string(res))
	}
	job()

	var used *amqptest.Node
	for _, n := range nodes {
		if n.Connections() == 2 {
			used = n
		}
	}
	require.NotNil(t, used, "both of the server's connections go through one node")
	lost := time.Now()
	used.Hang() // a client that tried it first would wait its whole dial timeout
	require.Eventually(t, func() bool { return !ready(srv) }, 5*time.Second, 10*time.Millisecond, "the server saw its node go")
	require.Eventually(t, func() bool { return ready(srv) }, 3*time.Second, 10*time.Millisecond,
		"the server is connected through the other node within a moment")
	t.Logf("connected again %v after the node was lost", time.Since(lost).Round(time.Millisecond))
	job()
}

func ready(srv *server.Server) bool {
	resp, err := http.Get(srv.URL() + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
