package server

import (
	"os"
	"time"

	"github.com/warrenhq/warren/internal/envconfig"
)

// envVars is the one mapping of the variables of `warren server` onto
// Config: ConfigFromEnv reads them, and the warren command hands it the
// values of the flags of the same names.
var envVars = []envconfig.Var[Config]{
	{Name: "WARREN_AMQP_URL", Flag: "amqp-url", Set: envconfig.String(func(c *Config) *string { return &c.AMQPURL })},
	{Name: "WARREN_DATABASE_URL", Flag: "database", Set: envconfig.String(func(c *Config) *string { return &c.DatabaseURL })},
	{Name: "WARREN_PREFIX", Flag: "prefix", Set: envconfig.String(func(c *Config) *string { return &c.Prefix })},
	{Name: "WARREN_RETRY_TIERS", Flag: "retry-tiers", Set: envconfig.Durations(func(c *Config) *[]time.Duration { return &c.RetryTiers })},
	{Name: "WARREN_QUORUM_REPLICAS", Flag: "quorum-replicas", Set: envconfig.Int(func(c *Config) *int { return &c.QuorumReplicas })},
	{Name: "WARREN_LISTEN", Flag: "listen", Set: envconfig.String(func(c *Config) *string { return &c.Listen })},
	{Name: "WARREN_API_TOKENS", Flag: "api-tokens", Set: func(c *Config, s string) error {
		tokens, err := ParseTokens(s)
		c.Tokens = tokens
		return err
	}},
	{Name: "WARREN_TLS_CERT", Flag: "tls-cert", Set: envconfig.String(func(c *Config) *string { return &c.TLSCertFile })},
	{Name: "WARREN_TLS_KEY", Flag: "tls-key", Set: envconfig.String(func(c *Config) *string { return &c.TLSKeyFile })},
	{Name: "WARREN_MAX_BODY", Flag: "max-body", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxBodyBytes })},
	{Name: "WARREN_MAX_TASK_BYTES", Flag: "max-task-bytes", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxTaskBytes })},
	{Name: "WARREN_MAX_METADATA_BYTES", Flag: "max-metadata-bytes", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxMetadataBytes })},
	{Name: "WARREN_MAX_JOB_TASKS", Flag: "max-job-tasks", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxJobTasks })},
	{Name: "WARREN_KEEP_ATTEMPTS", Flag: "keep-attempts", Set: envconfig.Int(func(c *Config) *int { return &c.KeepAttempts })},
	{Name: "WARREN_MAX_RESULT_BYTES", Flag: "max-result-bytes", Set: envconfig.Int(func(c *Config) *int { return &c.MaxResultBytes })},
	{Name: "WARREN_BODY_TIMEOUT", Flag: "body-timeout", Set: envconfig.Duration(func(c *Config) *time.Duration { return &c.BodyTimeout })},
	{Name: "WARREN_IDLE_TIMEOUT", Flag: "idle-timeout", Set: envconfig.Duration(func(c *Config) *time.Duration { return &c.IdleTimeout })},
	{Name: "WARREN_RETENTION", Flag: "retention", Set: func(c *Config, s string) error {
		d, err := envconfig.ParseRetention(s)
		c.Retention = d
		return err
	}},
	// 0 is "never" here, as in `warren server --queue-idle-delete 0`; in
	// Config, 0 is the default and never is below 0.
	{Name: "WARREN_QUEUE_IDLE_DELETE", Flag: "queue-idle-delete", Set: func(c *Config, s string) error {
		err := envconfig.Duration(func(c *Config) *time.Duration { return &c.QueueIdleDelete })(c, s)
		if err == nil && c.QueueIdleDelete == 0 {
			c.QueueIdleDelete = -1
		}
		return err
	}},
	{Name: "WARREN_AGGREGATOR_BATCH", Flag: "aggregator-batch", Set: envconfig.Int(func(c *Config) *int { return &c.AggregatorBatchSize })},
	{Name: "WARREN_AGGREGATOR_LINGER", Flag: "aggregator-linger", Set: envconfig.Duration(func(c *Config) *time.Duration { return &c.AggregatorLinger })},
	{Name: "WARREN_RELAY_BATCH", Flag: "relay-batch", Set: envconfig.Int(func(c *Config) *int { return &c.RelayBatchSize })},
	{Name: "WARREN_RELAY_WINDOW", Flag: "relay-window", Set: envconfig.Int(func(c *Config) *int { return &c.RelayWindow })},
	{Name: "WARREN_MAX_MESSAGE_BYTES", Flag: "max-message-bytes", Set: envconfig.Int(func(c *Config) *int { return &c.MaxMessageBytes })},
	{Name: "WARREN_MAX_INFLIGHT_BYTES", Flag: "max-inflight-bytes", Set: envconfig.Int64(func(c *Config) *int64 { return &c.MaxInflightBytes })},
	{Name: "WARREN_SHUTDOWN_TIMEOUT", Flag: "shutdown-timeout", Set: envconfig.Duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{Name: "WARREN_ALLOWED_HOSTS", Flag: "allowed-hosts", Set: envconfig.List(func(c *Config) *[]string { return &c.AllowedHosts })},
	{Name: "WARREN_WEBHOOK_ALLOW_PRIVATE", Flag: "webhook-allow-private", Set: envconfig.Bool(func(c *Config) *bool { return &c.WebhookAllowPrivate })},
}

// EnvVar is one variable ConfigFromEnv reads, and the flag of `warren
// server` that sets the same Config field.
type EnvVar struct {
	Name, Flag string
}

// EnvVars lists the variables ConfigFromEnv reads.
func EnvVars() []EnvVar {
	out := make([]EnvVar, len(envVars))
	for i, v := range envVars {
		out[i] = EnvVar{Name: v.Name, Flag: v.Flag}
	}
	return out
}

// ConfigFromEnv returns the Config the WARREN_* variables of `warren
// server` give (EnvVars: the broker, the store, prefix, retry tiers,
// listen address, tokens, TLS, limits, retention ...), so that a binary
// that embeds the server (with reducers of its own, say) runs as `warren
// server` would in the same deployment. A variable not set, or empty,
// leaves its field zero: New's default. The fields no variable names
// (Store, Reducers, Logger, Hooks, TracerProvider, ...) are the caller's.
// An error names each variable whose value does not parse, with the
// value (every one, joined); New checks the values' ranges.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.Getenv) }

// ConfigFromLookup is ConfigFromEnv with the variables read by getenv:
// the warren command gives its flags' values this way.
func ConfigFromLookup(getenv func(name string) string) (Config, error) {
	var c Config
	err := envconfig.Apply(&c, envVars, getenv)
	return c, err
}
