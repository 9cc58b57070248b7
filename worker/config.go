package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultConcurrency is the default maximum of handlers running at once.
	DefaultConcurrency = 8
	// DefaultShutdownTimeout is how long Run waits by default for in-flight
	// handlers once its context is done.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultReconnectBackoffMax is the default longest wait between two
	// reconnect attempts.
	DefaultReconnectBackoffMax = 10 * time.Second
	// DefaultMaxInflightBytes is the default bound on the task message
	// bytes a worker holds at once (Config.MaxInflightBytes): 256 MiB, or
	// Concurrency messages of Config.MaxMessageBytes when that is more.
	DefaultMaxInflightBytes = 256 << 20
)

// Config configures a Worker. The zero value works against a local
// RabbitMQ with warren's default names.
type Config struct {
	// AMQPURL is the broker address, or the URLs of the nodes of one
	// cluster separated by commas; default broker.DefaultURL. Commands
	// fill it from WARREN_AMQP_URL. Every URL is checked by New. The
	// worker starts at a node picked at random and, when it loses its
	// connection, reconnects to another node at once, trying the lost one
	// last (see docs/operations.md, "RabbitMQ cluster").
	AMQPURL string
	// Prefix is prepended to every exchange and queue name
	// (protocol.NamesFor); commands fill it from WARREN_PREFIX. It must
	// match the server's.
	Prefix string
	// Concurrency is the maximum number of handlers running at once;
	// default DefaultConcurrency.
	Concurrency int
	// Prefetch is how many unacknowledged task messages the broker may
	// hand this worker at once; default 2*Concurrency, so the next tasks
	// are ready when a handler finishes, or fewer when MaxInflightBytes
	// holds fewer messages of MaxMessageBytes. It must be at least
	// Concurrency, and those messages must fit in MaxInflightBytes.
	Prefetch int
	// MaxMessageBytes is the largest task message body this worker takes,
	// and the largest result message it publishes: a larger task message
	// is dead-lettered unread, its tasks failed with protocol.ReasonTooLarge,
	// and results of a task batch are cut into several result batches to
	// stay under it. Default protocol.DefaultMaxMessageBytes; keep it equal
	// to the server's MaxMessageBytes.
	MaxMessageBytes int
	// MaxResultBytes is the largest result of one task, in bytes of JSON:
	// a handler that returns a larger one fails its task for good, with
	// protocol.ReasonResultTooLarge. Default protocol.DefaultMaxResultBytes;
	// at most MaxMessageBytes less protocol.EnvelopeBytes.
	MaxResultBytes int
	// MaxInflightBytes bounds the task message bytes this worker holds at
	// once, prefetched or running: RabbitMQ's prefetch counts messages,
	// so the worker holds at most Prefetch messages of at most
	// MaxMessageBytes, and Prefetch times MaxMessageBytes must fit in
	// MaxInflightBytes. Default DefaultMaxInflightBytes, or Concurrency
	// times MaxMessageBytes when that is more. What handlers allocate
	// from a payload comes on top.
	MaxInflightBytes int64
	// Queues are the work queues this worker consumes (the job option
	// "queue"; protocol.CheckQueueName), default protocol.DefaultQueue
	// alone. It declares each at start; a task it retries goes back to the
	// queue it came from, through that queue's retry tiers. Prefetch is
	// shared between them: each queue's consumer gets Prefetch divided by
	// the number of queues, rounded up.
	Queues []string
	// Name identifies this worker in results and dead letters; default
	// "hostname:pid".
	Name string
	// ShutdownTimeout is how long Run waits, once its context is done, for
	// in-flight handlers to finish and their results to be published;
	// default DefaultShutdownTimeout. Handlers still running then have
	// their context cancelled and their tasks are requeued; Run waits up
	// to 2 s more for them to return, then returns without them.
	ShutdownTimeout time.Duration
	// ReconnectBackoffMax is the longest wait between two attempts to
	// reconnect after the broker connection is lost; default
	// DefaultReconnectBackoffMax. The first attempt waits about 100 ms and
	// each failed one doubles the wait, up to this bound; every wait is
	// jittered by +-20%.
	ReconnectBackoffMax time.Duration
	// DeliveryLimit is the quorum queues' x-delivery-limit passed to
	// broker.DeclareTopology; 0 means broker.DefaultDeliveryLimit. It must
	// match the value the queues were declared with.
	DeliveryLimit int
	// QuorumReplicas is x-quorum-initial-group-size of every quorum
	// queue, passed to broker.DeclareTopology: on how many nodes a queue
	// gets a replica when it is created. 0 leaves it to RabbitMQ (its
	// quorum_cluster_size, 3 unless configured). It must match the
	// server's: RabbitMQ refuses to declare a queue again with another
	// value.
	QuorumReplicas int
	// RetryTiers are the delays of the retry tiers: the nth retry of a task
	// waits RetryTiers[n-1], every retry past the last tier waits the last.
	// Default protocol.DefaultRetryTiers. Each must be a positive whole
	// number of milliseconds, and each longer than the one before, as the
	// server requires. Run declares a delay queue for each (see
	// broker.TopologyOptions.RetryTiers); use the same tiers as the server
	// so that every tier queue in use is also known to its operators.
	RetryTiers []time.Duration
	// Logger receives the worker's logs, with job_id and task_id as
	// attributes; default slog.Default(). Per-task logs are at Debug level
	// (Warn and Error for failures); Info is kept for start and stop.
	Logger *slog.Logger
	// HeartbeatInterval is how often the worker publishes its heartbeat
	// (protocol.Heartbeat: its name, queues, types, concurrency and tasks
	// in flight) to the heartbeat exchange, from which every server keeps
	// its list of workers (GET /v1/workers); default
	// protocol.DefaultHeartbeatInterval, negative for none. Heartbeats are
	// transient messages on a channel of their own: one that cannot be
	// published is logged and never holds up a task.
	HeartbeatInterval time.Duration
	// OnEvent, if set, is called once for each Event, synchronously on the
	// goroutine that settled the task. It must be safe for concurrent use
	// and return quickly: the task's concurrency slot is held until it
	// returns.
	OnEvent func(Event)
	// TracerProvider makes the worker's OpenTelemetry spans: one
	// warren.task.process span per task message, continuing the trace its
	// traceparent header carries, which the handler's context holds (so
	// that spans the handler starts from its context are its children),
	// and one warren.result.publish span per result message, whose trace
	// context the message carries on to the server. Default
	// otel.GetTracerProvider(), which makes no-op spans unless the program
	// installed an SDK.
	TracerProvider trace.TracerProvider
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.AMQPURL == "" {
		c.AMQPURL = broker.DefaultURL
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = min(protocol.DefaultMaxResultBytes, c.MaxMessageBytes-protocol.EnvelopeBytes)
	}
	if c.MaxInflightBytes == 0 && c.MaxMessageBytes > 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, int64(c.Concurrency)*int64(c.MaxMessageBytes))
	}
	if c.Prefetch == 0 && c.MaxMessageBytes > 0 {
		c.Prefetch = int(min(int64(2*c.Concurrency), max(1, c.MaxInflightBytes/int64(c.MaxMessageBytes))))
	}
	if c.Name == "" {
		c.Name = defaultName()
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{protocol.DefaultQueue}
	}
	queues := make([]string, 0, len(c.Queues))
	for _, q := range c.Queues {
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	c.Queues = queues
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = protocol.DefaultHeartbeatInterval
	}
	if c.ReconnectBackoffMax == 0 {
		c.ReconnectBackoffMax = DefaultReconnectBackoffMax
	}
	if len(c.RetryTiers) == 0 {
		c.RetryTiers = protocol.DefaultRetryTiers
	}
	c.RetryTiers = slices.Clone(c.RetryTiers) // the caller's slice may change
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
	// "Concurrency".
	Field string
	// Message says what is wrong and how to fix it. It writes every field
	// it names, Field and any other, as "Config.Name", so that a program
	// can put its own names for them in their place.
	Message string
}

func (e *ConfigError) Error() string { return "worker: " + e.Message }

// fieldError returns the ConfigError of field; format names it, and any
// other field, as Config.Name.
func fieldError(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// validate names the first field that is out of range, in a
// *ConfigError. It is the only check of the fields' ranges: the warren
// command leaves them to it and names its flags in its errors.
func (c Config) validate() error {
	switch {
	case c.Concurrency < 0:
		return fieldError("Concurrency", "Config.Concurrency must be >= 0, got %d", c.Concurrency)
	case c.MaxInflightBytes < 0:
		return fieldError("MaxInflightBytes", "Config.MaxInflightBytes must be >= 0, got %d", c.MaxInflightBytes)
	case c.Prefetch < 0:
		return fieldError("Prefetch", "Config.Prefetch must be >= 0, got %d", c.Prefetch)
	case c.Prefetch > 0 && c.Prefetch < c.Concurrency:
		return fieldError("Prefetch", "Config.Prefetch (%d) must be at least Config.Concurrency (%d), or handlers would sit idle "+
			"(by default it is 2*Config.Concurrency, cut to the messages of Config.MaxMessageBytes that fit in Config.MaxInflightBytes)", c.Prefetch, c.Concurrency)
	case c.Prefetch > 65535:
		return fieldError("Prefetch", "Config.Prefetch must be at most 65535 (an AMQP limit), got %d", c.Prefetch)
	case c.MaxMessageBytes <= protocol.EnvelopeBytes:
		return fieldError("MaxMessageBytes", "Config.MaxMessageBytes must be more than %d, got %d", protocol.EnvelopeBytes, c.MaxMessageBytes)
	case c.MaxResultBytes < 0 || c.MaxResultBytes > c.MaxMessageBytes-protocol.EnvelopeBytes:
		return fieldError("MaxResultBytes", "Config.MaxResultBytes must be between 1 and Config.MaxMessageBytes less %d (%d), got %d",
			protocol.EnvelopeBytes, c.MaxMessageBytes-protocol.EnvelopeBytes, c.MaxResultBytes)
	case int64(c.Prefetch)*int64(c.MaxMessageBytes) > c.MaxInflightBytes:
		return fieldError("MaxInflightBytes", "Config.Prefetch (%d) messages of Config.MaxMessageBytes (%d) do not fit in Config.MaxInflightBytes (%d): "+
			"raise Config.MaxInflightBytes or lower Config.Prefetch, Config.Concurrency or Config.MaxMessageBytes", c.Prefetch, c.MaxMessageBytes, c.MaxInflightBytes)
	case c.ShutdownTimeout < 0:
		return fieldError("ShutdownTimeout", "Config.ShutdownTimeout must be >= 0, got %v", c.ShutdownTimeout)
	case c.HeartbeatInterval > 0 && c.HeartbeatInterval < time.Millisecond:
		return fieldError("HeartbeatInterval", "Config.HeartbeatInterval must be at least 1ms (or negative, for none), got %v", c.HeartbeatInterval)
	case c.ReconnectBackoffMax < 0:
		return fieldError("ReconnectBackoffMax", "Config.ReconnectBackoffMax must be >= 0, got %v", c.ReconnectBackoffMax)
	case c.DeliveryLimit < 0:
		return fieldError("DeliveryLimit", "Config.DeliveryLimit must be >= 0, got %d", c.DeliveryLimit)
	case c.QuorumReplicas < 0:
		return fieldError("QuorumReplicas", "Config.QuorumReplicas must be >= 0, got %d", c.QuorumReplicas)
	}
	if err := broker.CheckRetryTiers(c.RetryTiers); err != nil {
		return fieldError("RetryTiers", "Config.RetryTiers: %v", err)
	}
	if err := broker.CheckRetryTierOrder(c.RetryTiers); err != nil {
		return fieldError("RetryTiers", "Config.RetryTiers: %v", err)
	}
	for _, q := range c.Queues {
		if err := protocol.CheckQueueName(q); err != nil {
			return fieldError("Queues", "Config.Queues: %v", err)
		}
	}
	if _, err := broker.ParseNodes(c.AMQPURL); err != nil {
		return fieldError("AMQPURL", "Config.AMQPURL: %v", err)
	}
	return nil
}

func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

var errNoHandlers = errors.New("worker: no handlers registered; call Handle (or Reducer) before Run")
