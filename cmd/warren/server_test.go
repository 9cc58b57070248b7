package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/server"
)

// serverConfig maps a `warren server` command line and environment onto
// the server's configuration and checks it with server.New, as runServer
// does.
func serverConfig(t *testing.T, vars map[string]string, args ...string) (server.Config, error) {
	t.Helper()
	env := &environment{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] },
		logger: slog.New(slog.DiscardHandler)}
	var f serverFlags
	fs := newFlagSet("server", "", env)
	f.register(fs, env)
	if err := parse(fs, args, env); err != nil {
		return server.Config{}, err
	}
	cfg, err := f.config(env)
	if err != nil {
		return server.Config{}, err
	}
	_, err = f.newServer(cfg)
	return cfg, err
}

// The per-task limit, the body timeout and the idle timeout are server
// settings: flags with environment fallbacks and documented defaults.
func TestServerUploadLimitFlags(t *testing.T) {
	t.Parallel()
	cfg, err := serverConfig(t, nil)
	require.NoError(t, err)
	require.Equal(t, int64(server.DefaultMaxTaskBytes), cfg.MaxTaskBytes)
	require.Equal(t, server.DefaultBodyTimeout, cfg.BodyTimeout)
	require.Equal(t, server.DefaultIdleTimeout, cfg.IdleTimeout)

	env := map[string]string{"WARREN_MAX_TASK_BYTES": "4096", "WARREN_BODY_TIMEOUT": "5s", "WARREN_IDLE_TIMEOUT": "90s"}
	cfg, err = serverConfig(t, env)
	require.NoError(t, err)
	require.Equal(t, int64(4096), cfg.MaxTaskBytes)
	require.Equal(t, 5*time.Second, cfg.BodyTimeout)
	require.Equal(t, 90*time.Second, cfg.IdleTimeout)

	cfg, err = serverConfig(t, env, "--max-task-bytes", "100", "--body-timeout", "1s", "--idle-timeout", "2s")
	require.NoError(t, err)
	require.Equal(t, int64(100), cfg.MaxTaskBytes, "a flag wins over the environment")
	require.Equal(t, time.Second, cfg.BodyTimeout)
	require.Equal(t, 2*time.Second, cfg.IdleTimeout)

	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{map[string]string{"WARREN_MAX_TASK_BYTES": "1MiB"}, nil, `WARREN_MAX_TASK_BYTES: "1MiB" is not a whole number`},
		{map[string]string{"WARREN_BODY_TIMEOUT": "30"}, nil, `WARREN_BODY_TIMEOUT: "30" is not a duration`},
		{nil, []string{"--max-task-bytes", "-1"}, "--max-task-bytes must be >= 1"},
		{nil, []string{"--idle-timeout", "-1s"}, "--idle-timeout must be > 0"},
	} {
		_, err := serverConfig(t, tc.vars, tc.args...)
		require.ErrorContains(t, err, tc.want)
	}
}

// Retry tiers that do not increase are refused when the server starts.
func TestServerRefusesRetryTiersThatDoNotIncrease(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, map[string]string{"WARREN_RETRY_TIERS": "10s,5s",
		// Were the tiers accepted, the start would fail here instead.
		"WARREN_AMQP_URL":     "amqp://guest:guest@127.0.0.1:1/",
		"WARREN_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "w.db")}, "server")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "WARREN_RETRY_TIERS: retry tier 1 (5s) is not longer than tier 0 (10s); tiers must increase")
}

// --retention (WARREN_RETENTION) is a duration, days, or forever, which
// the server takes as a negative retention; 7 days by default.
func TestServerRetentionFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want time.Duration
	}{
		{nil, nil, server.DefaultRetention},
		{map[string]string{"WARREN_RETENTION": "720h"}, nil, 720 * time.Hour},
		{map[string]string{"WARREN_RETENTION": "30d"}, nil, 30 * 24 * time.Hour},
		{map[string]string{"WARREN_RETENTION": "forever"}, nil, -1},
		{map[string]string{"WARREN_RETENTION": "720h"}, []string{"--retention", "90m"}, 90 * time.Minute},
		{nil, []string{"--retention", "Forever"}, -1},
	} {
		cfg, err := serverConfig(t, tc.vars, tc.args...)
		require.NoError(t, err, "%v %v", tc.vars, tc.args)
		require.Equal(t, tc.want, cfg.Retention, "%v %v", tc.vars, tc.args)
	}

	for _, bad := range []string{"0", "-1h", "500ms", "7x", "0d", "d", "never"} {
		_, err := serverConfig(t, map[string]string{"WARREN_RETENTION": bad})
		require.ErrorContains(t, err, "WARREN_RETENTION: \""+bad+"\" is not a retention", bad)

		code, _, errOut := runCLI(t, nil, "server", "--retention", bad)
		require.Equal(t, 2, code, bad)
		require.Contains(t, errOut, "is not a retention", bad)
	}
}

// --webhook-allow-private (WARREN_WEBHOOK_ALLOW_PRIVATE) is off by
// default.
func TestServerWebhookAllowPrivateFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want bool
	}{
		{nil, nil, false},
		{map[string]string{"WARREN_WEBHOOK_ALLOW_PRIVATE": "1"}, nil, true},
		{map[string]string{"WARREN_WEBHOOK_ALLOW_PRIVATE": "true"}, nil, true},
		{map[string]string{"WARREN_WEBHOOK_ALLOW_PRIVATE": "0"}, nil, false},
		{nil, []string{"--webhook-allow-private"}, true},
		{map[string]string{"WARREN_WEBHOOK_ALLOW_PRIVATE": "1"}, []string{"--webhook-allow-private=false"}, false},
	} {
		cfg, err := serverConfig(t, tc.vars, tc.args...)
		require.NoError(t, err, "%v %v", tc.vars, tc.args)
		require.Equal(t, tc.want, cfg.WebhookAllowPrivate, "%v %v", tc.vars, tc.args)
	}
	_, err := serverConfig(t, map[string]string{"WARREN_WEBHOOK_ALLOW_PRIVATE": "yes please"})
	require.ErrorContains(t, err, `WARREN_WEBHOOK_ALLOW_PRIVATE: "yes please" is not a boolean`)
}

// --allowed-hosts (WARREN_ALLOWED_HOSTS) is a comma-separated list, empty
// by default.
func TestServerAllowedHostsFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want []string
	}{
		{nil, nil, nil},
		{map[string]string{"WARREN_ALLOWED_HOSTS": "warren.internal, box ,"}, nil, []string{"warren.internal", "box"}},
		{map[string]string{"WARREN_ALLOWED_HOSTS": "a"}, []string{"--allowed-hosts", "b,c"}, []string{"b", "c"}},
	} {
		cfg, err := serverConfig(t, tc.vars, tc.args...)
		require.NoError(t, err, "%v %v", tc.vars, tc.args)
		require.Equal(t, tc.want, cfg.AllowedHosts, "%v %v", tc.vars, tc.args)
	}
}
