package main

import (
	"context"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/envconfig"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
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
	relayWindow int
	maxMessage  int
	maxInflight int64
	shutdown    time.Duration
	replicas    int

	maxTask      int64
	maxMetadata  int64
	maxJobTasks  int64
	keepAttempts int
	maxResult    int
	bodyTimeout  time.Duration
	idleTimeout  time.Duration
	retention    retentionFlag
	queueIdle    time.Duration

	webhookAllowPrivate bool
	allowedHosts        string
	tlsCert, tlsKey     string
}

func (f *serverFlags) register(fs *flagSet, env *environment) {
	f.common.register(fs, env)
	fs.StringVar(&f.listen, "listen", server.DefaultListen, "HTTP API address")
	fs.StringVar(&f.tokens, "api-tokens", "", "API tokens: token:scope[+scope],... with scopes read, write, admin; without tokens the API only listens on loopback")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with the PEM certificate (chain) in `FILE`; needs --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the PEM private key `FILE` of --tls-cert")
	fs.secretFlags("api-tokens")
	fs.Int64Var(&f.maxBody, "max-body", server.DefaultMaxBodyBytes, "largest accepted request body in bytes")
	fs.Int64Var(&f.maxTask, "max-task-bytes", server.DefaultMaxTaskBytes,
		"largest accepted task payload in bytes; a submission with a larger one is refused")
	fs.Int64Var(&f.maxMetadata, "max-metadata-bytes", server.DefaultMaxMetadataBytes,
		"largest accepted job metadata in bytes; a submission with larger metadata is refused")
	fs.Int64Var(&f.maxJobTasks, "max-job-tasks", server.DefaultMaxJobTasks,
		"most tasks a job may have, spawned ones included; a larger submission is refused, a spawn past it fails its task")
	fs.IntVar(&f.keepAttempts, "keep-attempts", store.DefaultKeepAttempts,
		"attempts kept per task for GET /v1/jobs/{id}/tasks/{task_id}: the last ones")
	fs.IntVar(&f.maxResult, "max-result-bytes", server.DefaultMaxResultBytes,
		"largest reduced result a job may have in bytes; a job whose reduce gives more fails")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", server.DefaultBodyTimeout,
		"a request body that delivers no byte for this long is cut")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout,
		"how long a keep-alive connection may wait for its next request")
	f.retention = retentionFlag(server.DefaultRetention)
	fs.Var(&f.retention, "retention",
		"how long a closed job is kept, with its tasks, results and idempotency key, unless it gives its own retention: "+
			"a duration (like 168h, or 30d in days), or forever")
	fs.DurationVar(&f.queueIdle, "queue-idle-delete", server.DefaultQueueIdleDelete,
		"delete a work queue per type (a job's queue) and its retry tiers once it had no open job, no message and no consumer for this long; 0: never")
	fs.IntVar(&f.aggBatch, "aggregator-batch", server.DefaultAggregatorBatchSize, "results recorded per store transaction")
	fs.DurationVar(&f.aggLinger, "aggregator-linger", server.DefaultAggregatorLinger, "how long a result batch waits to fill, once more than one result is waiting (a lone result is recorded at once)")
	fs.IntVar(&f.relayBatch, "relay-batch", server.DefaultRelayBatchSize, "tasks published per outbox round trip")
	fs.IntVar(&f.relayWindow, "relay-window", server.DefaultRelayWindow,
		"task messages kept ready in the work queue at most, shared between open jobs by priority; the backlog waits in the store; -1: no window")
	fs.IntVar(&f.maxMessage, "max-message-bytes", server.DefaultMaxMessageBytes,
		"largest message body published or read: task batches are cut short to stay under it, larger results are dead-lettered unread; "+
			"keep it equal to the workers' and at or below RabbitMQ's max_message_size")
	fs.Int64Var(&f.maxInflight, "max-inflight-bytes", server.DefaultMaxInflightBytes,
		"message bytes the server holds at once: bounds the aggregator's prefetch and the relay's claim")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM, how long requests in progress may take to finish")
	fs.IntVar(&f.replicas, "quorum-replicas", 0, quorumReplicasUsage)
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "",
		"without API tokens, the host names besides localhost, IP addresses and --listen's the API answers to, comma-separated (a proxy's, the machine's)")
	fs.BoolVar(&f.webhookAllowPrivate, "webhook-allow-private", false,
		"let job webhooks go to loopback, private, link-local and other non-public addresses, refused by default")
}

// config maps the flags onto a server configuration through the server
// package's own mapping (server.ConfigFromLookup, which ConfigFromEnv
// uses too); its errors name the flag or variable each value came from.
// It checks no range: server.New does (see newServer).
func (f *serverFlags) config(env *environment) (server.Config, error) {
	flags := map[string]string{}
	for _, v := range server.EnvVars() {
		flags[v.Name] = v.Flag
	}
	cfg, err := server.ConfigFromLookup(f.fs.settings(flags))
	if err != nil {
		return server.Config{}, f.fs.settingError(err)
	}
	cfg.Logger = env.logger
	return cfg, nil
}

// serverFields names the flag of each server.Config field that has one,
// for configError.
var serverFields = map[string]string{
	"AMQPURL": "amqp-url", "DatabaseURL": "database", "Prefix": "prefix", "RetryTiers": "retry-tiers",
	"QuorumReplicas": "quorum-replicas", "Listen": "listen", "Tokens": "api-tokens",
	"TLSCertFile": "tls-cert", "TLSKeyFile": "tls-key", "MaxBodyBytes": "max-body", "ShutdownTimeout": "shutdown-timeout",
	"MaxTaskBytes": "max-task-bytes", "MaxMetadataBytes": "max-metadata-bytes", "MaxJobTasks": "max-job-tasks", "KeepAttempts": "keep-attempts", "MaxResultBytes": "max-result-bytes", "BodyTimeout": "body-timeout",
	"IdleTimeout": "idle-timeout", "RelayBatchSize": "relay-batch", "MaxMessageBytes": "max-message-bytes",
	"MaxInflightBytes": "max-inflight-bytes", "RelayWindow": "relay-window", "AggregatorBatchSize": "aggregator-batch",
	"AggregatorLinger": "aggregator-linger", "Retention": "retention", "WebhookAllowPrivate": "webhook-allow-private",
	"AllowedHosts": "allowed-hosts", "QueueIdleDelete": "queue-idle-delete",
}

// newServer returns the server cfg configures: server.New checks every
// value, and its error names the flag or variable the wrong one came
// from.
func (f *serverFlags) newServer(cfg server.Config) (*server.Server, error) {
	s, err := server.New(cfg)
	if err != nil {
		return nil, f.fs.configError(err, serverFields)
	}
	return s, nil
}

// retentionFlag is --retention: a duration over 0, or envconfig.KeepForever.
type retentionFlag time.Duration

func (r *retentionFlag) String() string {
	if *r < 0 { // envconfig.KeepForever
		return "forever"
	}
	return time.Duration(*r).String()
}

func (r *retentionFlag) Set(s string) error {
	d, err := envconfig.ParseRetention(s)
	if err != nil {
		return err
	}
	*r = retentionFlag(d)
	return nil
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
	if err := checkDatabaseURL(f.fs, f.databaseURL); err != nil {
		return err
	}
	tp, flush, err := startTracing(ctx, env, "warren-server")
	if err != nil {
		return err
	}
	defer flush()
	cfg.TracerProvider = tp
	s, err := f.newServer(cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	env.logger.Info("warren server running", "api", s.URL(), "dashboard", s.URL()+"/ui/", "amqp", broker.Redact(f.amqpURL),
		"database", redactDB(f.databaseURL), "prefix", f.prefix, "auth", len(cfg.Tokens) > 0, "tls", cfg.TLSCertFile != "")
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-s.Done():
	}
	err = s.Stop()
	env.logger.Info("warren server stopped", "uptime", time.Since(start).Round(time.Second))
	return err
}
