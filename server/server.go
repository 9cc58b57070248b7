// Package server is warren's server as a library: the HTTP API, the outbox
// relay that publishes submitted tasks, the aggregator that records
// results and closes jobs, the reconciler that finds lost tasks, the
// retention sweeper that deletes closed jobs past their retention, the
// webhook deliverer that tells jobs' owners they closed, the
// dead-letter operations and the Prometheus metrics, on one job store and
// one RabbitMQ, started and stopped in order.
//
// The warren command's `server`, `demo` and `bench`, and warren's own
// end-to-end tests, all run this package: there is one wiring.
//
//	srv, err := server.New(server.Config{DatabaseURL: "sqlite://./warren.db"})
//	...
//	err = srv.Run(ctx) // until ctx is done; then stops in order
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/autobatch"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/heartbeats"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/queuereaper"
	"github.com/warrenhq/warren/internal/queuestats"
	"github.com/warrenhq/warren/internal/reconciler"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/internal/retention"
	"github.com/warrenhq/warren/internal/webhooks"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/open"
)

// readHeaderTimeout bounds how long a client may take to send a request's
// headers.
const readHeaderTimeout = 10 * time.Second

// ErrStarted is returned by Start and Run on a server that was already
// started: a Server runs once.
var ErrStarted = errors.New("server: already started")

// Server is one warren server. Make one with New, then Run it (or Start
// and Stop it).
type Server struct {
	cfg Config
	// pauseNudge asks refreshPauses for a round now (nudgePauses).
	pauseNudge chan struct{}
	log        *slog.Logger
	nodes      *broker.Nodes
	names      protocol.Names
	tiers      []time.Duration
	reducers   *reduce.Registry

	startOnce sync.Once
	stopOnce  sync.Once

	// Set by Start.
	store     store.Store
	ownStore  bool
	registry  *prometheus.Registry
	published prometheus.Counter
	batches   prometheus.Histogram // tasks per task message
	failed    prometheus.Counter   // tasks the relay failed: their message cannot be published
	aggHooks  aggregator.Hooks
	// sizer chooses the batch size of jobs without one, from what the
	// aggregator records; the relay asks it each round.
	sizer    *autobatch.Sizer
	recon    *reconciler.Reconciler
	sweeper  *retention.Sweeper
	events   *api.Events            // the API's job event streams, told of the jobs this server closes
	deleted  *prometheus.CounterVec // jobs deleted, by reason
	purged   prometheus.Counter     // task rows of deleted jobs purged
	webhooks *webhooks.Metrics
	// deliverer delivers the webhooks of closed jobs.
	deliverer *webhooks.Deliverer
	http      *http.Server
	listener  net.Listener

	// stop asks the running server to stop; done is closed once every
	// component has; err is the first failure, read after done.
	stop context.CancelFunc
	done chan struct{}
	err  error

	mu     sync.Mutex
	broker *brokerSet // nil while disconnected

	// workers is the list of workers heard from (GET /v1/workers); it
	// outlives reconnects.
	workers *heartbeats.Registry
	// deadGrowth holds the dead-letter queues' sampled depths (GET
	// /v1/queues).
	deadGrowth   *queuestats.Growth
	jobDurations *jobDurations
	// consumers is since when each work queue read has had no consumer
	// (a job's "waiting"); reaper sweeps the work queues (queues.go), and
	// queueMu makes its unbinds and deletes take turns with the relay's
	// declares.
	consumers *queuestats.Consumers
	reaper    *queuereaper.Reaper
	queueMu   sync.Mutex
}

// New checks cfg and returns a server; it connects to nothing until
// Start or Run. Its errors are *ConfigError, naming the Config field that
// is wrong.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	reducers, err := cfg.registry()
	if err != nil {
		return nil, err
	}
	nodes, err := broker.ParseNodes(cfg.AMQPURL)
	if err != nil {
		return nil, fieldError("AMQPURL", "Config.AMQPURL: %v", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, nodes: nodes, names: protocol.NamesFor(cfg.Prefix), tiers: cfg.RetryTiers, reducers: reducers,
		pauseNudge: make(chan struct{}, 1)}
	s.sizer = autobatch.New(autobatch.Config{OnKnown: s.WakeRelay})
	s.workers, s.deadGrowth, s.jobDurations = heartbeats.NewRegistry(nil), queuestats.NewGrowth(), newJobDurations()
	s.consumers = queuestats.NewConsumers()
	if len(s.tiers) == 0 {
		s.tiers = protocol.DefaultRetryTiers
	}
	return s, nil
}

// Run starts the server and serves until ctx is done or a component fails
// for good, then stops it in order (Stop). It returns Start's error, or
// the failure that stopped the server, or nil after ctx is done. A lost
// broker connection is not a failure: the server reconnects by itself.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.done:
	}
	return s.Stop()
}

// Start opens the store, connects to the broker, declares the topology,
// binds the API's address and starts every component in the background;
// ctx bounds only the start-up. An unreachable broker or store, or an
// address in use, is a one-line error here, and everything opened is
// closed again. Stop stops what Start started.
func (s *Server) Start(ctx context.Context) error {
	err := ErrStarted
	s.startOnce.Do(func() { err = s.start(ctx) })
	return err
}

func (s *Server) start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.closeResources()
		}
	}()
	// The certificate first: a wrong file is refused before the store or
	// the broker is touched (no topology declared, nothing migrated).
	var tlsConfig *tls.Config
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("TLS certificate %s and key %s: %v", s.cfg.TLSCertFile, s.cfg.TLSKeyFile, err)
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	if s.store = s.cfg.Store; s.store == nil {
		if s.store, err = open.Open(ctx, s.cfg.DatabaseURL); err != nil {
			return err
		}
		s.ownStore = true
	}
	s.events = api.NewEvents(api.EventsConfig{PollInterval: s.cfg.EventsPollInterval})
	apiMetrics, err := s.registerMetrics()
	if err != nil {
		return err
	}
	if s.deliverer, err = s.newDeliverer(); err != nil {
		return err
	}
	// The first connection is made here so that a broker that does not
	// answer is a one-line error at start; later losses are retried.
	bs, err := s.connect(ctx)
	if err != nil {
		return err
	}
	s.setBroker(bs)
	if s.recon, err = reconciler.New(reconciler.Config{Store: s.store, Logger: s.log, Interval: s.cfg.ReconcileInterval,
		Grace: s.cfg.ReconcileGrace, Busy: s.queuesBusy,
		OnRequeued:     func(int) { s.WakeRelay() },
		OnReadyToClose: s.requestClose,
		OnPass:         s.cfg.Hooks.OnReconciled,
	}); err != nil {
		return err
	}
	if s.sweeper, err = s.newSweeper(); err != nil {
		return err
	}
	if s.reaper, err = s.newReaper(); err != nil {
		return err
	}
	handler, err := api.New(api.Config{
		Store: s.store, Reducers: s.reducers, Tokens: s.cfg.Tokens, Gatherer: s.registry, Metrics: apiMetrics,
		MaxBodyBytes: s.cfg.MaxBodyBytes, MaxTaskBytes: s.cfg.MaxTaskBytes, MaxMetadataBytes: s.cfg.MaxMetadataBytes, MaxJobTasks: s.cfg.MaxJobTasks, BodyTimeout: s.cfg.BodyTimeout, RetryTiers: s.tiers,
		Retention:           s.cfg.Retention,
		DeadLetters:         deadLetters{s},
		WebhookAllowPrivate: s.cfg.WebhookAllowPrivate,
		AllowedHosts:        s.allowedHosts(),
		Ready:               s.brokerReady,
		OnSubmit:            func(string) { s.WakeRelay() },
		OnRedrive:           func(string) { s.WakeRelay() },
		Pause:               s.broadcastPause,
		OnCancel: func(job warren.Job) {
			s.jobCancelled(job.ID)
			s.jobDurations.observe(job, warren.JobCancelled, *job.FinishedAt)
		},
		Workers:  s.workers.List,
		Queues:   s.readQueues,
		Waiting:  s.waiting,
		OnDelete: s.jobDeleted,
		Events:   s.events,
		Logger:   s.log,

		TracerProvider: s.cfg.TracerProvider,
	})
	if err != nil {
		return err
	}
	if s.listener, err = net.Listen("tcp", s.cfg.Listen); err != nil {
		return fmt.Errorf("cannot listen on %s: %v", s.cfg.Listen, err)
	}
	// No ReadTimeout or WriteTimeout: they would cut large uploads and
	// long result downloads. The API times request bodies by their
	// progress instead (Config.BodyTimeout).
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	// Event streams last as long as their jobs: Shutdown ends them rather
	// than waiting for them until ShutdownTimeout.
	s.http.RegisterOnShutdown(s.events.Close)
	s.http.TLSConfig = tlsConfig

	runCtx, stop := context.WithCancel(context.Background())
	s.stop, s.done = stop, make(chan struct{})
	go s.run(runCtx)
	return nil
}

// registerMetrics builds the server's Prometheus registry, served at
// /metrics: Go and process collectors, the relay's, the aggregator's and
// the API's metrics, the outbox backlog and the queue depths.
func (s *Server) registerMetrics() (*api.Metrics, error) {
	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.published = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warren_relay_published_total",
		Help: "Tasks the relay published and the broker confirmed.",
	})
	s.batches = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "warren_relay_message_tasks",
		Help:    "Tasks per task message the relay published and the broker confirmed: the batch sizes, chosen by the jobs' batch_size or by warren.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000},
	})
	var queues []string
	for _, q := range s.knownQueues(nil) {
		queues = append(queues, q.name)
	}
	s.failed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warren_relay_failed_total",
		Help: "Tasks the relay failed because their message cannot be published (refused by the broker, or not encodable).",
	})
	s.deleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_jobs_deleted_total",
		Help: "Closed jobs deleted with their tasks, results and idempotency keys: past their retention (reason=\"expired\") or by DELETE /v1/jobs/{id} (reason=\"api\").",
	}, []string{"reason"})
	s.deleted.WithLabelValues("expired")
	s.deleted.WithLabelValues("api")
	s.purged = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warren_tasks_purged_total",
		Help: "Task rows of deleted jobs purged from the store (in batches, after their jobs were deleted).",
	})
	s.registry.MustRegister(s.published, s.batches, s.failed, s.deleted, s.purged,
		relay.NewBacklogCollector(s.store), metrics.NewDepthCollector(s.consumerConn, queues...).WithExtra(s.openWorkQueues),
		s.jobDurations.hist)
	var err error
	if s.webhooks, err = webhooks.NewMetrics(s.registry, s.store); err != nil {
		return nil, err
	}
	h := s.cfg.Hooks
	s.aggHooks = aggregator.NewMetrics(s.registry).Hooks(aggregator.Hooks{
		OnInvalid: h.OnInvalid,
		OnOutcomes: func(outcomes []store.Outcome) {
			s.sizer.Observe(outcomes)
			// A capped job's outcome frees room: its next task goes out
			// now, not at the relay's next poll.
			if bs := s.current(); bs != nil {
				bs.relay.Recorded(outcomes)
			}
		},
		OnBatch: func(size int, report store.ApplyReport) {
			for _, id := range report.ReadyToClose {
				s.events.Notify(id) // its last outcome: the streams show it now, the close follows
			}
			if len(report.SpawnedJobs) > 0 {
				for _, id := range report.SpawnedJobs {
					s.events.Notify(id) // expected_tasks grew: the streams show it now
				}
				s.WakeRelay() // the spawned tasks are pending: publish them now
			}
			if h.OnBatch != nil {
				h.OnBatch(size, report)
			}
		},
		OnJobFinished: func(job warren.Job, state warren.JobState) {
			// The job's created_at is the store's clock, which another
			// server's may be off from: the duration is read on it too.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if now, err := s.store.Now(ctx); err == nil {
				s.jobDurations.observe(job, state, now)
			}
		},
		OnReduceStarted: func(id string) {
			s.events.Notify(id) // reduce_state "running": the streams show it now
			s.WakeRelay()
		},
		OnJobClosed: func(id string, state warren.JobState) {
			s.sizer.Forget(id)
			if bs := s.current(); bs != nil {
				bs.relay.ForgetJob(id)
			}
			s.events.Notify(id)
			s.wakeDeliverer()
			if h.OnJobClosed != nil {
				h.OnJobClosed(id, state)
			}
		},
		OnFollowUp: func(id, next string) {
			// The follow-up's tasks are pending, or it closed failed with
			// a webhook delivery to make.
			s.WakeRelay()
			s.events.Notify(next)
			s.wakeDeliverer()
			if h.OnFollowUp != nil {
				h.OnFollowUp(id, next)
			}
		},
	})
	return api.NewMetrics(s.registry, s.store)
}

// run runs the components until ctx is done or one fails, then stops them
// in order: the API first (no new submissions; requests in progress get
// Config.ShutdownTimeout), then the relay, aggregator, reconciler,
// retention sweeper and webhook deliverer (the aggregator records the
// batch it holds; unacknowledged results return to their queue; a sweep
// stops between two of its transactions; a webhook attempt in flight is
// cut and recorded as due at once), then the broker connections and the
// store.
func (s *Server) run(ctx context.Context) {
	defer close(s.done)
	engine, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
	)
	fail := func(err error) {
		errOnce.Do(func() { s.err = err })
		s.stop()
	}
	component := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run(engine)
			if err == nil && engine.Err() == nil {
				err = errors.New("stopped unexpectedly")
			}
			if err != nil {
				fail(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	component("broker supervisor", s.superviseBroker)
	component("reconciler", s.recon.Run)
	component("retention", s.sweeper.Run)
	component("dead-letter sampler", s.sampleDeadLetters)
	component("queue reaper", s.reaper.Run)
	component("webhooks", s.deliverer.Run)
	component("pause refresher", s.refreshPauses)
	if l, ok := s.store.(store.CloseListener); ok {
		// Closes by the other servers of the store reach this one's
		// event streams at once.
		component("close listener", func(ctx context.Context) error { return l.ListenClosed(ctx, s.events.Notify) })
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		serve := s.http.Serve
		if s.http.TLSConfig != nil {
			serve = func(l net.Listener) error { return s.http.ServeTLS(l, "", "") }
		}
		if err := serve(s.listener); !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("http: %w", err))
		}
	}()

	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		fail(fmt.Errorf("http shutdown: %w", err))
		_ = s.http.Close()
	}
	cancel()
	<-served
	stopEngine()
	wg.Wait()
}

// Stop stops a started server in order (see Run) and waits for it. It
// returns the failure that stopped the server on its own, if one did. It
// is safe to call more than once and from several goroutines.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
		s.closeResources()
	})
	if s.done == nil {
		return nil
	}
	<-s.done
	return s.err
}

// Done is closed once a started server has stopped, on its own after a
// failure or after Stop.
func (s *Server) Done() <-chan struct{} {
	if s.done == nil {
		return nil
	}
	return s.done
}

// closeResources closes what start opened: the event streams' hub, the
// listener, the broker connections and the store (only if the server
// opened it).
func (s *Server) closeResources() {
	if s.events != nil {
		s.events.Close()
	}
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if bs := s.current(); bs != nil {
		s.setBroker(nil)
		bs.close()
	}
	if s.ownStore && s.store != nil {
		_ = s.store.Close()
	}
}

// URL is the API's base URL, such as "http://127.0.0.1:8080" (https://
// with TLS), once started; with Config.Listen port 0 it has the port
// chosen.
func (s *Server) URL() string {
	if s.listener == nil {
		return ""
	}
	if s.cfg.TLSCertFile != "" {
		return "https://" + s.listener.Addr().String()
	}
	return "http://" + s.listener.Addr().String()
}

// Registry is the Prometheus registry of the server's metrics, served at
// /metrics, once started (nil before). An embedding program may register
// collectors of its own on it.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Store is the server's job store once started.
func (s *Server) Store() store.Store { return s.store }

// WakeRelay makes the relay look at the outbox now. The API calls it
// after each submission; call it after writing jobs to the Store
// directly, or the relay finds them at its next poll.
func (s *Server) WakeRelay() {
	if bs := s.current(); bs != nil {
		bs.relay.Wake()
	}
}

// CloseJob closes a job that is ready to close (every task finished, or
// failures over a fail-fast job's tolerance) now, as the aggregator does
// on its own: completed with its reduced result, or failed. It is
// idempotent and safe to call from several servers at once: exactly one
// closes the job. It returns nil when the job was already closed or is
// not ready, and an error while the broker is disconnected.
func (s *Server) CloseJob(ctx context.Context, jobID string) error {
	bs := s.current()
	if bs == nil {
		return errDisconnected
	}
	return bs.agg.CloseJob(ctx, jobID)
}

// allowedHosts are the host names the API answers to without tokens
// (besides localhost and IP addresses): Config.AllowedHosts and the
// listen address's own name.
func (s *Server) allowedHosts() []string {
	hosts := slices.Clone(s.cfg.AllowedHosts)
	if host, _, err := net.SplitHostPort(s.cfg.Listen); err == nil && host != "" {
		hosts = append(hosts, host)
	}
	return hosts
}

// newSweeper returns the retention sweeper: it deletes the jobs past
// their retention every Config.RetentionInterval, counted in
// warren_jobs_deleted_total{reason="expired"} and
// warren_tasks_purged_total.
func (s *Server) newSweeper() (*retention.Sweeper, error) {
	cfg := retention.Config{
		Store: s.store, Retention: s.cfg.Retention, Interval: s.cfg.RetentionInterval, Logger: s.log,
		OnDeleted: func(n int) { s.deleted.WithLabelValues("expired").Add(float64(n)) },
		OnPurged:  func(n int) { s.purged.Add(float64(n)) },
	}
	if h := s.cfg.Hooks.OnRetentionSweep; h != nil {
		cfg.OnSweep = func(r retention.Report) { h(r.Jobs, r.Tasks) }
	}
	return retention.New(cfg)
}

// newDeliverer returns the webhook deliverer, counted in
// warren_webhook_deliveries_total and _pending.
func (s *Server) newDeliverer() (*webhooks.Deliverer, error) {
	cfg := webhooks.Config{Store: s.store, AllowPrivate: s.cfg.WebhookAllowPrivate, Metrics: s.webhooks, Logger: s.log,
		Schedule: webhooks.Schedule{Jitter: webhooks.DefaultJitter}}
	if h := s.cfg.Hooks.OnWebhookAttempt; h != nil {
		cfg.OnAttempt = func(a webhooks.Attempt) {
			if a.Recorded {
				h(a.Delivery.JobID, a.Result)
			}
		}
	}
	return webhooks.New(cfg)
}

// wakeDeliverer has the webhook deliverer look for due deliveries now: a
// job closed in this process.
func (s *Server) wakeDeliverer() {
	if s.deliverer != nil {
		s.deliverer.Wake()
	}
}

// jobCancelled tells the workers that a job was cancelled through the
// API, and has its webhook delivered.
func (s *Server) jobCancelled(jobID string) {
	s.broadcastCancel(jobID)
	s.wakeDeliverer()
}

// jobDeleted counts a job deleted through the API and has the sweeper
// purge its tasks now rather than at its next interval.
func (s *Server) jobDeleted(string) {
	s.deleted.WithLabelValues("api").Inc()
	if s.sweeper != nil {
		s.sweeper.Wake()
	}
}

// requestClose asks the aggregator to close a job soon, without waiting.
func (s *Server) requestClose(jobID string) {
	if bs := s.current(); bs != nil {
		bs.agg.RequestClose(jobID)
	}
	// Disconnected: the next aggregator's start-up scan closes the job.
}
