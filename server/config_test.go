package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/server"
)

// Config alone checks the ranges of its fields (the warren command checks
// none): New refuses a value past each bound with a *ConfigError that
// names the field, which a command can map onto its flag.
func TestNewNamesTheFieldThatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   server.Config
		field string
		want  string
	}{
		{server.Config{MaxBodyBytes: -1}, "MaxBodyBytes", "Config.MaxBodyBytes must be >= 1"},
		{server.Config{MaxResultBytes: -1}, "MaxResultBytes", "Config.MaxResultBytes must be >= 0, got -1"},
		{server.Config{MaxTaskBytes: -1}, "MaxTaskBytes", "Config.MaxTaskBytes must be >= 1"},
		{server.Config{MaxJobTasks: -1}, "MaxJobTasks", "Config.MaxJobTasks must be >= 1"},
		{server.Config{MaxMessageBytes: 100}, "MaxMessageBytes", "Config.MaxMessageBytes must be more than 16384"},
		{server.Config{MaxMessageBytes: 16384}, "MaxMessageBytes", "Config.MaxMessageBytes must be more than 16384, got 16384"},
		{server.Config{MaxTaskBytes: 4 << 20}, "MaxTaskBytes", "Config.MaxTaskBytes (4194304) must fit in a message: at most Config.MaxMessageBytes (4194304) less 16384"},
		{server.Config{MaxInflightBytes: 1 << 20}, "MaxInflightBytes", "Config.MaxInflightBytes (1048576) must hold at least two messages of Config.MaxMessageBytes (4194304)"},
		{server.Config{BodyTimeout: -time.Second}, "BodyTimeout", "Config.BodyTimeout must be > 0"},
		{server.Config{IdleTimeout: -time.Second}, "IdleTimeout", "Config.IdleTimeout must be > 0"},
		{server.Config{ShutdownTimeout: -time.Second}, "ShutdownTimeout", "Config.ShutdownTimeout must be > 0, got -1s"},
		{server.Config{TLSCertFile: "c.pem"}, "TLSCertFile", "Config.TLSCertFile is set but not Config.TLSKeyFile: HTTPS needs both, or neither"},
		{server.Config{TLSKeyFile: "k.pem"}, "TLSKeyFile", "Config.TLSKeyFile is set but not Config.TLSCertFile: HTTPS needs both, or neither"},
		{server.Config{RelayBatchSize: -1}, "RelayBatchSize", "Config.RelayBatchSize must be >= 1"},
		{server.Config{RelayWindow: -2}, "RelayWindow", "Config.RelayWindow must be >= -1 (-1: no window), got -2"},
		{server.Config{RelayPollInterval: -time.Second}, "RelayPollInterval", "Config.RelayPollInterval must be >= 0"},
		{server.Config{AggregatorBatchSize: -2}, "AggregatorBatchSize", "Config.AggregatorBatchSize must be >= 1"},
		{server.Config{AggregatorLinger: -time.Second}, "AggregatorLinger", "Config.AggregatorLinger must be >= 0"},
		{server.Config{CloseScanInterval: -time.Second}, "CloseScanInterval", "Config.CloseScanInterval must be >= 0"},
		{server.Config{ReconcileInterval: -time.Second}, "ReconcileInterval", "Config.ReconcileInterval must be >= 0"},
		{server.Config{DeliveryLimit: -1}, "DeliveryLimit", "Config.DeliveryLimit must be >= 0"},
		{server.Config{QuorumReplicas: -1}, "QuorumReplicas", "Config.QuorumReplicas must be >= 0"},
		{server.Config{AMQPURL: "amqp://u:p@a/,amqp://u:p@b:bad/"}, "AMQPURL", "Config.AMQPURL: URL 2 of 2, (unparsable URL), is not an AMQP URL"},
		{server.Config{AMQPURL: "amqp://u:p@a/,amqp://u:p@b/other"}, "AMQPURL", `Config.AMQPURL: URL 2 of 2, amqp://u:xxxxx@b/other, names the virtual host "other"`},
		{server.Config{ReconcileGrace: -time.Second}, "ReconcileGrace", "Config.ReconcileGrace must be >= 0"},
		{server.Config{RetentionInterval: -time.Second}, "RetentionInterval", "Config.RetentionInterval must be >= 0"},
		{server.Config{Retention: time.Millisecond}, "Retention", "Config.Retention must be at least 1s (or negative, to keep jobs forever)"},
		{server.Config{RetryTiers: []time.Duration{time.Microsecond}}, "RetryTiers", "Config.RetryTiers: retry tier 0 is 1µs"},
		{server.Config{RetryTiers: []time.Duration{10 * time.Second, 5 * time.Second}}, "RetryTiers",
			"Config.RetryTiers: retry tier 1 (5s) is not longer than tier 0 (10s); tiers must increase, such as 1s,5s,30s,2m,10m"},
		{server.Config{Listen: "0.0.0.0:8080"}, "Listen", "Config.Listen: refusing to listen on \"0.0.0.0:8080\" without API tokens: set Config.Tokens"},
		{server.Config{Listen: "nonsense"}, "Listen", "listen address \"nonsense\""},
		{server.Config{Reducers: map[string]reduce.Factory{"collect": newCount}}, "Reducers", `Config.Reducers["collect"]`},
		{server.Config{Reducers: map[string]reduce.Factory{"count": nil}}, "Reducers", `Config.Reducers["count"]`},
	} {
		_, err := server.New(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		require.Contains(t, err.Error(), tc.want)
		var ce *server.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		require.Equal(t, tc.field, ce.Field, "%+v", tc.cfg)
		require.Equal(t, "server: "+ce.Message, err.Error())
	}
	tokens, err := server.ParseTokens("s3cret:admin")
	require.NoError(t, err)
	_, err = server.New(server.Config{Listen: "0.0.0.0:0", Tokens: tokens})
	require.NoError(t, err, "with tokens any address may be used")
}

// Each bound admits its edge: 0 means the default, -1 turns the relay's
// window off, a negative retention keeps jobs forever.
func TestNewAcceptsTheEdgeOfEachBound(t *testing.T) {
	t.Parallel()
	for _, cfg := range []server.Config{
		{MaxBodyBytes: 1, MaxTaskBytes: 1, MaxResultBytes: 0},
		{RelayWindow: -1},
		{RelayWindow: 1, RelayBatchSize: 1, AggregatorBatchSize: 1},
		{MaxMessageBytes: 16385, MaxTaskBytes: 1},
		{MaxMessageBytes: 1 << 20, MaxTaskBytes: 1<<20 - 16384, MaxInflightBytes: 2 << 20},
		{Retention: time.Second},
		{Retention: -1},
		{RetryTiers: []time.Duration{time.Millisecond, 2 * time.Millisecond}},
		{TLSCertFile: "c.pem", TLSKeyFile: "k.pem"},
		{QuorumReplicas: 0, DeliveryLimit: 0, ReconcileGrace: 0},
	} {
		_, err := server.New(cfg)
		require.NoError(t, err, "%+v", cfg)
	}
}
