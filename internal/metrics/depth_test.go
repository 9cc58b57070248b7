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
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, m := range families[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	require.Equal(t, map[string]float64{names.TasksQueue: 3, names.TasksDLQ: 0}, got)

	missing := prometheus.NewRegistry()
	missing.MustRegister(metrics.NewDepthCollector(func() *amqp.Connection { return conn }, "warren-no-such-queue"))
	_, err = missing.Gather()
	require.Error(t, err, "a queue that cannot be read is an error, not a zero")
}

func msg(id string) amqp.Publishing {
	return amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: protocol.ContentType, Body: []byte(`{}`)}
}
