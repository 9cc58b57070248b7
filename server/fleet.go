package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/queuestats"
	"github.com/warrenhq/warren/protocol"
)

// queuesTimeout bounds one reading of the queues for GET /v1/queues and
// one sample of the dead-letter queues.
const queuesTimeout = 5 * time.Second

// knownQueue is a queue the server knows of; optional ones (an open job's
// work queue and its tiers) may not exist yet, and are then left out.
type knownQueue struct {
	name, kind string
	optional   bool
}

// knownQueues are the fixed queues, the default work queue and its retry
// tiers, then the work queues of the open jobs (open) and their tiers.
func (s *Server) knownQueues(open []string) []knownQueue {
	qs := []knownQueue{
		{s.names.TasksQueue, api.QueueWork, false},
		{s.names.ResultsQueue, api.QueueResults, false},
		{s.names.DeadQueue, api.QueueDead, false},
		{s.names.TasksDLQ, api.QueueDead, false},
		{s.names.ResultsDLQ, api.QueueDead, false},
	}
	for _, t := range s.tierQueues(protocol.DefaultQueue) {
		qs = append(qs, knownQueue{t, api.QueueRetry, false})
	}
	for _, q := range open {
		if q == protocol.DefaultQueue {
			continue
		}
		qs = append(qs, knownQueue{s.names.WorkQueue(q), api.QueueWork, true})
		for _, t := range s.tierQueues(q) {
			qs = append(qs, knownQueue{t, api.QueueRetry, true})
		}
	}
	return qs
}

// deadLetterQueues are the queues whose growth the server samples.
func (s *Server) deadLetterQueues() []string {
	return []string{s.names.DeadQueue, s.names.TasksDLQ, s.names.ResultsDLQ}
}

// openWorkQueues are the full names of the open jobs' work queues and
// their retry tiers, for warren_queue_messages and warren_queue_consumers.
func (s *Server) openWorkQueues(ctx context.Context) ([]string, error) {
	open, err := s.store.OpenQueues(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, q := range s.knownQueues(open) {
		if q.optional {
			names = append(names, q.name)
		}
	}
	return names, nil
}

// readQueues answers GET /v1/queues: every known queue's depth and
// consumers, read now, and the dead-letter queues' growth from the
// server's samples.
func (s *Server) readQueues(ctx context.Context) ([]api.Queue, error) {
	conn := s.consumerConn()
	if conn == nil {
		return nil, errDisconnected
	}
	ctx, cancel := context.WithTimeout(ctx, queuesTimeout)
	defer cancel()
	open, err := s.store.OpenQueues(ctx)
	if err != nil {
		return nil, err
	}
	known := s.knownQueues(open)
	var out []api.Queue
	err = withProber(ctx, conn, func(p *broker.Prober) error {
		now := time.Now()
		for _, q := range known {
			d, err := p.Depth(q.name)
			if q.optional && broker.IsNotFound(err) {
				continue // not declared yet: the relay declares it before it publishes to it
			}
			if err != nil {
				return err
			}
			aq := api.Queue{Name: q.name, Kind: q.kind, Messages: d.Ready, Consumers: d.Consumers}
			if q.kind == api.QueueDead {
				aq.DeadLetters1m = s.growth(q.name, d.Ready, time.Minute, now)
				aq.DeadLetters15m = s.growth(q.name, d.Ready, 15*time.Minute, now)
			}
			out = append(out, aq)
		}
		return nil
	})
	return out, err
}

func (s *Server) growth(queue string, depth int, window time.Duration, now time.Time) *int64 {
	g, ok := s.deadGrowth.Since(queue, int64(depth), window, now)
	if !ok {
		return nil
	}
	return &g
}

// sampleDeadLetters samples the dead-letter queues' depths every
// queuestats.SampleInterval, from now until ctx is done, for the growth
// GET /v1/queues shows. A sample that fails (disconnected) is skipped.
func (s *Server) sampleDeadLetters(ctx context.Context) error {
	t := time.NewTicker(queuestats.SampleInterval)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Server) sampleOnce(ctx context.Context) {
	conn := s.consumerConn()
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, queuesTimeout)
	defer cancel()
	err := withProber(ctx, conn, func(p *broker.Prober) error {
		for _, q := range s.deadLetterQueues() {
			d, err := p.Depth(q)
			if err != nil {
				return err
			}
			s.deadGrowth.Record(q, int64(d.Ready), time.Now())
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.log.Debug("sample the dead-letter queues", "error", err)
	}
}

// withProber runs read with a prober on conn, returning early (and
// leaving read to finish on its own, bounded by the connection's
// heartbeat) once ctx is done.
func withProber(ctx context.Context, conn *amqp.Connection, read func(*broker.Prober) error) error {
	done := make(chan error, 1)
	go func() {
		p := broker.NewProber(conn)
		defer p.Close()
		done <- read(p)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jobDurations is warren_job_duration_seconds{type,state}.
type jobDurations struct {
	hist *prometheus.HistogramVec

	mu    sync.Mutex
	types map[string]bool
}

// maxJobTypes bounds the job types that get a label value of their own;
// the others are counted as "other".
const maxJobTypes = 256

func newJobDurations() *jobDurations {
	return &jobDurations{
		hist: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_job_duration_seconds",
			Help:    "Time from a job's creation to its close, by job type and final state (completed, failed: observed by the server that closed it; cancelled: by the server that cancelled it).",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400},
		}, []string{"type", "state"}),
		types: make(map[string]bool),
	}
}

// observe records job's duration, from its creation to closedAt.
func (d *jobDurations) observe(job warren.Job, state warren.JobState, closedAt time.Time) {
	typ := job.Type
	d.mu.Lock()
	if !d.types[typ] {
		if len(d.types) >= maxJobTypes {
			typ = "other"
		} else {
			d.types[typ] = true
		}
	}
	d.mu.Unlock()
	d.hist.WithLabelValues(typ, string(state)).Observe(max(0, closedAt.Sub(job.CreatedAt).Seconds()))
}
