// Package metrics holds the Prometheus collectors that read the broker
// and the store at each scrape. Only the server imports it, so that a
// worker does not depend on the Prometheus client.
package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// DepthCollector is a Prometheus collector of warren_queue_messages{queue}:
// the number of ready messages in each of a set of queues, read from the
// broker at each scrape with passive declares. A queue that cannot be read
// is reported as an error for that scrape.
type DepthCollector struct {
	conn   func() *amqp.Connection
	queues []string
	desc   *prometheus.Desc
}

// NewDepthCollector returns a collector of the depths of queues, read on
// the connection conn returns at each scrape (which the caller keeps
// open); nil means disconnected, reported as an error.
func NewDepthCollector(conn func() *amqp.Connection, queues ...string) *DepthCollector {
	return &DepthCollector{conn: conn, queues: queues, desc: prometheus.NewDesc("warren_queue_messages",
		"Messages ready in a warren queue (work, retry tiers, dead letters).", []string{"queue"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *DepthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *DepthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.collect(ch)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		ch <- prometheus.NewInvalidMetric(c.desc, ctx.Err())
		<-done // the channel calls are bounded by the connection's heartbeat
	}
}

func (c *DepthCollector) collect(ch chan<- prometheus.Metric) {
	conn := c.conn()
	if conn == nil {
		ch <- prometheus.NewInvalidMetric(c.desc, errors.New("not connected to the broker"))
		return
	}
	amqpCh, err := conn.Channel()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	defer func() { _ = amqpCh.Close() }()
	for _, q := range c.queues {
		info, err := amqpCh.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			// A failed passive declare closes the channel; report and stop.
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(info.Messages), q)
	}
}
