package server

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/reconciler"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/internal/retention"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/open"
)

// Defaults for Config.
const (
	// DefaultListen is the API's address when Config.Listen is empty.
	DefaultListen = "127.0.0.1:8080"
	// DefaultShutdownTimeout bounds how long requests in progress may take
	// to finish once the server stops.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultAMQPURL is the broker when Config.AMQPURL is empty.
	DefaultAMQPURL = broker.DefaultURL
	// DefaultDatabaseURL is the job store when Config has neither Store nor
	// DatabaseURL.
	DefaultDatabaseURL = open.DefaultURL
	// DefaultMaxBodyBytes is the largest request body the API accepts
	// when Config.MaxBodyBytes is 0.
	DefaultMaxBodyBytes = api.DefaultMaxBodyBytes
	// DefaultMaxResultBytes is the largest reduced result a job may have
	// when Config.MaxResultBytes is 0: 64 MiB.
	DefaultMaxResultBytes = aggregator.DefaultMaxResultBytes
	// DefaultMaxMetadataBytes is the largest job metadata the API
	// accepts when Config.MaxMetadataBytes is 0: 64 KiB.
	DefaultMaxMetadataBytes = api.DefaultMaxMetadataBytes
	// DefaultMaxTaskBytes is the largest task payload the API accepts
	// when Config.MaxTaskBytes is 0: 1 MiB.
	DefaultMaxTaskBytes = api.DefaultMaxTaskBytes
	// DefaultMaxJobTasks is Config.MaxJobTasks's default: 10,000,000
	// tasks per job.
	DefaultMaxJobTasks = 10_000_000
	// DefaultBodyTimeout is Config.BodyTimeout's default: 30 s.
	DefaultBodyTimeout = api.DefaultBodyTimeout
	// DefaultIdleTimeout is Config.IdleTimeout's default: 1 min.
	DefaultIdleTimeout = time.Minute
	// DefaultRelayBatchSize is Config.RelayBatchSize's default.
	DefaultRelayBatchSize = relay.DefaultBatchSize
	// DefaultMaxMessageBytes is Config.MaxMessageBytes's default: 4 MiB
	// (protocol.DefaultMaxMessageBytes).
	DefaultMaxMessageBytes = protocol.DefaultMaxMessageBytes
	// DefaultMaxInflightBytes is Config.MaxInflightBytes's default:
	// 512 MiB.
	DefaultMaxInflightBytes = aggregator.DefaultMaxInflightBytes
	// DefaultQueueIdleDelete is Config.QueueIdleDelete's default.
	DefaultQueueIdleDelete = time.Hour
	// DefaultRelayWindow is Config.RelayWindow's default, in messages.
	DefaultRelayWindow = relay.DefaultWindow
	// DefaultAggregatorBatchSize is Config.AggregatorBatchSize's default.
	DefaultAggregatorBatchSize = aggregator.DefaultBatchSize
	// DefaultAggregatorLinger is Config.AggregatorLinger's default.
	DefaultAggregatorLinger = aggregator.DefaultLinger
	// DefaultReconcileGrace is Config.ReconcileGrace's default: 1 min.
	DefaultReconcileGrace = reconciler.DefaultGrace
	// DefaultRetention is Config.Retention's default: 7 days
	// (warren.DefaultRetention).
	DefaultRetention = warren.DefaultRetention
	// DefaultRetentionInterval is Config.RetentionInterval's default:
	// 1 min.
	DefaultRetentionInterval = retention.DefaultInterval
)

// Config configures a Server. The zero value runs a server on the local
// RabbitMQ, the SQLite file ./warren.db and 127.0.0.1:8080.
type Config struct {
	// AMQPURL is the RabbitMQ URL, or the URLs of the nodes of one
	// cluster separated by commas; "" means DefaultAMQPURL. Every URL is
	// checked by New. The server starts at a node picked at random and,
	// when it loses its connection, reconnects to another node at once,
	// trying the lost one last (see docs/operations.md, "RabbitMQ
	// cluster").
	AMQPURL string
	// Store is the job store to use. The server does not close a store it
	// was given. nil means the store DatabaseURL names.
	Store store.Store
	// DatabaseURL names the job store the server opens (and closes):
	// sqlite://PATH or postgres://...; "" means DefaultDatabaseURL. It is
	// ignored when Store is set.
	DatabaseURL string
	// Prefix is prepended to every exchange and queue name, so that
	// several installations share one broker.
	Prefix string
	// RetryTiers are the delays of the retry tiers, positive whole
	// milliseconds in increasing order; nil means
	// protocol.DefaultRetryTiers. Servers and workers must agree. The API
	// refuses a job whose task_timeout does not outlast the delays its
	// retries may wait in them.
	RetryTiers []time.Duration
	// DeliveryLimit is the quorum queues' x-delivery-limit: how many
	// times a message is delivered without an ack before the broker
	// dead-letters it; 0 means the default (20). Servers and workers must
	// agree.
	DeliveryLimit int
	// QueueIdleDelete is how long a work queue other than the default
	// one (warren.Policy.Queue) must go without an open job, a message
	// and a consumer before the server deletes it and its retry tiers; 0
	// means DefaultQueueIdleDelete, and below 0 never deletes one. The
	// server knows the queues its jobs named since it started
	// (docs/operations.md, "Queues per type").
	QueueIdleDelete time.Duration
	// QueueSweepInterval is how often the server looks at the work
	// queues, to delete idle ones and to tell which have no consumer (a
	// job's "waiting"); 0 means queuereaper.DefaultInterval.
	QueueSweepInterval time.Duration
	// QuorumReplicas is x-quorum-initial-group-size of every quorum
	// queue the server declares: on how many nodes a queue gets a replica
	// when it is created. 0 leaves it to RabbitMQ (its
	// quorum_cluster_size, 3 unless configured). Servers and workers must
	// agree: RabbitMQ refuses to declare a queue again with another value.
	QuorumReplicas int

	// Listen is the API's address; "" means DefaultListen. A port of 0
	// picks a free port (see Server.URL).
	Listen string
	// Tokens are the API's bearer tokens (ParseTokens reads them from the
	// WARREN_API_TOKENS form). Without tokens the API has no
	// authentication, so the server refuses to listen on anything but a
	// loopback address.
	Tokens []Token
	// TLSCertFile and TLSKeyFile, both set, make the API serve HTTPS
	// (TLS 1.2 at least) with the PEM certificate (chain) and private key
	// in these files, read once at Start. Both empty serve plain HTTP;
	// one without the other is an error. Without Tokens the loopback rule
	// holds with TLS too.
	TLSCertFile, TLSKeyFile string
	// MaxBodyBytes is the largest request body accepted; 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxTaskBytes is the largest task payload a submission may hold, in
	// bytes as submitted; a larger one is refused with 413 naming the
	// task, and nothing is written. 0 means DefaultMaxTaskBytes. A task
	// message carries its payload whole, and RabbitMQ refuses messages
	// over its max_message_size (16 MiB by default on RabbitMQ 4), with
	// batch_size payloads in one message.
	MaxTaskBytes int64
	// MaxMetadataBytes is the largest metadata a submission may give a
	// job, in bytes as submitted; a larger one is refused with 413, and
	// nothing is written. Metadata is shown with the job wherever it is
	// read (a listing leaves out metadata over 1 KiB). 0 means
	// DefaultMaxMetadataBytes.
	MaxMetadataBytes int64
	// MaxResultBytes is the largest reduced result a job may have: a job
	// whose reduce gives more fails with an error that says so, instead
	// of storing it. 0 means DefaultMaxResultBytes.
	MaxResultBytes int
	// MaxJobTasks is the most tasks a job may have, the tasks its tasks
	// spawn included: a submission with more is refused with 413, and a
	// task whose spawn would take its job over it fails, with an error
	// that says so, and spawns nothing. 0 means DefaultMaxJobTasks.
	MaxJobTasks int64
	// KeepAttempts is how many attempts of each task the store keeps for
	// GET /v1/jobs/{id}/tasks/{task_id} (the last ones: older rows are
	// deleted as new ones come). 0 means store.DefaultKeepAttempts.
	KeepAttempts int
	// BodyTimeout is the longest a request body may go without a byte
	// arriving: a stalled upload is then cut with 408. A submission's
	// tasks are read whole before the store is called, so a stalled
	// upload never holds a store connection; this bounds how long it
	// holds its own. 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request before the server closes it; 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds how long requests in progress may take to
	// finish when the server stops; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// RelayBatchSize is how many tasks the relay claims and publishes per
	// store round trip, at most; 0 means DefaultRelayBatchSize. A round
	// also stops claiming once its payloads reach half of
	// MaxInflightBytes.
	RelayBatchSize int
	// MaxMessageBytes bounds every message body the server publishes or
	// reads: the relay cuts a job's batches short to stay under it, and
	// the aggregator does not read a larger result or dead letter (it goes
	// to the results dead-letter queue, failing the task its id names).
	// MaxTaskBytes must fit in it with protocol.EnvelopeBytes to spare.
	// Keep it equal to the workers' MaxMessageBytes and at or below the
	// broker's max_message_size (RabbitMQ 4: 16 MiB by default; 3.x:
	// 128 MiB); setting max_message_size to it makes the bound hard for
	// every publisher. 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxInflightBytes bounds the message bytes the server holds at once:
	// the aggregator's prefetch is cut to what fits in it in messages of
	// MaxMessageBytes (three quarters for results, a quarter for dead
	// letters), and a relay round stops claiming tasks once their
	// payloads reach half of it. 0 means DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// RelayWindow is how many task messages the relay keeps ready in the
	// work queue at most, ahead of the workers: the rest of the backlog
	// stays in the store, and each round of the relay shares the room
	// between the open jobs in proportion to their priorities
	// (warren.Policy.Priority), so a small job never waits behind a big
	// one's whole backlog. 0 means DefaultRelayWindow; -1 turns the window
	// off: every pending task is published as fast as the broker takes it,
	// still shared between the jobs round by round.
	RelayWindow int
	// RelayPollInterval is how long an idle relay waits before looking at
	// the outbox again when nothing woke it; 0 means the relay's default.
	RelayPollInterval time.Duration
	// EventsPollInterval is how often each job an event stream follows
	// is read from the store, to see changes this server did not make
	// (0 means 250 ms). The jobs this server closes or cancels are pushed
	// to their streams at once, and on PostgreSQL so are those any server
	// closes (LISTEN and NOTIFY): the poll is for progress, and for a
	// notice missed while the listening connection was lost.
	EventsPollInterval time.Duration
	// AggregatorBatchSize is how many result messages are recorded per
	// store transaction; 0 means DefaultAggregatorBatchSize.
	AggregatorBatchSize int
	// AggregatorLinger is how long a result batch waits to fill once more
	// than one result is waiting; 0 means DefaultAggregatorLinger.
	AggregatorLinger time.Duration
	// CloseScanInterval is how often the server looks for jobs ready to
	// close that were not closed (after a crash); 0 means the
	// aggregator's default.
	CloseScanInterval time.Duration
	// ReconcileInterval is the time between the reconciler's passes over
	// tasks stuck past their task timeout; 0 means the reconciler's
	// default (30 s).
	ReconcileInterval time.Duration
	// ReconcileGrace is added to every job's task timeout before the
	// reconciler takes a task for lost: time for a result to be
	// published and recorded after its run's deadline. 0 means
	// DefaultReconcileGrace.
	ReconcileGrace time.Duration

	// Retention is how long a closed job that gives no retention of its
	// own (a submission's "retention", warren.Policy.Retention) is kept
	// after it closed; then the server deletes it with its tasks, its
	// reduced result and its idempotency key (docs/operations.md,
	// "Retention"). 0 means DefaultRetention; otherwise at least a
	// second. A negative value keeps such jobs forever; a job's own
	// retention still applies.
	Retention time.Duration
	// RetentionInterval is the time between the sweeps that delete the
	// jobs past their retention; 0 means DefaultRetentionInterval.
	RetentionInterval time.Duration

	// AllowedHosts are host names the API answers to, besides localhost
	// and IP addresses and Listen's own host name, when it has no Tokens:
	// without tokens, a request whose Host header names another gets 421
	// (so that a page whose name its attacker points at the server, DNS
	// rebinding, reads nothing), and a state-changing request a browser
	// sends from another origin gets 403 (docs/operations.md, "A server
	// without tokens"). Name here what a proxy on the same host, or a
	// name of the machine, reaches the server by.
	AllowedHosts []string

	// WebhookAllowPrivate lets jobs' webhooks go to loopback, private
	// (RFC 1918, fc00::/7), link-local, shared (100.64.0.0/10) and other
	// non-public addresses. By default a submission whose webhook URL is,
	// or resolves to, one is refused with 400, and every delivery's dial
	// to one is refused (a name may resolve otherwise later). Set it when
	// the receivers are on the server's own network.
	WebhookAllowPrivate bool

	// Reducers are custom reducers, by name, for jobs to name in their
	// "reduce" field next to the built-ins (reduce.NewRegistry); a name
	// may not repeat a built-in's. The API refuses a job whose reducer no
	// server knows at submission.
	Reducers map[string]reduce.Factory

	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks observe the server (metrics, tests, benchmarks).
	Hooks Hooks
	// TracerProvider makes the server's OpenTelemetry spans: a
	// submission's (POST /v1/jobs, warren.job.create), the relay's
	// (warren.relay.publish) and the aggregator's (warren.aggregate,
	// warren.job.close), each in the trace of the job's submission, whose
	// W3C trace context the job keeps and its messages carry
	// (docs/operations.md, "Tracing"). nil means otel.GetTracerProvider(),
	// which makes no-op spans unless the program installed an SDK.
	TracerProvider trace.TracerProvider
}

// Hooks observe a running server. Every field is optional; each is called
// on the goroutine of the component that reports, so it must not block.
type Hooks struct {
	// OnPublished is called after the relay marked n tasks queued (their
	// publishing confirmed by the broker).
	OnPublished func(n int)
	// OnBatch is called after the aggregator committed and acknowledged a
	// batch of size result and dead-letter messages.
	OnBatch func(size int, report store.ApplyReport)
	// OnJobClosed is called after this server closed a job.
	OnJobClosed func(jobID string, state warren.JobState)
	// OnFollowUp is called after this server closed a job that started
	// its follow-up (warren.Job.NextJob), with the follow-up's id.
	OnFollowUp func(jobID, nextID string)
	// OnInvalid is called for each message the aggregator dead-lettered
	// because it can never be applied.
	OnInvalid func(queue, reason string)
	// OnReconciled is called after each reconciler pass that ran to its
	// end, with the tasks it republished and failed as lost (usually
	// none).
	OnReconciled func(report store.ReconcileReport)
	// OnRetentionSweep is called after each retention sweep that ran to
	// its end, with how many jobs past their retention it deleted and
	// how many task rows of deleted jobs it purged (usually none).
	OnRetentionSweep func(jobsDeleted, tasksPurged int)
	// OnWorkerHeartbeat is called after the server recorded a worker's
	// heartbeat (GET /v1/workers), with the worker's id and its state
	// (protocol.HeartbeatRunning, or protocol.HeartbeatStopping for its
	// goodbye).
	OnWorkerHeartbeat func(workerID, state string)
	// OnWebhookAttempt is called after each webhook delivery attempt of
	// this server was recorded in the store, with the delivery's job and
	// how the attempt ended.
	OnWebhookAttempt func(jobID string, attempt store.DeliveryAttempt)
	// OnQueueDeleted is called after this server deleted an idle work
	// queue (Config.QueueIdleDelete), with its name (warren.Policy.Queue).
	OnQueueDeleted func(queue string)
}

func (c Config) withDefaults() Config {
	if c.AMQPURL == "" {
		c.AMQPURL = DefaultAMQPURL
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultDatabaseURL
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxTaskBytes == 0 {
		c.MaxTaskBytes = DefaultMaxTaskBytes
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if c.MaxJobTasks == 0 {
		c.MaxJobTasks = DefaultMaxJobTasks
	}
	if c.KeepAttempts == 0 {
		c.KeepAttempts = store.DefaultKeepAttempts
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.RelayBatchSize == 0 {
		c.RelayBatchSize = DefaultRelayBatchSize
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.AggregatorBatchSize == 0 {
		c.AggregatorBatchSize = DefaultAggregatorBatchSize
	}
	if c.AggregatorLinger == 0 {
		c.AggregatorLinger = DefaultAggregatorLinger
	}
	if c.CloseScanInterval == 0 {
		c.CloseScanInterval = aggregator.DefaultScanInterval
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = reconciler.DefaultInterval
	}
	if c.ReconcileGrace == 0 {
		c.ReconcileGrace = DefaultReconcileGrace
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.QueueIdleDelete == 0 {
		c.QueueIdleDelete = DefaultQueueIdleDelete
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ConfigError is the error New returns for a Config field that is out of
// range or does not agree with another field. A program that fills Config
// from its own flags can find the field with errors.As and name the flag
// instead, as the warren command does.
type ConfigError struct {
	// Field is the name of the field that is wrong, such as
	// "RelayWindow".
	Field string
	// Message says what is wrong and how to fix it. It writes every field
	// it names, Field and any other, as "Config.Name", so that a program
	// can put its own names for them in their place.
	Message string
}

func (e *ConfigError) Error() string { return "server: " + e.Message }

// fieldError returns the ConfigError of field; format names it, and any
// other field, as Config.Name.
func fieldError(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// validate names the first field that is wrong and how to fix it, in a
// *ConfigError. It is the only check of the fields' ranges: the warren
// command leaves them to it and names its flags in its errors.
func (c Config) validate() error {
	switch {
	case c.MaxBodyBytes < 1:
		return fieldError("MaxBodyBytes", "Config.MaxBodyBytes must be >= 1, got %d", c.MaxBodyBytes)
	case c.MaxResultBytes < 0:
		return fieldError("MaxResultBytes", "Config.MaxResultBytes must be >= 0, got %d", c.MaxResultBytes)
	case c.MaxTaskBytes < 1:
		return fieldError("MaxTaskBytes", "Config.MaxTaskBytes must be >= 1, got %d", c.MaxTaskBytes)
	case c.MaxMetadataBytes < 1:
		return fieldError("MaxMetadataBytes", "Config.MaxMetadataBytes must be >= 1, got %d", c.MaxMetadataBytes)
	case c.MaxJobTasks < 1:
		return fieldError("MaxJobTasks", "Config.MaxJobTasks must be >= 1, got %d", c.MaxJobTasks)
	case c.KeepAttempts < 1:
		return fieldError("KeepAttempts", "Config.KeepAttempts must be >= 1, got %d", c.KeepAttempts)
	case c.BodyTimeout < 0:
		return fieldError("BodyTimeout", "Config.BodyTimeout must be > 0, got %s", c.BodyTimeout)
	case c.IdleTimeout < 0:
		return fieldError("IdleTimeout", "Config.IdleTimeout must be > 0, got %s", c.IdleTimeout)
	case c.ShutdownTimeout < 0:
		return fieldError("ShutdownTimeout", "Config.ShutdownTimeout must be > 0, got %s", c.ShutdownTimeout)
	case c.DeliveryLimit < 0:
		return fieldError("DeliveryLimit", "Config.DeliveryLimit must be >= 0, got %d", c.DeliveryLimit)
	case c.QueueSweepInterval < 0:
		return fieldError("QueueSweepInterval", "Config.QueueSweepInterval must be >= 0, got %s", c.QueueSweepInterval)
	case c.QuorumReplicas < 0:
		return fieldError("QuorumReplicas", "Config.QuorumReplicas must be >= 0, got %d", c.QuorumReplicas)
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return fieldError("TLSCertFile", "Config.TLSCertFile is set but not Config.TLSKeyFile: HTTPS needs both, or neither")
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		return fieldError("TLSKeyFile", "Config.TLSKeyFile is set but not Config.TLSCertFile: HTTPS needs both, or neither")
	case c.RelayBatchSize < 1:
		return fieldError("RelayBatchSize", "Config.RelayBatchSize must be >= 1, got %d", c.RelayBatchSize)
	case c.MaxMessageBytes <= protocol.EnvelopeBytes:
		return fieldError("MaxMessageBytes", "Config.MaxMessageBytes must be more than %d, got %d", protocol.EnvelopeBytes, c.MaxMessageBytes)
	case c.MaxTaskBytes > int64(c.MaxMessageBytes-protocol.EnvelopeBytes):
		return fieldError("MaxTaskBytes", "Config.MaxTaskBytes (%d) must fit in a message: at most Config.MaxMessageBytes (%d) less %d",
			c.MaxTaskBytes, c.MaxMessageBytes, protocol.EnvelopeBytes)
	case c.MaxInflightBytes < 2*int64(c.MaxMessageBytes):
		return fieldError("MaxInflightBytes", "Config.MaxInflightBytes (%d) must hold at least two messages of Config.MaxMessageBytes (%d)",
			c.MaxInflightBytes, c.MaxMessageBytes)
	case c.AggregatorBatchSize < 1:
		return fieldError("AggregatorBatchSize", "Config.AggregatorBatchSize must be >= 1, got %d", c.AggregatorBatchSize)
	case c.AggregatorLinger < 0:
		return fieldError("AggregatorLinger", "Config.AggregatorLinger must be >= 0, got %s", c.AggregatorLinger)
	case c.RelayWindow < -1:
		return fieldError("RelayWindow", "Config.RelayWindow must be >= -1 (-1: no window), got %d", c.RelayWindow)
	case c.RelayPollInterval < 0:
		return fieldError("RelayPollInterval", "Config.RelayPollInterval must be >= 0, got %s", c.RelayPollInterval)
	case c.EventsPollInterval < 0:
		return fieldError("EventsPollInterval", "Config.EventsPollInterval must be >= 0, got %s", c.EventsPollInterval)
	case c.CloseScanInterval < 0:
		return fieldError("CloseScanInterval", "Config.CloseScanInterval must be >= 0, got %s", c.CloseScanInterval)
	case c.ReconcileInterval < 0:
		return fieldError("ReconcileInterval", "Config.ReconcileInterval must be >= 0, got %s", c.ReconcileInterval)
	case c.ReconcileGrace < 0:
		return fieldError("ReconcileGrace", "Config.ReconcileGrace must be >= 0, got %s", c.ReconcileGrace)
	case c.Retention > 0 && c.Retention < time.Second:
		return fieldError("Retention", "Config.Retention must be at least 1s (or negative, to keep jobs forever), got %s", c.Retention)
	case c.RetentionInterval < 0:
		return fieldError("RetentionInterval", "Config.RetentionInterval must be >= 0, got %s", c.RetentionInterval)
	}
	if _, err := broker.ParseNodes(c.AMQPURL); err != nil {
		return fieldError("AMQPURL", "Config.AMQPURL: %v", err)
	}
	if len(c.RetryTiers) > 0 {
		if err := broker.CheckRetryTiers(c.RetryTiers); err != nil {
			return fieldError("RetryTiers", "Config.RetryTiers: %v", err)
		}
		if err := broker.CheckRetryTierOrder(c.RetryTiers); err != nil {
			return fieldError("RetryTiers", "Config.RetryTiers: %v", err)
		}
	}
	if _, err := c.registry(); err != nil {
		return err
	}
	if len(c.Tokens) == 0 {
		return requireLoopback(c.Listen)
	}
	return nil
}

// requireLoopback refuses a listen address reachable from other hosts,
// for a server without API tokens.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fieldError("Listen", "Config.Listen: listen address %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fieldError("Listen", "Config.Listen: refusing to listen on %q without API tokens: set Config.Tokens, or listen on a loopback address such as %s",
		addr, DefaultListen)
}

// Token is a bearer token the API accepts and the scopes it grants.
type Token = api.Token

// Scope is what a token may do: ScopeRead, ScopeWrite or ScopeAdmin, each
// implying the ones before it.
type Scope = api.Scope

// The scopes of a Token.
const (
	// ScopeRead allows the GET routes (jobs, tasks, results, metrics).
	ScopeRead = api.ScopeRead
	// ScopeWrite allows submitting, cancelling, redriving and deleting
	// jobs, and reading.
	ScopeWrite = api.ScopeWrite
	// ScopeAdmin allows everything, including replaying and purging dead
	// letters.
	ScopeAdmin = api.ScopeAdmin
)

// ParseTokens reads tokens in the WARREN_API_TOKENS form,
// "token:scope[+scope],...". An empty string is no tokens.
func ParseTokens(s string) ([]Token, error) { return api.ParseTokens(s) }

// registry returns the built-in reducers and Config.Reducers in one
// registry, registered in name order so that an error is always the same.
func (c Config) registry() (*reduce.Registry, error) {
	r := reduce.NewRegistry()
	for _, name := range slices.Sorted(maps.Keys(c.Reducers)) {
		if err := r.Register(name, c.Reducers[name]); err != nil {
			return nil, fieldError("Reducers", "Config.Reducers[%q]: %v", name, err)
		}
	}
	return r, nil
}
