package aggregator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// Metrics are the aggregator's Prometheus metrics.
type Metrics struct {
	tasks      *prometheus.CounterVec
	duplicates prometheus.Counter
	late       prometheus.Counter
	unknown    prometheus.Counter
	invalid    *prometheus.CounterVec
	batchSize  prometheus.Histogram
	closed     *prometheus.CounterVec
	dead       *prometheus.CounterVec
	unknownRed *prometheus.CounterVec
	spawned    prometheus.Counter
	refused    prometheus.Counter
}

// NewMetrics creates the aggregator's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_tasks_recorded_total",
			Help: "Tasks whose terminal state the aggregator recorded, by state (completed, failed).",
		}, []string{"state"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_results_duplicate_total",
			Help: "Results and dead letters for tasks that were already terminal: absorbed, never applied twice.",
		}),
		late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_results_late_total",
			Help: "Results and dead letters that arrived after their job closed: ignored.",
		}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_results_unknown_total",
			Help: "Results for jobs or tasks the store does not know: dead-lettered.",
		}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_results_invalid_total",
			Help: "Deliveries dead-lettered because they can never be applied, by queue.",
		}, []string{"queue"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_aggregator_batch_size",
			Help:    "Deliveries recorded per aggregator store transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_jobs_closed_total",
			Help: "Jobs this process closed, by final state.",
		}, []string{"state"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_dead_letters_total",
			Help: "Dead-lettered tasks recorded as failed, by dead-letter routing key and reason.",
		}, []string{"routing_key", "reason"}),
		unknownRed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_reduce_unknown_total",
			Help: "Jobs ready to close that this server left open because their reducer is not registered on it (each counted once), by reducer.",
		}, []string{"reducer"}),
		spawned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_tasks_spawned_total",
			Help: "Tasks added to their jobs by the spawns of recorded results.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_spawns_refused_total",
			Help: "Results recorded failed because their spawn was refused (over the per-job or per-task limit, not JSON, of a reduce task).",
		}),
	}
	for _, s := range []warren.TaskState{warren.TaskCompleted, warren.TaskFailed} {
		m.tasks.WithLabelValues(string(s))
	}
	reg.MustRegister(m.tasks, m.duplicates, m.late, m.unknown, m.invalid, m.batchSize, m.closed, m.dead, m.unknownRed, m.spawned, m.refused)
	return m
}

// Hooks returns aggregator hooks that update m and then call next's hooks
// (any of which may be nil).
func (m *Metrics) Hooks(next Hooks) Hooks {
	return Hooks{
		OnBatch: func(size int, r store.ApplyReport) {
			m.batchSize.Observe(float64(size))
			m.tasks.WithLabelValues(string(warren.TaskCompleted)).Add(float64(r.Applied - r.AppliedFailed))
			m.tasks.WithLabelValues(string(warren.TaskFailed)).Add(float64(r.AppliedFailed))
			m.duplicates.Add(float64(r.Duplicates))
			m.late.Add(float64(r.Closed))
			m.unknown.Add(float64(len(r.Unknown)))
			m.spawned.Add(float64(r.Spawned))
			m.refused.Add(float64(r.SpawnRefused))
			if next.OnBatch != nil {
				next.OnBatch(size, r)
			}
		},
		OnOutcomes:      next.OnOutcomes,
		OnJobFinished:   next.OnJobFinished,
		OnReduceStarted: next.OnReduceStarted,
		OnFollowUp:      next.OnFollowUp,
		OnJobClosed: func(id string, state warren.JobState) {
			m.closed.WithLabelValues(string(state)).Inc()
			if next.OnJobClosed != nil {
				next.OnJobClosed(id, state)
			}
		},
		OnDeadLetter: func(routingKey, reason string) {
			m.dead.WithLabelValues(routingKey, reason).Inc()
			if next.OnDeadLetter != nil {
				next.OnDeadLetter(routingKey, reason)
			}
		},
		OnUnknownReducer: func(id, reducer string) {
			m.unknownRed.WithLabelValues(reducer).Inc()
			if next.OnUnknownReducer != nil {
				next.OnUnknownReducer(id, reducer)
			}
		},
		OnInvalid: func(queue, reason string) {
			m.invalid.WithLabelValues(queue).Inc()
			if next.OnInvalid != nil {
				next.OnInvalid(queue, reason)
			}
		},
	}
}
