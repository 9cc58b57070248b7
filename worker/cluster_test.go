package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/worker"
)

// A worker given a list of nodes whose first is down connects to the
// next and works.
func TestRunSkipsADeadNodeOfTheList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{AMQPURL: "amqp://guest:guest@127.0.0.1:1/," + amqptest.URL()},
		map[string]worker.HandlerFunc{taskType: square})
	rw.listening(t)
	b.publishTask(t, taskType, "job-l", 1, `{"x": 4}`, nil)
	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.JSONEq(t, `{"square": 16}`, string(r.Result))
}

// When the node a worker is connected to dies and stays down, the worker
// reconnects to another node of its list at once, not after backoffs or
// a timeout on the dead one, and keeps working: every task completes (a
// task whose ack the dead node had not taken runs again, as after any
// loss). The first node lost hangs (a client that tried it first would
// wait its whole dial timeout), the second crashes.
func TestRunFailsOverToAnotherNodeWhenItsNodeDies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := []*amqptest.Node{amqptest.NewNode(t), amqptest.NewNode(t), amqptest.NewNode(t)}
	list := nodes[0].URL() + "," + nodes[1].URL() + "," + nodes[2].URL()
	rw := b.start(t, worker.Config{AMQPURL: list, ReconnectBackoffMax: time.Minute},
		map[string]worker.HandlerFunc{taskType: square})
	rw.listening(t)

	const n = 10
	completed := map[int64]int{}
	run := func(from, to int64) {
		for i := from; i <= to; i++ {
			b.publishTask(t, taskType, "job-f", i, fmt.Sprintf(`{"x": %d}`, i), nil)
		}
		for i := from; i <= to; {
			ev := recv(t, rw.events, "completed event")
			require.Equal(t, worker.EventCompleted, ev.Kind, "%+v", ev)
			completed[ev.TaskID]++
			for i <= to && completed[i] > 0 {
				i++
			}
		}
	}
	run(1, n)
	for kill := range 2 { // two of the three nodes, one after the other
		var used *amqptest.Node
		for _, node := range nodes {
			if node.Connections() > 0 {
				require.Nil(t, used, "both of the worker's connections go to one node")
				used = node
			}
		}
		require.NotNil(t, used, "the worker is connected through one of the nodes")
		killed := time.Now()
		if kill == 0 {
			used.Hang()
		} else {
			used.Kill()
		}
		rw.expect(t, worker.EventConnectionLost, worker.EventReconnected)
		// The first attempt waits about 100 ms, then reaches a live
		// node: it starts at another node, and tries the lost one last.
		require.Less(t, time.Since(killed), 2*time.Second, "kill %d: failed over in time", kill+1)
		rw.listening(t)
		run(int64(n*(kill+1)+1), int64(n*(kill+2)))
	}
	for i := int64(1); i <= 3*n; i++ {
		require.Positive(t, completed[i], "task %d", i)
	}
	require.NoError(t, rw.stop())
	require.GreaterOrEqual(t, len(b.results(t)), 3*n)
}

func TestNewChecksEveryURLOfTheList(t *testing.T) {
	t.Parallel()
	_, err := worker.New(worker.Config{AMQPURL: "amqp://u:s3cret@127.0.0.1:5672/,amqp://u:s3cret@127.0.0.1:bad/"})
	require.ErrorContains(t, err, "worker: Config.AMQPURL: URL 2 of 2")
	require.NotContains(t, err.Error(), "s3cret")
	_, err = worker.New(worker.Config{QuorumReplicas: -1})
	require.ErrorContains(t, err, "Config.QuorumReplicas")
	_, err = worker.New(worker.Config{AMQPURL: "amqp://a/,amqp://b/"})
	require.NoError(t, err)
}
