// Package metrics holds the Prometheus collectors that read the broker
// and the store at each scrape. Only the server imports it, so that a
// worker does not depend on the Prometheus client.
package metrics

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
)

// DepthCollector is a Prometheus collector of warren_queue_messages{queue}
// and warren_queue_consumers{queue}: the number of ready messages in, and
// consumers of, each of a set of queues, read from the broker at each
// scrape with passive declares. One of the fixed queues that cannot be
// read is reported as an error for that scrape; one of the extra queues
// (WithExtra) that does not exist yet is left out.
type DepthCollector struct {
	conn      func() *amqp.Connection
	queues    []string
	extra     func(context.Context) ([]string, error)
	desc      *prometheus.Desc
	consumers *prometheus.Desc
}

// NewDepthCollector returns a collector of the depths of queues, read on
// the connection conn returns at each scrape (which the caller keeps
// open); nil means disconnected, reported as an error.
func NewDepthCollector(conn func() *amqp.Connection, queues ...string) *DepthCollector {
	return &DepthCollector{conn: conn, queues: queues,
		desc: prometheus.NewDesc("warren_queue_messages",
			"Messages ready in a warren queue (work, retry tiers, results, dead letters).", []string{"queue"}, nil),
		consumers: prometheus.NewDesc("warren_queue_consumers",
			"Consumers of a warren queue (workers on a work queue, servers on results.q and dead.q).", []string{"queue"}, nil),
	}
}

// WithExtra has c also report the queues extra returns at each scrape
// (the work queues of the open jobs, and their retry tiers), skipping the
// fixed ones and those that do not exist (yet). It returns c.
func (c *DepthCollector) WithExtra(extra func(context.Context) ([]string, error)) *DepthCollector {
	c.extra = extra
	return c
}

// Describe implements prometheus.Collector.
func (c *DepthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.consumers
}

// Collect implements prometheus.Collector.
func (c *DepthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.collect(ctx, ch)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		ch <- prometheus.NewInvalidMetric(c.desc, ctx.Err())
		<-done // the channel calls are bounded by the connection's heartbeat
	}
}

func (c *DepthCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) {
	conn := c.conn()
	if conn == nil {
		ch <- prometheus.NewInvalidMetric(c.desc, errors.New("not connected to the broker"))
		return
	}
	p := broker.NewProber(conn)
	defer p.Close()
	for _, q := range c.queues {
		d, err := p.Depth(q)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		c.report(ch, q, d)
	}
	if c.extra == nil {
		return
	}
	extra, err := c.extra(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, q := range extra {
		if slices.Contains(c.queues, q) {
			continue
		}
		d, err := p.Depth(q)
		switch {
		case broker.IsNotFound(err):
			continue // an open job's queue the relay has not declared yet
		case err != nil:
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		c.report(ch, q, d)
	}
}

func (c *DepthCollector) report(ch chan<- prometheus.Metric, q string, d broker.QueueDepth) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(d.Ready), q)
	ch <- prometheus.MustNewConstMetric(c.consumers, prometheus.GaugeValue, float64(d.Consumers), q)
}
