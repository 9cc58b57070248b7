package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/protocol"
)

func TestDepthCollectorReportsQueueDepths(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	for i := range 3 {
		require.NoError(t, p.PublishAndWait(context.Background(), names.JobsExchange, protocol.RoutingKeyTask, msg(fmt.Sprint(i))))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewDepthCollector(func() *amqp.Connection { return conn }, names.TasksQueue, names.TasksDLQ))
	n, err := testutil.GatherAndCount(reg, "warren_queue_messages")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, map[string]float64{names.TasksQueue: 3, names.TasksDLQ: 0}, gauges(t, reg, "warren_queue_messages"))
	require.Equal(t, map[string]float64{names.TasksQueue: 0, names.TasksDLQ: 0}, gauges(t, reg, "warren_queue_consumers"))

	missing := prometheus.NewRegistry()
	missing.MustRegister(metrics.NewDepthCollector(func() *amqp.Connection { return conn }, "warren-no-such-queue"))
	_, err = missing.Gather()
	require.Error(t, err, "a queue that cannot be read is an error, not a zero")
}

func msg(id string) amqp.Publishing {
	return amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: protocol.ContentType, Body: []byte(`{}`)}
}

// The extra queues (the open jobs' work queues) are reported with their
// consumers; one that does not exist yet is left out, not an error.
func TestDepthCollectorReportsExtraQueuesAndConsumers(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.Consume(names.TasksQueue, "", false, false, false, false, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewDepthCollector(func() *amqp.Connection { return conn }, names.ResultsQueue).
		WithExtra(func(context.Context) ([]string, error) {
			return []string{names.ResultsQueue, names.TasksQueue, names.Prefix + "no-such-queue.q"}, nil
		}))
	require.Equal(t, map[string]float64{names.ResultsQueue: 0, names.TasksQueue: 0}, gauges(t, reg, "warren_queue_messages"))
	require.Equal(t, map[string]float64{names.ResultsQueue: 0, names.TasksQueue: 1}, gauges(t, reg, "warren_queue_consumers"))
}

// gauges returns the values of the gauge family name by queue label.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return got
}
