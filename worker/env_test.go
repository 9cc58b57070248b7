package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

// TestConfigFromLookupSetsEveryField: each variable sets its field, as
// `warren worker` reads it, and a variable left out or empty leaves its
// field zero (New's default).
func TestConfigFromLookupSetsEveryField(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"WARREN_AMQP_URL": "amqp://a:5672/,amqp://b:5672/", "WARREN_PREFIX": "team1", "WARREN_RETRY_TIERS": "1s, 10s",
		"WARREN_QUORUM_REPLICAS": "3", "WARREN_QUEUES": "emails,default", "WARREN_CONCURRENCY": "16",
		"WARREN_NAME": "w-1", "WARREN_SHUTDOWN_TIMEOUT": "1m", "WARREN_MAX_MESSAGE_BYTES": "1048576",
		"WARREN_MAX_TASK_RESULT_BYTES": "65536", "WARREN_MAX_INFLIGHT_BYTES": "33554432",
	}
	require.Len(t, vars, len(worker.EnvVars()), "every variable is set")
	cfg, err := worker.ConfigFromLookup(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, worker.Config{
		AMQPURL: "amqp://a:5672/,amqp://b:5672/", Prefix: "team1", RetryTiers: []time.Duration{time.Second, 10 * time.Second},
		QuorumReplicas: 3, Queues: []string{"emails", "default"}, Concurrency: 16, Name: "w-1", ShutdownTimeout: time.Minute,
		MaxMessageBytes: 1 << 20, MaxResultBytes: 64 << 10, MaxInflightBytes: 32 << 20,
	}, cfg)

	cfg, err = worker.ConfigFromLookup(func(k string) string { return map[string]string{"WARREN_PREFIX": "  "}[k] })
	require.NoError(t, err)
	require.Equal(t, worker.Config{}, cfg, "nothing set, or blank: every field is New's default")
}

// TestConfigFromLookupNamesEveryBadVariable: the error names each variable
// whose value does not parse, and the value.
func TestConfigFromLookupNamesEveryBadVariable(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"WARREN_CONCURRENCY": "eight", "WARREN_SHUTDOWN_TIMEOUT": "30", "WARREN_RETRY_TIERS": "1s,soon",
		"WARREN_QUEUES": "Bad Queue", "WARREN_MAX_INFLIGHT_BYTES": "1e9",
	}
	_, err := worker.ConfigFromLookup(func(k string) string { return vars[k] })
	require.Error(t, err)
	for _, want := range []string{
		`WARREN_CONCURRENCY: "eight" is not a whole number`,
		`WARREN_SHUTDOWN_TIMEOUT: "30" is not a duration`,
		`WARREN_RETRY_TIERS: "soon" is not a duration`,
		`WARREN_QUEUES: `,
		`WARREN_MAX_INFLIGHT_BYTES: "1e9" is not a whole number`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

// TestConfigFromEnvReadsTheEnvironment reads the process's variables
// (t.Setenv: not parallel).
func TestConfigFromEnvReadsTheEnvironment(t *testing.T) {
	t.Setenv("WARREN_PREFIX", "from-env")
	t.Setenv("WARREN_CONCURRENCY", "3")
	cfg, err := worker.ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, "from-env", cfg.Prefix)
	require.Equal(t, 3, cfg.Concurrency)
}
