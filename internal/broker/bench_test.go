package broker_test

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// benchMessages is how many messages one benchmark iteration publishes.
const benchMessages = 2000

// benchBody is a task message body of the usual size.
var benchBody = []byte(`{"job_id":"01HZX3K4M5N6P7Q8R9S0T1V2W3","task_id":12345,"payload":{"i":12345}}`)

// BenchmarkPublisherPipelined publishes benchMessages persistent,
// mandatory messages to the work queue through one Publisher, letting up
// to the confirm window wait for their confirms at once, then waits for
// every confirm; one iteration is one such round. Window 1 is the
// unpipelined baseline (one publish, one confirm).
func BenchmarkPublisherPipelined(b *testing.B) {
	for _, window := range []int{1, 64, broker.DefaultConfirmWindow, 1024} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			names, conn := amqptest.Topology(b, nil)
			p, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: window})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ch, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			defer ch.Close()

			ctx := context.Background()
			msg := amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: protocol.ContentType, Body: benchBody}
			confs := make([]*broker.Confirmation, benchMessages)
			b.SetBytes(int64(len(benchBody) * benchMessages))
			b.ReportAllocs()
			round := 0
			for b.Loop() {
				b.StopTimer()
				// The same queue depth for every round.
				if _, err := ch.QueuePurge(names.TasksQueue, false); err != nil {
					b.Fatal(err)
				}
				round++
				b.StartTimer()
				for i := range confs {
					msg.MessageId = fmt.Sprintf("r%d:%d", round, i)
					if confs[i], err = p.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg); err != nil {
						b.Fatal(err)
					}
				}
				for i, c := range confs {
					if err := c.Wait(ctx); err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(benchMessages*b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
