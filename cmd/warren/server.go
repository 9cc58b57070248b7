package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/server"
)

// serverFlags are the settings of what `warren server` runs.
type serverFlags struct {
	common
	listen      string
	tokens      string
	maxBody     int64
	aggBatch    int
	aggLinger   time.Duration
	relayBatch  int
	relayWindow int64
	maxMessage  int64
	maxInflight int64
	shutdown    time.Duration
	replicas    int

	maxTask     int64
	maxResult   int64
	bodyTimeout time.Duration
	idleTimeout time.Duration
	retention   retentionFlag

	webhookAllowPrivate bool
}

func (f *serverFlags) register(fs *flag.FlagSet, env *environment) {
	f.common.register(fs, env)
	fs.StringVar(&f.listen, "listen", orDefault(env.getenv("WARREN_LISTEN"), server.DefaultListen), "HTTP API address (env WARREN_LISTEN)")
	fs.StringVar(&f.tokens, "api-tokens", env.getenv("WARREN_API_TOKENS"), "API tokens: token:scope[+scope],... with scopes read, write, admin (env WARREN_API_TOKENS); without tokens the API only listens on loopback")
	fs.Int64Var(&f.maxBody, "max-body", server.DefaultMaxBodyBytes, "largest accepted request body in bytes")
	fs.Int64Var(&f.maxTask, "max-task-bytes", f.envInt64(env, "WARREN_MAX_TASK_BYTES", server.DefaultMaxTaskBytes),
		"largest accepted task payload in bytes; a submission with a larger one is refused (env WARREN_MAX_TASK_BYTES)")
	fs.Int64Var(&f.maxResult, "max-result-bytes", f.envInt64(env, "WARREN_MAX_RESULT_BYTES", server.DefaultMaxResultBytes),
		"largest reduced result a job may have in bytes; a job whose reduce gives more fails (env WARREN_MAX_RESULT_BYTES)")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", f.envDuration(env, "WARREN_BODY_TIMEOUT", server.DefaultBodyTimeout),
		"a request body that delivers no byte for this long is cut (env WARREN_BODY_TIMEOUT)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", f.envDuration(env, "WARREN_IDLE_TIMEOUT", server.DefaultIdleTimeout),
		"how long a keep-alive connection may wait for its next request (env WARREN_IDLE_TIMEOUT)")
	f.retention = retentionFlag(f.envRetention(env))
	fs.Var(&f.retention, "retention",
		"how long a closed job is kept, with its tasks, results and idempotency key, unless it gives its own retention: "+
			"a duration (like 168h, or 30d in days), or forever (env WARREN_RETENTION)")
	fs.IntVar(&f.aggBatch, "aggregator-batch", server.DefaultAggregatorBatchSize, "results recorded per store transaction")
	fs.DurationVar(&f.aggLinger, "aggregator-linger", server.DefaultAggregatorLinger, "how long a result batch waits to fill, once more than one result is waiting (a lone result is recorded at once)")
	fs.IntVar(&f.relayBatch, "relay-batch", server.DefaultRelayBatchSize, "tasks published per outbox round trip")
	fs.Int64Var(&f.relayWindow, "relay-window", f.envInt64(env, "WARREN_RELAY_WINDOW", server.DefaultRelayWindow),
		"task messages kept ready in the work queue at most, shared between open jobs by priority; the backlog waits in the store; -1: no window (env WARREN_RELAY_WINDOW)")
	fs.Int64Var(&f.maxMessage, "max-message-bytes", f.envInt64(env, "WARREN_MAX_MESSAGE_BYTES", server.DefaultMaxMessageBytes),
		"largest message body published or read: task batches are cut short to stay under it, larger results are dead-lettered unread; "+
			"keep it equal to the workers' and at or below RabbitMQ's max_message_size (env WARREN_MAX_MESSAGE_BYTES)")
	fs.Int64Var(&f.maxInflight, "max-inflight-bytes", f.envInt64(env, "WARREN_MAX_INFLIGHT_BYTES", server.DefaultMaxInflightBytes),
		"message bytes the server holds at once: bounds the aggregator's prefetch and the relay's claim (env WARREN_MAX_INFLIGHT_BYTES)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM, how long requests in progress may take to finish")
	fs.IntVar(&f.replicas, "quorum-replicas", int(f.envInt64(env, "WARREN_QUORUM_REPLICAS", 0)), quorumReplicasUsage)
	fs.BoolVar(&f.webhookAllowPrivate, "webhook-allow-private", f.envBool(env, "WARREN_WEBHOOK_ALLOW_PRIVATE"),
		"let job webhooks go to loopback, private, link-local and other non-public addresses, refused by default (env WARREN_WEBHOOK_ALLOW_PRIVATE=1)")
}

// config maps the flags onto a server configuration; its errors name the
// flag.
func (f *serverFlags) config(env *environment) (server.Config, error) {
	if f.envErr != nil {
		return server.Config{}, f.envErr
	}
	tiers, err := f.tiers()
	if err != nil {
		return server.Config{}, err
	}
	if err := checkAMQPURL(f.amqpURL); err != nil {
		return server.Config{}, err
	}
	switch {
	case f.replicas < 0:
		return server.Config{}, fmt.Errorf("--quorum-replicas must be >= 0, got %d", f.replicas)
	case f.aggBatch < 1 || f.relayBatch < 1 || f.aggLinger < 0:
		return server.Config{}, fmt.Errorf("--aggregator-batch and --relay-batch must be >= 1 and --aggregator-linger >= 0")
	case f.shutdown <= 0:
		return server.Config{}, fmt.Errorf("--shutdown-timeout must be > 0, got %s", f.shutdown)
	case f.maxBody < 1:
		return server.Config{}, fmt.Errorf("--max-body must be >= 1, got %d", f.maxBody)
	case f.maxMessage < 1 || f.maxMessage > math.MaxInt32:
		return server.Config{}, fmt.Errorf("--max-message-bytes must be between 1 and %d, got %d", math.MaxInt32, f.maxMessage)
	case f.relayWindow < -1 || f.relayWindow == 0 || f.relayWindow > math.MaxInt32:
		return server.Config{}, fmt.Errorf("--relay-window must be -1 (no window) or between 1 and %d, got %d", math.MaxInt32, f.relayWindow)
	case f.maxInflight < 1:
		return server.Config{}, fmt.Errorf("--max-inflight-bytes must be >= 1, got %d", f.maxInflight)
	case f.maxResult < 1:
		return server.Config{}, fmt.Errorf("--max-result-bytes must be >= 1, got %d", f.maxResult)
	case f.maxTask < 1:
		return server.Config{}, fmt.Errorf("--max-task-bytes must be >= 1, got %d", f.maxTask)
	case f.bodyTimeout <= 0 || f.idleTimeout <= 0:
		return server.Config{}, fmt.Errorf("--body-timeout and --idle-timeout must be > 0")
	}
	tokens, err := server.ParseTokens(f.tokens)
	if err != nil {
		return server.Config{}, fmt.Errorf("WARREN_API_TOKENS: %w", err)
	}
	return server.Config{
		AMQPURL: f.amqpURL, DatabaseURL: f.databaseURL, Prefix: f.prefix, RetryTiers: tiers, QuorumReplicas: f.replicas,
		Listen: f.listen, Tokens: tokens, MaxBodyBytes: f.maxBody, ShutdownTimeout: f.shutdown,
		MaxTaskBytes: f.maxTask, MaxResultBytes: int(f.maxResult), BodyTimeout: f.bodyTimeout, IdleTimeout: f.idleTimeout,
		RelayBatchSize: f.relayBatch, MaxMessageBytes: int(f.maxMessage), MaxInflightBytes: f.maxInflight, RelayWindow: int(f.relayWindow), AggregatorBatchSize: f.aggBatch, AggregatorLinger: f.aggLinger,
		Retention:           time.Duration(f.retention),
		WebhookAllowPrivate: f.webhookAllowPrivate,
		Logger:              env.logger,
	}, nil
}

// envInt64 returns the integer in the environment variable name, or def
// when it is not set; a value that does not parse is remembered in
// f.envErr.
func (f *common) envInt64(env *environment, name string, def int64) int64 {
	v := env.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil && f.envErr == nil {
		f.envErr = fmt.Errorf("%s: %q is not a whole number", name, v)
	}
	return n
}

// envBool returns the boolean in the environment variable name (1, true,
// 0, false, ...), or false when it is not set; a value that does not
// parse is remembered in f.envErr.
func (f *common) envBool(env *environment, name string) bool {
	v := env.getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil && f.envErr == nil {
		f.envErr = fmt.Errorf("%s: %q is not a boolean (1 or 0, true or false)", name, v)
	}
	return b
}

// envDuration returns the duration in the environment variable name, or
// def when it is not set; a value that does not parse is remembered in
// f.envErr.
func (f *common) envDuration(env *environment, name string, def time.Duration) time.Duration {
	v := env.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil && f.envErr == nil {
		f.envErr = fmt.Errorf("%s: %q is not a duration (like 30s, 2m)", name, v)
	}
	return d
}

// retentionFlag is --retention: a duration over 0, or keepForever.
type retentionFlag time.Duration

// keepForever is the server.Config.Retention of --retention forever.
const keepForever = -1

func (r *retentionFlag) String() string {
	if *r < 0 {
		return "forever"
	}
	return time.Duration(*r).String()
}

func (r *retentionFlag) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*r = retentionFlag(d)
	return nil
}

// parseRetention reads a retention as --retention and WARREN_RETENTION
// take it: a Go duration of at least a second (168h), a whole number of
// days (30d), or "forever" (keepForever).
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "forever") {
		return keepForever, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseInt(days, 10, 32); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= time.Second {
		return d, nil
	}
	return 0, fmt.Errorf("%q is not a retention: a duration of at least 1s (like 168h or 30d) or forever", s)
}

// envRetention returns the retention in WARREN_RETENTION, or
// server.DefaultRetention when it is not set; a value that does not parse
// is remembered in f.envErr.
func (f *common) envRetention(env *environment) time.Duration {
	v := env.getenv("WARREN_RETENTION")
	if v == "" {
		return server.DefaultRetention
	}
	d, err := parseRetention(v)
	if err != nil && f.envErr == nil {
		f.envErr = fmt.Errorf("WARREN_RETENTION: %v", err)
	}
	return d
}

func runServer(ctx context.Context, args []string, env *environment) error {
	var f serverFlags
	fs := newFlagSet("server", "Run the HTTP API, the outbox relay (publishes submitted tasks) and the aggregator (records results, closes jobs).", env)
	f.register(fs, env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	cfg, err := f.config(env)
	if err != nil {
		return err
	}
	tp, flush, err := startTracing(ctx, env, "warren-server")
	if err != nil {
		return err
	}
	defer flush()
	cfg.TracerProvider = tp
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	env.logger.Info("warren server running", "api", s.URL(), "dashboard", s.URL()+"/ui/", "amqp", broker.Redact(f.amqpURL),
		"database", redactDB(f.databaseURL), "prefix", f.prefix, "auth", len(cfg.Tokens) > 0)
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-s.Done():
	}
	err = s.Stop()
	env.logger.Info("warren server stopped", "uptime", time.Since(start).Round(time.Second))
	return err
}
