package worker

import (
	"os"
	"time"

	"github.com/warrenhq/warren/internal/envconfig"
	"github.com/warrenhq/warren/protocol"
)

// envVars is the one mapping of the variables of `warren worker` onto
// Config: ConfigFromEnv reads them, and the warren command hands it the
// values of the flags of the same names.
var envVars = []envconfig.Var[Config]{
	{Name: "WARREN_AMQP_URL", Flag: "amqp-url", Set: envconfig.String(func(c *Config) *string { return &c.AMQPURL })},
	{Name: "WARREN_PREFIX", Flag: "prefix", Set: envconfig.String(func(c *Config) *string { return &c.Prefix })},
	{Name: "WARREN_RETRY_TIERS", Flag: "retry-tiers", Set: envconfig.Durations(func(c *Config) *[]time.Duration { return &c.RetryTiers })},
	{Name: "WARREN_QUORUM_REPLICAS", Flag: "quorum-replicas", Set: envconfig.Int(func(c *Config) *int { return &c.QuorumReplicas })},
	{Name: "WARREN_QUEUES", Flag: "queues", Set: func(c *Config, s string) error {
		queues, err := protocol.ParseQueues(s)
		c.Queues = queues
		return err
	}},
	{Name: "WARREN_CONCURRENCY", Flag: "concurrency", Set: envconfig.Int(func(c *Config) *int { return &c.Concurrency })},
	{Name: "WARREN_NAME", Flag: "name", Set: envconfig.String(func(c *Config) *string { return &c.Name })},
	{Name: "WARREN_SHUTDOWN_TIMEOUT", Flag: "shutdown-timeout", Set: envconfig.Duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{Name: "WARREN_MAX_MESSAGE_BYTES", Flag: "max-message-bytes", Set: envconfig.Int(func(c *Config) *int { return &c.MaxMessageBytes })},
	{Name: "WARREN_MAX_TASK_RESULT_BYTES", Flag: "max-task-result-bytes", Set: envconfig.Int(func(c *Config) *int { return &c.MaxResultBytes })},
	{Name: "WARREN_MAX_INFLIGHT_BYTES", Flag: "max-inflight-bytes", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxInflightBytes })},
}

// EnvVar is one variable ConfigFromEnv reads, and the flag of `warren
// worker` that sets the same Config field.
type EnvVar struct {
	Name, Flag string
}

// EnvVars lists the variables ConfigFromEnv reads, in the order of the
// README's table.
func EnvVars() []EnvVar {
	out := make([]EnvVar, len(envVars))
	for i, v := range envVars {
		out[i] = EnvVar{Name: v.Name, Flag: v.Flag}
	}
	return out
}

// ConfigFromEnv returns the Config the WARREN_* variables of `warren
// worker` give (EnvVars: the broker, prefix, retry tiers, quorum replicas,
// queues, concurrency and limits), so that a worker binary of your own
// joins the same deployment as `warren worker` without wiring each
// setting by hand. A variable not set, or empty, leaves its field zero:
// New's default. The fields no variable names (Logger, OnEvent,
// TracerProvider, ...) are the caller's to set. An error names each
// variable whose value does not parse, with the value (every one, joined);
// New checks the values' ranges.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.Getenv) }

// ConfigFromLookup is ConfigFromEnv with the variables read by getenv:
// the warren command gives its flags' values this way.
func ConfigFromLookup(getenv func(name string) string) (Config, error) {
	var c Config
	err := envconfig.Apply(&c, envVars, getenv)
	return c, err
}
