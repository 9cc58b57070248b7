package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// benchTasks is the size of the job each benchmark iteration publishes.
const benchTasks = 10_000

// benchBundle is a relay benchmark's installation: a topology of its own
// (deleted when the benchmark ends), a temporary SQLite store and a
// publisher with the default confirm window, as `warren server` runs it.
type benchBundle struct {
	names protocol.Names
	conn  *amqp.Connection
	store store.Store
	pub   *broker.Publisher
}

// benchSetup returns a fresh benchBundle for b.
func benchSetup(b *testing.B) *benchBundle {
	b.Helper()
	names, conn := amqptest.Topology(b, nil)
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "w.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	pub, err := broker.NewPublisher(conn, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	return &benchBundle{names: names, conn: conn, store: s, pub: pub}
}

// benchPayloads yields n small payloads, {"i":1} to {"i":n}.
func benchPayloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(fmt.Appendf(nil, `{"i":%d}`, i), nil) {
				return
			}
		}
	}
}

// prepare empties the work queue (so that every iteration publishes into
// a queue of the same depth) and creates a job of benchTasks pending
// tasks. The caller stops the timer around it.
func (bb *benchBundle) prepare(b *testing.B) {
	b.Helper()
	ch, err := bb.conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueuePurge(bb.names.TasksQueue, false); err != nil {
		b.Fatal(err)
	}
	_ = ch.Close()
	_, _, err = bb.store.CreateJob(context.Background(),
		store.NewJob{Type: "bench", Policy: warren.Policy{Reduce: "none"}}, benchPayloads(benchTasks))
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelayOnce publishes a job of benchTasks tasks with RelayOnce
// calls until every task is marked queued; one iteration is one job.
func BenchmarkRelayOnce(b *testing.B) {
	bb := benchSetup(b)
	r, err := relay.New(relay.Config{Store: bb.store, Publisher: bb.pub, Names: bb.names})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		bb.prepare(b)
		b.StartTimer()
		for total := 0; total < benchTasks; {
			n, err := r.RelayOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				b.Fatalf("the outbox is empty after %d of %d tasks", total, benchTasks)
			}
			total += n
		}
	}
	b.ReportMetric(float64(benchTasks*b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkRelayRun publishes a job of benchTasks tasks with a running
// relay, woken by Wake as the API wakes it after a submission, until
// OnPublished has counted every task; one iteration is one job.
func BenchmarkRelayRun(b *testing.B) {
	bb := benchSetup(b)
	var published atomic.Int64
	done := make(chan struct{}, 1)
	r, err := relay.New(relay.Config{Store: bb.store, Publisher: bb.pub, Names: bb.names,
		// Only Wake starts a round, so no round starts while the timer
		// is stopped.
		PollInterval: time.Hour,
		OnPublished: func(n int) {
			if published.Add(int64(n)) >= benchTasks {
				select {
				case done <- struct{}{}:
				default:
				}
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			b.Error(err)
		}
	})

	for b.Loop() {
		b.StopTimer()
		bb.prepare(b)
		published.Store(0)
		b.StartTimer()
		r.Wake()
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatalf("only %d of %d tasks published after a minute", published.Load(), benchTasks)
		}
	}
	b.ReportMetric(float64(benchTasks*b.N)/b.Elapsed().Seconds(), "tasks/s")
}
