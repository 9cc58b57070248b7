// Package workermetrics turns a worker's events into Prometheus metrics.
// The worker package itself does not depend on Prometheus; a worker
// binary that wants metrics feeds this package from worker.Config.OnEvent:
//
//	reg := prometheus.NewRegistry()
//	m, err := workermetrics.New(reg)
//	w, err := worker.New(worker.Config{OnEvent: m.Observe})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// `warren worker --metrics-listen ADDR` does exactly this, with the Go and
// process collectors added.
package workermetrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenhq/warren/worker"
)

// maxTypes bounds the task types that get a label value of their own:
// the type is a property of the messages, and messages of made-up types
// must not grow the metrics without bound. The types past it are counted
// as OtherType.
const maxTypes = 256

// OtherType is the type label of tasks whose type came after maxTypes
// others, and of messages that carry none.
const OtherType = "other"

// Metrics are a worker's Prometheus metrics. Create them with New and pass
// Observe as (or call it from) worker.Config.OnEvent. It registers:
//
//   - warren_worker_tasks_total{type,outcome}: tasks settled, by task
//     type and outcome: completed, failed, retried, dead_lettered
//     (permanent failures are dead-lettered too), skipped (cancelled
//     job), requeued (shutdown), publish_failed (the outcome was not
//     confirmed; the task runs again), split (a redelivered batch),
//     unserved (no handler for the type here: put back for a worker
//     that serves it);
//   - warren_worker_handler_duration_seconds{type}: how long handlers ran,
//     per task (a batch handler's call once for each of its tasks);
//   - warren_worker_tasks_in_flight: tasks taken into a concurrency slot
//     and not yet done with;
//   - warren_worker_reconnects_total: reconnects after a lost connection;
//   - warren_worker_connected: 1 while connected to the broker, else 0.
type Metrics struct {
	tasks      *prometheus.CounterVec
	durations  *prometheus.HistogramVec
	inFlight   prometheus.Gauge
	reconnects prometheus.Counter
	connected  prometheus.Gauge

	mu    sync.Mutex
	types map[string]bool
}

// outcomes maps the event kinds counted in warren_worker_tasks_total to
// their outcome label.
var outcomes = map[worker.EventKind]string{
	worker.EventCompleted:     "completed",
	worker.EventFailed:        "failed",
	worker.EventRetried:       "retried",
	worker.EventDeadLettered:  "dead_lettered",
	worker.EventSkipped:       "skipped",
	worker.EventRequeued:      "requeued",
	worker.EventPublishFailed: "publish_failed",
	worker.EventSplit:         "split",
	worker.EventUnserved:      "unserved",
}

// DurationBuckets are the buckets of
// warren_worker_handler_duration_seconds, from a millisecond to ten
// minutes.
var DurationBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// New creates a worker's metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("workermetrics: New needs a Registerer")
	}
	m := &Metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_worker_tasks_total",
			Help: "Tasks this worker settled, by task type and outcome (completed, failed, retried, dead_lettered, skipped, requeued, publish_failed, split, unserved: put back for a worker that serves the type).",
		}, []string{"type", "outcome"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_worker_handler_duration_seconds",
			Help:    "How long this worker's handlers ran, per task, by task type (a batch handler's call is observed once per task).",
			Buckets: DurationBuckets,
		}, []string{"type"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warren_worker_tasks_in_flight",
			Help: "Tasks this worker holds in its concurrency slots: running, or being settled.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_worker_reconnects_total",
			Help: "Times this worker connected again after losing its broker connection.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warren_worker_connected",
			Help: "1 while this worker is connected to the broker and consuming, else 0.",
		}),
		types: make(map[string]bool),
	}
	for _, c := range []prometheus.Collector{m.tasks, m.durations, m.inFlight, m.reconnects, m.connected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe updates the metrics with ev. It is safe for concurrent use and
// quick, as worker.Config.OnEvent must be.
func (m *Metrics) Observe(ev worker.Event) {
	switch ev.Kind {
	case worker.EventStarted:
		m.inFlight.Inc()
		return
	case worker.EventDone:
		m.inFlight.Dec()
		return
	case worker.EventConnected:
		m.connected.Set(1)
		return
	case worker.EventReconnected:
		m.connected.Set(1)
		m.reconnects.Inc()
		return
	case worker.EventConnectionLost:
		m.connected.Set(0)
		return
	}
	outcome, ok := outcomes[ev.Kind]
	if !ok {
		return
	}
	typ := m.typeLabel(ev.Type)
	m.tasks.WithLabelValues(typ, outcome).Inc()
	if ev.Duration > 0 {
		m.durations.WithLabelValues(typ).Observe(ev.Duration.Seconds())
	}
}

// typeLabel is the type label of taskType.
func (m *Metrics) typeLabel(taskType string) string {
	if taskType == "" {
		return OtherType
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.types[taskType] {
		return taskType
	}
	if len(m.types) >= maxTypes {
		return OtherType
	}
	m.types[taskType] = true
	return taskType
}
