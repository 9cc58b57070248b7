package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/warrenhq/warren/aggregator"
	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/broker"
	"github.com/warrenhq/warren/dlq"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reconciler"
	"github.com/warrenhq/warren/relay"
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
}

func (f *stackFlags) register(fs *flag.FlagSet, env *environment) {
	f.common.register(fs, env)
	fs.StringVar(&f.listen, "listen", orDefault(env.getenv("WARREN_LISTEN"), DefaultListen), "HTTP API address (env WARREN_LISTEN)")
	fs.StringVar(&f.tokens, "api-tokens", env.getenv("WARREN_API_TOKENS"), "API tokens: token:scope[+scope],... with scopes read, write, admin (env WARREN_API_TOKENS); without tokens the API only listens on loopback")
	fs.Int64Var(&f.maxBody, "max-body", api.DefaultMaxBodyBytes, "largest accepted request body in bytes")
	fs.IntVar(&f.aggBatch, "aggregator-batch", aggregator.DefaultBatchSize, "results recorded per store transaction")
	fs.DurationVar(&f.aggLinger, "aggregator-linger", aggregator.DefaultLinger, "how long a result batch waits to fill")
	fs.IntVar(&f.relayBatch, "relay-batch", relay.DefaultBatchSize, "tasks published per outbox round trip")
}

func (f *stackFlags) check() ([]api.Token, error) {
	if _, err := f.tiers(); err != nil {
		return nil, err
	}
	if f.aggBatch < 1 || f.relayBatch < 1 || f.aggLinger < 0 {
		return nil, errors.New("--aggregator-batch and --relay-batch must be >= 1 and --aggregator-linger >= 0")
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

// stack is a running server: store, broker connections, relay,
// aggregator and HTTP API.
type stack struct {
	log      *slog.Logger
	store    store.Store
	pubConn  *amqp.Connection
	conConn  *amqp.Connection
	pub      *broker.Publisher
	relay    *relay.Relay
	agg      *aggregator.Aggregator
	recon    *reconciler.Reconciler
	names    protocol.Names
	http     *http.Server
	listener net.Listener
}

// openStack connects to everything and binds the API's address; run
// starts the work. On error everything opened is closed again.
func openStack(ctx context.Context, f *stackFlags, tokens []api.Token, log *slog.Logger) (_ *stack, err error) {
	s := &stack{log: log}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	names := f.names()
	s.names = names
	if s.store, err = open.Open(ctx, f.databaseURL); err != nil {
		return nil, err
	}
	// Publishing and consuming use separate connections: a publisher
	// throttled by the broker must not stop the aggregator's acks.
	if s.pubConn, err = broker.Dial(ctx, f.amqpURL, "warren server (relay)"); err != nil {
		return nil, err
	}
	if s.conConn, err = broker.Dial(ctx, f.amqpURL, "warren server (aggregator)"); err != nil {
		return nil, err
	}
	tiers, err := f.tiers()
	if err != nil {
		return nil, err
	}
	if len(tiers) == 0 {
		tiers = protocol.DefaultRetryTiers
	}
	if err = broker.DeclareTopology(s.conConn, names, &broker.TopologyOptions{RetryTiers: tiers}); err != nil {
		return nil, err
	}
	if s.pub, err = broker.NewPublisher(s.pubConn, nil); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	published := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "warren_relay_published_total",
		Help: "Task messages the relay published and the broker confirmed.",
	})
	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ}
	for _, d := range tiers {
		queues = append(queues, names.RetryQueue(protocol.RetryTierName(d)))
	}
	reg.MustRegister(published, relay.NewBacklogCollector(s.store), broker.NewDepthCollector(s.conConn, queues...))
	aggMetrics := aggregator.NewMetrics(reg)
	apiMetrics, err := api.NewMetrics(reg, s.store)
	if err != nil {
		return nil, err
	}

	if s.relay, err = relay.New(relay.Config{Store: s.store, Publisher: s.pub, Names: names, BatchSize: f.relayBatch,
		Logger: log, OnPublished: func(n int) { published.Add(float64(n)) }}); err != nil {
		return nil, err
	}
	if s.agg, err = aggregator.New(aggregator.Config{Store: s.store, Conn: s.conConn, Names: names,
		// A job closed failed (fail-fast) is not broadcast as cancelled:
		// it may be redriven, and workers would then skip its redriven
		// tasks. Its unpublished tasks are never sent; queued ones run and
		// their results are ignored.
		BatchSize: f.aggBatch, Linger: f.aggLinger, Logger: log, Hooks: aggMetrics.Hooks(aggregator.Hooks{})}); err != nil {
		return nil, err
	}
	if s.recon, err = reconciler.New(reconciler.Config{Store: s.store, Logger: log,
		OnRequeued:     func(int) { s.relay.Wake() },
		OnReadyToClose: s.agg.RequestClose,
	}); err != nil {
		return nil, err
	}
	deadLetters, err := dlq.New(dlq.Config{Conn: s.conConn, Publisher: s.pub, Names: names, Store: s.store, Logger: log})
	if err != nil {
		return nil, err
	}
	handler, err := api.New(api.Config{
		DeadLetters: deadLetters,
		Store:       s.store, Tokens: tokens, MaxBodyBytes: f.maxBody, Gatherer: reg, Metrics: apiMetrics,
		Ready:     s.brokerReady,
		OnSubmit:  func(string) { s.relay.Wake() },
		OnRedrive: func(string) { s.relay.Wake() },
		OnCancel:  s.broadcastCancel,
		Logger:    log,
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

// broadcastCancel tells every worker, in the background, to skip the
// job's remaining tasks. A missed broadcast costs only wasted work: the
// aggregator ignores results of closed jobs.
func (s *stack) broadcastCancel(jobID string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := broker.PublishCancel(ctx, s.pub, s.names, jobID); err != nil {
			s.log.Warn("cancel broadcast failed; workers will run the job's queued tasks and their results will be ignored",
				"job_id", jobID, "error", err)
		}
	}()
}

// brokerReady reports whether both broker connections are open.
func (s *stack) brokerReady(context.Context) error {
	if s.pubConn.IsClosed() || s.conConn.IsClosed() {
		return errors.New("broker connection lost")
	}
	select {
	case <-s.pub.Done():
		return errors.New("broker publisher channel closed")
	default:
	}
	return nil
}

// url is the API's base URL.
func (s *stack) url() string { return "http://" + s.listener.Addr().String() }

// run serves until ctx is done or a part fails, then shuts down: the API
// stops taking requests, the relay and the aggregator stop (unacked
// results return to their queue).
func (s *stack) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopOthers(gctx, "relay", s.relay.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "aggregator", s.agg.Run(gctx)) })
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
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.http.Shutdown(shutdownCtx)
	})
	return g.Wait()
}

func (s *stack) close() {
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if s.pub != nil {
		_ = s.pub.Close()
	}
	for _, c := range []*amqp.Connection{s.pubConn, s.conConn} {
		if c != nil {
			_ = c.Close()
		}
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
