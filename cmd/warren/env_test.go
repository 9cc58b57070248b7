package main

import (
	"io"
	"log/slog"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// helpVars returns the WARREN_* variables `warren CMD --help` lists, by
// flag.
func helpVars(t *testing.T, cmd string) map[string]string {
	t.Helper()
	code, out, _ := runCLI(t, nil, cmd, "--help")
	require.Equal(t, 0, code)
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)\b.*\n.*\(env (WARREN_[A-Z_]+)`).FindAllStringSubmatch(out, -1) {
		vars[m[2]] = m[1]
	}
	require.NotEmpty(t, vars)
	return vars
}

// TestConfigFromEnvReadsWhatTheCommandReads: worker.ConfigFromEnv and
// server.ConfigFromEnv read every variable of `warren worker` and
// `warren server` that sets a Config field, for the same flag, and the
// commands' other variables are theirs alone (their handlers, endpoints
// and logs).
func TestConfigFromEnvReadsWhatTheCommandReads(t *testing.T) {
	t.Parallel()
	commandOnly := map[string][]string{
		"worker": {"WARREN_CONFIG", "WARREN_LOG_FORMAT", "WARREN_LOG_LEVEL", "WARREN_TYPES", "WARREN_HEALTH_LISTEN",
			"WARREN_METRICS_LISTEN", "WARREN_DATABASE_URL"},
		"server": {"WARREN_CONFIG", "WARREN_LOG_FORMAT", "WARREN_LOG_LEVEL"},
	}
	tables := map[string]map[string]string{"worker": {}, "server": {}}
	for _, v := range worker.EnvVars() {
		tables["worker"][v.Name] = v.Flag
	}
	for _, v := range server.EnvVars() {
		tables["server"][v.Name] = v.Flag
	}
	for cmd, table := range tables {
		for name, flag := range helpVars(t, cmd) {
			if slices.Contains(commandOnly[cmd], name) {
				require.NotContains(t, table, name, "%s: %s is the command's own", cmd, name)
				continue
			}
			require.Equal(t, flag, table[name], "warren %s --%s (%s) is not read by %s.ConfigFromEnv", cmd, flag, name, cmd)
		}
		require.Len(t, table, len(helpVars(t, cmd))-len(commandOnly[cmd]), "%s.ConfigFromEnv reads a variable the command does not", cmd)
	}
}

// TestServerCommandConfigIsConfigFromEnv: with every variable of
// server.EnvVars set, `warren server` builds the Config that
// server.ConfigFromEnv does.
func TestServerCommandConfigIsConfigFromEnv(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"WARREN_AMQP_URL": "amqp://u:p@broker:5672/", "WARREN_DATABASE_URL": "postgres://db/warren", "WARREN_PREFIX": "p1",
		"WARREN_RETRY_TIERS": "2s,20s", "WARREN_QUORUM_REPLICAS": "3", "WARREN_LISTEN": "0.0.0.0:9000",
		"WARREN_API_TOKENS": "tok-1:read,tok-2:admin", "WARREN_TLS_CERT": "/c.pem", "WARREN_TLS_KEY": "/k.pem",
		"WARREN_MAX_BODY": "1000", "WARREN_MAX_TASK_BYTES": "100", "WARREN_MAX_METADATA_BYTES": "50", "WARREN_MAX_JOB_TASKS": "7",
		"WARREN_MAX_RESULT_BYTES": "2000", "WARREN_BODY_TIMEOUT": "7s", "WARREN_IDLE_TIMEOUT": "8s", "WARREN_RETENTION": "30d",
		"WARREN_QUEUE_IDLE_DELETE": "0", "WARREN_AGGREGATOR_BATCH": "11", "WARREN_AGGREGATOR_LINGER": "3ms",
		"WARREN_RELAY_BATCH": "12", "WARREN_RELAY_WINDOW": "-1", "WARREN_MAX_MESSAGE_BYTES": "4096",
		"WARREN_MAX_INFLIGHT_BYTES": "9999", "WARREN_SHUTDOWN_TIMEOUT": "9s", "WARREN_ALLOWED_HOSTS": "a.example, b.example",
		"WARREN_WEBHOOK_ALLOW_PRIVATE": "true", "WARREN_KEEP_ATTEMPTS": "5",
	}
	require.Len(t, vars, len(server.EnvVars()), "every variable is set")
	want, err := server.ConfigFromLookup(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, want.Retention)
	require.Equal(t, time.Duration(-1), want.QueueIdleDelete, "0 is never, as --queue-idle-delete 0")

	env := &environment{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] },
		logger: slog.New(slog.DiscardHandler)}
	var f serverFlags
	fs := newFlagSet("server", "", env)
	f.register(fs, env)
	require.NoError(t, parse(fs, nil, env))
	got, err := f.config(env)
	require.NoError(t, err)
	got.Logger = nil
	require.Equal(t, want, got)
}
