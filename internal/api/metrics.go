package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// jobsScrapeTimeout bounds the store queries of one warren_jobs scrape.
const jobsScrapeTimeout = 5 * time.Second

// Metrics is the API's own Prometheus instrumentation. Pass it in
// Config.Metrics; a nil *Metrics records nothing. It registers:
//
//   - warren_api_requests_total{route,code}: requests answered, by route
//     pattern (e.g. "GET /v1/jobs/{id}", "unmatched") and status code;
//   - warren_api_request_duration_seconds{route}: their latency;
//   - warren_jobs_submitted_total and warren_tasks_submitted_total: jobs
//     created by submissions, and their tasks;
//   - warren_idempotent_replays_total: submissions answered with an
//     existing job because of their Idempotency-Key;
//   - warren_jobs{state}: jobs in the store by state, counted when scraped;
//   - warren_api_event_streams: job event streams open now.
type Metrics struct {
	requests       *prometheus.CounterVec
	durations      *prometheus.HistogramVec
	jobsSubmitted  prometheus.Counter
	tasksSubmitted prometheus.Counter
	replays        prometheus.Counter
	eventStreams   prometheus.Gauge
}

// NewMetrics creates the API's metrics and registers them, with the
// warren_jobs collector that counts st's jobs, on reg.
func NewMetrics(reg prometheus.Registerer, st store.Store) (*Metrics, error) {
	if reg == nil || st == nil {
		return nil, errors.New("api: NewMetrics needs a Registerer and a Store")
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_api_requests_total",
			Help: "HTTP API requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_api_request_duration_seconds",
			Help:    "HTTP API request latency, by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		jobsSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_jobs_submitted_total",
			Help: "Jobs created through the HTTP API.",
		}),
		tasksSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_tasks_submitted_total",
			Help: "Tasks of the jobs created through the HTTP API.",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_idempotent_replays_total",
			Help: "Submissions answered with an existing job because of their Idempotency-Key.",
		}),
		eventStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warren_api_event_streams",
			Help: "Job event streams (GET /v1/jobs/{id}/events) open now.",
		}),
	}
	jobs := &jobsCollector{
		store: st,
		desc:  prometheus.NewDesc("warren_jobs", "Jobs in the store, by state.", []string{"state"}, nil),
	}
	for _, c := range []prometheus.Collector{m.requests, m.durations, m.jobsSubmitted, m.tasksSubmitted, m.replays, m.eventStreams, jobs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument wraps the handler of route with the request metrics.
func (m *Metrics) instrument(route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	labels := prometheus.Labels{"route": route}
	h = promhttp.InstrumentHandlerDuration(m.durations.MustCurryWith(labels), h)
	return promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(labels), h)
}

// jobCreated counts a created job of tasks tasks.
func (m *Metrics) jobCreated(tasks int64) {
	if m == nil {
		return
	}
	m.jobsSubmitted.Inc()
	m.tasksSubmitted.Add(float64(tasks))
}

// idempotentReplay counts a submission answered with an existing job.
func (m *Metrics) idempotentReplay() {
	if m == nil {
		return
	}
	m.replays.Inc()
}

// eventStream counts an event stream that opened (delta 1) or ended (-1).
func (m *Metrics) eventStream(delta float64) {
	if m == nil {
		return
	}
	m.eventStreams.Add(delta)
}

// jobStates are the states warren_jobs reports, each always present.
var jobStates = []warren.JobState{warren.JobPending, warren.JobRunning, warren.JobCompleted, warren.JobFailed, warren.JobCancelled}

// jobsCollector reports warren_jobs{state}, asking the store when scraped.
type jobsCollector struct {
	store store.Store
	desc  *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. A store that fails or is too
// slow makes an invalid metric, which /metrics logs and leaves out.
func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), jobsScrapeTimeout)
	defer cancel()
	counts, err := c.store.CountJobs(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, state := range jobStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[state]), string(state))
	}
}
