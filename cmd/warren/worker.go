package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenhq/warren/cmd/warren/internal/handlers"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workermetrics"
)

func runWorker(ctx context.Context, args []string, env *environment) error {
	var c common
	fs := newFlagSet("worker", "Run a worker with the built-in handlers: echo, wordcount, sleep, flaky.", env)
	c.register(fs, env)
	// The flags of worker.Config fields are read back through
	// worker.ConfigFromLookup (worker.EnvVars names them), the mapping
	// worker.ConfigFromEnv uses: only the command's own are kept here.
	concurrency := fs.Int("concurrency", 8, "handlers running at once")
	fs.String("name", "", "the worker's name in results, dead letters and GET /v1/workers (default host:pid)")
	types := fs.String("types", "", "comma-separated handlers and reducers to serve (default: all built-ins: echo, flaky, sleep, tree, wordcount, and the reducer top_words)")
	fs.String("queues", "", "comma-separated work queues to consume, the jobs' \"queue\" option (default: default)")
	fs.Duration("shutdown-timeout", 0, "how long to let in-flight tasks finish on SIGTERM (default 30s)")
	health := fs.String("health-listen", "", "serve /healthz and /readyz (connected to the broker) on this address, e.g. 127.0.0.1:9090")
	metricsAddr := fs.String("metrics-listen", "",
		"serve Prometheus metrics at /metrics (and /healthz) on this address, e.g. 127.0.0.1:9091 (default: off)")
	fs.Int("max-message-bytes", protocol.DefaultMaxMessageBytes,
		"largest task message taken and result message published; keep it equal to the server's")
	fs.Int("max-task-result-bytes", protocol.DefaultMaxResultBytes,
		"largest result of one task in bytes of JSON; a larger one fails the task")
	fs.Int64("max-inflight-bytes", 0,
		"task message bytes held at once, which bounds the prefetch (default 256 MiB, or --concurrency messages when more)")
	fs.Int("quorum-replicas", 0, quorumReplicasUsage)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	serve, err := selectBuiltins(*types)
	if err != nil {
		return usageErrorf("%s: %v", fs.from("types"), err)
	}
	flags := map[string]string{}
	for _, v := range worker.EnvVars() {
		flags[v.Name] = v.Flag
	}
	cfg, err := worker.ConfigFromLookup(fs.settings(flags))
	if err != nil {
		return fs.settingError(err)
	}
	tp, flush, err := startTracing(ctx, env, "warren-worker")
	if err != nil {
		return err
	}
	defer flush()
	var ready atomic.Bool
	// observe is set before Run, the first to call OnEvent.
	observe := func(worker.Event) {}
	cfg.TracerProvider, cfg.Logger = tp, env.logger
	cfg.OnEvent = func(e worker.Event) {
		observe(e)
		switch e.Kind {
		case worker.EventConnected, worker.EventReconnected:
			ready.Store(true)
		case worker.EventConnectionLost:
			ready.Store(false)
		}
	}
	w, err := worker.New(cfg)
	if err != nil {
		return fs.configError(err, workerFields)
	}
	if *metricsAddr != "" {
		m, stop, err := serveWorkerMetrics(*metricsAddr, env)
		if err != nil {
			return err
		}
		defer stop()
		observe = m.Observe
	}
	if *health != "" {
		stop, err := serveHealth(*health, &ready, env)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, name := range serve {
		if fn, ok := handlers.Reducers[name]; ok {
			w.Reducer(name, fn)
		} else {
			w.Handle(name, handlers.Builtins[name])
		}
	}
	env.logger.Info("warren worker running", "types", strings.Join(serve, ","), "queues", strings.Join(orDefaultQueue(cfg.Queues), ","),
		"concurrency", *concurrency, "prefix", c.prefix, "amqp", broker.Redact(c.amqpURL))
	return w.Run(ctx)
}

// orDefaultQueue is the queues a worker consumes: queues, or the default
// queue when there are none.
func orDefaultQueue(queues []string) []string {
	if len(queues) == 0 {
		return []string{protocol.DefaultQueue}
	}
	return queues
}

// workerFields names the flag of each worker.Config field that has one,
// or words for one that has none, for configError.
var workerFields = map[string]string{
	"AMQPURL": "amqp-url", "Prefix": "prefix", "Concurrency": "concurrency", "Name": "name",
	"ShutdownTimeout": "shutdown-timeout", "RetryTiers": "retry-tiers", "QuorumReplicas": "quorum-replicas",
	"Queues": "queues", "MaxMessageBytes": "max-message-bytes", "MaxResultBytes": "max-task-result-bytes",
	"MaxInflightBytes": "max-inflight-bytes", "Prefetch": "the prefetch",
}

// selectBuiltins parses --types; empty means every built-in handler and
// reducer.
func selectBuiltins(list string) ([]string, error) {
	var out []string
	if strings.TrimSpace(list) == "" {
		for name := range handlers.Builtins {
			out = append(out, name)
		}
		for name := range handlers.Reducers {
			out = append(out, name)
		}
		sort.Strings(out)
		return out, nil
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		_, handler := handlers.Builtins[name]
		_, reducer := handlers.Reducers[name]
		if !handler && !reducer {
			return nil, fmt.Errorf("unknown handler %q (built-ins: echo, flaky, sleep, tree, wordcount; reducer: top_words)", name)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}

// serveHealth serves a worker's /healthz (the process is up) and /readyz
// (connected to the broker, else 503) on addr, until stop is called.
func serveHealth(addr string, ready *atomic.Bool, env *environment) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, "ok", "")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready.Load() {
			writeHealth(w, http.StatusOK, "ready", "")
			return
		}
		writeHealth(w, http.StatusServiceUnavailable, "", "not connected to the broker")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	env.logger.Info("worker health endpoints", "addr", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// serveWorkerMetrics serves the worker's Prometheus metrics at /metrics,
// and /healthz, on addr until stop is called; feed the returned metrics
// the worker's events.
func serveWorkerMetrics(addr string, env *environment) (_ *workermetrics.Metrics, stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := workermetrics.New(reg)
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-listen %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, "ok", "")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	env.logger.Info("worker metrics endpoint", "addr", l.Addr().String())
	return m, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func writeHealth(w http.ResponseWriter, status int, state, problem string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if problem != "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "unavailable", "message": problem}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": state})
}
