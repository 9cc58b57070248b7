package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/reconciler"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/open"
)

// DefaultListen is the API's address when WARREN_LISTEN is not set.
const DefaultListen = "127.0.0.1:8080"

// stackFlags are the settings of what `warren server` runs.
type stackFlags struct {
	common
	listen     string
	tokens     string
	maxBody    int64
	aggBatch   int
	aggLinger  time.Duration
	relayBatch int
	shutdown   time.Duration
}

func (f *stackFlags) register(fs *flag.FlagSet, env *environment) {
	f.common.register(fs, env)
	fs.StringVar(&f.listen, "listen", orDefault(env.getenv("WARREN_LISTEN"), DefaultListen), "HTTP API address (env WARREN_LISTEN)")
	fs.StringVar(&f.tokens, "api-tokens", env.getenv("WARREN_API_TOKENS"), "API tokens: token:scope[+scope],... with scopes read, write, admin (env WARREN_API_TOKENS); without tokens the API only listens on loopback")
	fs.Int64Var(&f.maxBody, "max-body", api.DefaultMaxBodyBytes, "largest accepted request body in bytes")
	fs.IntVar(&f.aggBatch, "aggregator-batch", aggregator.DefaultBatchSize, "results recorded per store transaction")
	fs.DurationVar(&f.aggLinger, "aggregator-linger", aggregator.DefaultLinger, "how long a result batch waits to fill, once more than one result is waiting (a lone result is recorded at once)")
	fs.IntVar(&f.relayBatch, "relay-batch", relay.DefaultBatchSize, "tasks published per outbox round trip")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long requests in progress may take to finish")
}

func (f *stackFlags) check() ([]api.Token, error) {
	if _, err := f.tiers(); err != nil {
		return nil, err
	}
	if f.aggBatch < 1 || f.relayBatch < 1 || f.aggLinger < 0 {
		return nil, errors.New("--aggregator-batch and --relay-batch must be >= 1 and --aggregator-linger >= 0")
	}
	if f.shutdown <= 0 {
		return nil, fmt.Errorf("--shutdown-timeout must be > 0, got %s", f.shutdown)
	}
	if f.maxBody < 1 {
		return nil, fmt.Errorf("--max-body must be >= 1, got %d", f.maxBody)
	}
	tokens, err := api.ParseTokens(f.tokens)
	if err != nil {
		return nil, fmt.Errorf("WARREN_API_TOKENS: %w", err)
	}
	if len(tokens) == 0 {
		if err := requireLoopback(f.listen); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// requireLoopback refuses a listen address reachable from other hosts,
// for a server without API tokens.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without API tokens: set WARREN_API_TOKENS, or listen on a loopback address such as %s", addr, DefaultListen)
}

// stack is a running server: store, HTTP API and reconciler, plus the
// broker side (connections, relay, aggregator, dead letters), which is
// rebuilt whenever a broker connection is lost.
type stack struct {
	log      *slog.Logger
	flags    *stackFlags
	names    protocol.Names
	tiers    []time.Duration
	store    store.Store
	recon    *reconciler.Reconciler
	http     *http.Server
	listener net.Listener

	published  prometheus.Counter
	aggMetrics *aggregator.Metrics

	mu     sync.Mutex
	broker *brokerSet // nil while disconnected
}

// brokerSet is everything that lives on one pair of broker connections.
type brokerSet struct {
	pubConn *amqp.Connection
	conConn *amqp.Connection
	pub     *broker.Publisher
	relay   *relay.Relay
	agg     *aggregator.Aggregator
	dlq     *deadletters.Queue
}

// openStack connects to everything and binds the API's address; run
// starts the work. On error everything opened is closed again, and the
// error is one line (an unreachable broker or store fails here).
func openStack(ctx context.Context, f *stackFlags, tokens []api.Token, log *slog.Logger) (_ *stack, err error) {
	s := &stack{log: log, flags: f, names: f.names()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.tiers, err = f.tiers(); err != nil {
		return nil, err
	}
	if len(s.tiers) == 0 {
		s.tiers = protocol.DefaultRetryTiers
	}
	if s.store, err = open.Open(ctx, f.databaseURL); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.published = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warren_relay_published_total",
		Help: "Task messages the relay published and the broker confirmed.",
	})
	queues := []string{s.names.TasksQueue, s.names.ResultsQueue, s.names.DeadQueue, s.names.TasksDLQ, s.names.ResultsDLQ}
	for _, d := range s.tiers {
		queues = append(queues, s.names.RetryQueue(protocol.RetryTierName(d)))
	}
	reg.MustRegister(s.published, relay.NewBacklogCollector(s.store), metrics.NewDepthCollector(s.consumerConn, queues...))
	s.aggMetrics = aggregator.NewMetrics(reg)
	apiMetrics, err := api.NewMetrics(reg, s.store)
	if err != nil {
		return nil, err
	}

	// The first connection is made here so that a broker that does not
	// answer is a one-line error at start; later losses are retried.
	bs, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.setBroker(bs)

	if s.recon, err = reconciler.New(reconciler.Config{Store: s.store, Logger: log,
		OnRequeued:     func(int) { s.wakeRelay() },
		OnReadyToClose: s.requestClose,
	}); err != nil {
		return nil, err
	}
	handler, err := api.New(api.Config{
		Store: s.store, Tokens: tokens, MaxBodyBytes: f.maxBody, Gatherer: reg, Metrics: apiMetrics,
		DeadLetters: deadLetters{s},
		Ready:       s.brokerReady,
		OnSubmit:    func(string) { s.wakeRelay() },
		OnRedrive:   func(string) { s.wakeRelay() },
		OnCancel:    s.broadcastCancel,
		Logger:      log,
	})
	if err != nil {
		return nil, err
	}
	if s.listener, err = net.Listen("tcp", f.listen); err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %v", f.listen, err)
	}
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	return s, nil
}

// connect dials both broker connections, declares the topology and builds
// the broker-side components on them.
func (s *stack) connect(ctx context.Context) (_ *brokerSet, err error) {
	bs := &brokerSet{}
	defer func() {
		if err != nil {
			bs.close()
		}
	}()
	// Publishing and consuming use separate connections: a publisher
	// throttled by the broker must not stop the aggregator's acks. The
	// prefix in their names tells installations apart on one broker.
	suffix := ""
	if s.names.Prefix != "" {
		suffix = " " + s.names.Prefix
	}
	if bs.pubConn, err = broker.Dial(ctx, s.flags.amqpURL, "warren server (relay)"+suffix); err != nil {
		return nil, err
	}
	if bs.conConn, err = broker.Dial(ctx, s.flags.amqpURL, "warren server (aggregator)"+suffix); err != nil {
		return nil, err
	}
	if err = broker.DeclareTopology(bs.conConn, s.names, &broker.TopologyOptions{RetryTiers: s.tiers}); err != nil {
		return nil, err
	}
	if bs.pub, err = broker.NewPublisher(bs.pubConn, &broker.PublisherOptions{Logger: s.log}); err != nil {
		return nil, err
	}
	if bs.relay, err = relay.New(relay.Config{Store: s.store, Publisher: bs.pub, Names: s.names, BatchSize: s.flags.relayBatch,
		Logger: s.log, OnPublished: func(n int) { s.published.Add(float64(n)) }}); err != nil {
		return nil, err
	}
	// A job closed failed (fail-fast) is not broadcast as cancelled: it
	// may be redriven, and workers would then skip its redriven tasks. Its
	// unpublished tasks are never sent; queued ones run and their results
	// are ignored.
	if bs.agg, err = aggregator.New(aggregator.Config{Store: s.store, Conn: bs.conConn, Names: s.names,
		BatchSize: s.flags.aggBatch, Linger: s.flags.aggLinger, Logger: s.log,
		Hooks: s.aggMetrics.Hooks(aggregator.Hooks{})}); err != nil {
		return nil, err
	}
	if bs.dlq, err = deadletters.New(deadletters.Config{Conn: bs.conConn, Publisher: bs.pub, Names: s.names, Store: s.store, Logger: s.log}); err != nil {
		return nil, err
	}
	return bs, nil
}

// run runs the relay and the aggregator until ctx is done (nil) or one of
// them fails, which is a lost connection or channel.
func (bs *brokerSet) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopOthers(gctx, "relay", bs.relay.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "aggregator", bs.agg.Run(gctx)) })
	return g.Wait()
}

func (bs *brokerSet) close() {
	if bs.pub != nil {
		_ = bs.pub.Close()
	}
	for _, c := range []*amqp.Connection{bs.pubConn, bs.conConn} {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (s *stack) setBroker(bs *brokerSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broker = bs
}

func (s *stack) current() *brokerSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broker
}

// consumerConn is the current consumer connection, for the queue-depth
// metric; nil while disconnected.
func (s *stack) consumerConn() *amqp.Connection {
	if bs := s.current(); bs != nil {
		return bs.conConn
	}
	return nil
}

func (s *stack) wakeRelay() {
	if bs := s.current(); bs != nil {
		bs.relay.Wake()
	}
}

func (s *stack) requestClose(jobID string) {
	if bs := s.current(); bs != nil {
		bs.agg.RequestClose(jobID)
	}
	// Disconnected: the next aggregator's start-up scan closes the job.
}

// superviseBroker runs the broker side and rebuilds it, with exponential
// backoff and jitter, whenever a connection or channel is lost: the API
// keeps serving meanwhile (/readyz answers 503), tasks not yet confirmed
// stay in the outbox and results not yet acknowledged stay in their
// queue, so nothing is lost.
func (s *stack) superviseBroker(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		if bs := s.current(); bs != nil {
			err := bs.run(ctx)
			s.setBroker(nil)
			bs.close()
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("broker connection lost; reconnecting", "error", err)
		}
		wait := backoff/2 + rand.N(backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		bs, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("reconnecting to the broker failed; retrying", "error", err, "backoff", backoff)
			backoff = min(2*backoff, maxReconnectBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		s.setBroker(bs)
		s.log.Info("broker connection restored")
	}
}

// maxReconnectBackoff caps the wait between reconnection attempts.
const maxReconnectBackoff = 10 * time.Second

// deadLetters serves the API's dead-letter operations on the current
// broker connection.
type deadLetters struct{ s *stack }

var errDisconnected = errors.New("not connected to the broker; reconnecting")

func (d deadLetters) List(ctx context.Context, f deadletters.Filter) ([]deadletters.Message, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.List(ctx, f)
	}
	return nil, errDisconnected
}

func (d deadLetters) Replay(ctx context.Context, f deadletters.Filter) (deadletters.Report, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.Replay(ctx, f)
	}
	return deadletters.Report{}, errDisconnected
}

func (d deadLetters) Purge(ctx context.Context, f deadletters.Filter) (int, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.Purge(ctx, f)
	}
	return 0, errDisconnected
}

// broadcastCancel tells every worker, in the background, to skip the
// job's remaining tasks. A missed broadcast costs only wasted work: the
// aggregator ignores results of closed jobs.
func (s *stack) broadcastCancel(jobID string) {
	bs := s.current()
	if bs == nil {
		s.log.Warn("cancel not broadcast (broker disconnected); workers will run the job's queued tasks and their results will be ignored", "job_id", jobID)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := broker.PublishCancel(ctx, bs.pub, s.names, jobID); err != nil {
			s.log.Warn("cancel broadcast failed; workers will run the job's queued tasks and their results will be ignored",
				"job_id", jobID, "error", err)
		}
	}()
}

// brokerReady reports whether the broker side is connected.
func (s *stack) brokerReady(context.Context) error {
	bs := s.current()
	if bs == nil {
		return errDisconnected
	}
	if bs.pubConn.IsClosed() || bs.conConn.IsClosed() {
		return errors.New("broker connection lost")
	}
	select {
	case <-bs.pub.Done():
		return errors.New("broker publisher channel closed")
	default:
	}
	return nil
}

// url is the API's base URL.
func (s *stack) url() string { return "http://" + s.listener.Addr().String() }

// run serves until ctx is done, then shuts down: the API stops taking
// requests, the relay and the aggregator stop (unacked results return to
// their queue). Broker losses are survived (superviseBroker); a failing
// HTTP listener or reconciler stops everything.
func (s *stack) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopOthers(gctx, "broker supervisor", s.superviseBroker(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "reconciler", s.recon.Run(gctx)) })
	g.Go(func() error {
		err := s.http.Serve(s.listener)
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("http: %w", err)
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), s.flags.shutdown)
		defer cancel()
		return s.http.Shutdown(shutdownCtx)
	})
	return g.Wait()
}

func (s *stack) close() {
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if bs := s.current(); bs != nil {
		bs.close()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}

// stopOthers turns a component that returned early, without error, while
// the server is still meant to run, into an error so the group stops.
func stopOthers(ctx context.Context, name string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ctx.Err() == nil {
		return fmt.Errorf("%s stopped unexpectedly", name)
	}
	return nil
}
