package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The server's ranges are server.Config's: the command checks none of its
// own, and names the flag, variable or config file line the wrong value
// came from, and any other setting the error names, where Config names
// the fields.
func TestServerConfigErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"--quorum-replicas", "-1"}, "--quorum-replicas must be >= 0, got -1"},
		{map[string]string{"WARREN_AGGREGATOR_BATCH": "-1"}, nil, "WARREN_AGGREGATOR_BATCH must be >= 1, got -1"},
		{nil, []string{"--relay-batch", "-1"}, "--relay-batch must be >= 1, got -1"},
		{nil, []string{"--aggregator-linger", "-1ms"}, "--aggregator-linger must be >= 0, got -1ms"},
		{nil, []string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout must be > 0, got -1s"},
		{nil, []string{"--max-body", "-1"}, "--max-body must be >= 1, got -1"},
		{nil, []string{"--max-message-bytes", "100"}, "--max-message-bytes must be more than 16384, got 100"},
		{map[string]string{"WARREN_RELAY_WINDOW": "-2"}, nil, "WARREN_RELAY_WINDOW must be >= -1 (-1: no window), got -2"},
		{nil, []string{"--max-inflight-bytes", "1000"},
			"--max-inflight-bytes (1000) must hold at least two messages of --max-message-bytes (4194304)"},
		{nil, []string{"--max-result-bytes", "-1"}, "--max-result-bytes must be >= 0, got -1"},
		{nil, []string{"--max-task-bytes", "-1"}, "--max-task-bytes must be >= 1, got -1"},
		{map[string]string{"WARREN_MAX_MESSAGE_BYTES": "1048576"}, []string{"--max-task-bytes", "2000000"},
			"--max-task-bytes (2000000) must fit in a message: at most WARREN_MAX_MESSAGE_BYTES (1048576) less 16384"},
		{nil, []string{"--body-timeout", "-1s"}, "--body-timeout must be > 0, got -1s"},
		{nil, []string{"--idle-timeout", "-1s"}, "--idle-timeout must be > 0, got -1s"},
		{nil, []string{"--tls-cert", "c.pem"}, "--tls-cert is set but not --tls-key: HTTPS needs both, or neither"},
		{map[string]string{"WARREN_TLS_KEY": "k.pem"}, nil, "WARREN_TLS_KEY is set but not --tls-cert: HTTPS needs both, or neither"},
		{nil, []string{"--listen", "0.0.0.0:8080"},
			`--listen: refusing to listen on "0.0.0.0:8080" without API tokens: set --api-tokens, or listen on a loopback address such as 127.0.0.1:8080`},
		{nil, []string{"--retry-tiers", "1s,1500us"}, "--retry-tiers: retry tier 1 is 1.5ms; tiers must be positive whole milliseconds"},
	} {
		_, err := serverConfig(t, tc.vars, tc.args...)
		var ue *usageError
		require.ErrorAs(t, err, &ue, "%v %v: a usage error, exit status 2", tc.vars, tc.args)
		require.Equal(t, tc.want, err.Error(), "%v %v", tc.vars, tc.args)
	}

	// The bounds are Config's: 0 is the default there, and -1 no window.
	cfg, err := serverConfig(t, nil, "--relay-window", "0", "--max-result-bytes", "0")
	require.NoError(t, err)
	require.Zero(t, cfg.RelayWindow)
	require.Zero(t, cfg.MaxResultBytes)
	cfg, err = serverConfig(t, nil, "--relay-window", "-1")
	require.NoError(t, err)
	require.Equal(t, -1, cfg.RelayWindow)
}

// The worker's ranges are worker.Config's, named by flag likewise; the
// worker refuses them before it connects to anything.
func TestWorkerConfigErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"--quorum-replicas", "-1"}, "--quorum-replicas must be >= 0, got -1"},
		{nil, []string{"--concurrency", "-1"}, "--concurrency must be >= 0, got -1"},
		{nil, []string{"--max-message-bytes", "100"}, "--max-message-bytes must be more than 16384, got 100"},
		{nil, []string{"--max-task-result-bytes", "-1"},
			"--max-task-result-bytes must be between 1 and --max-message-bytes less 16384 (4177920), got -1"},
		{map[string]string{"WARREN_MAX_INFLIGHT_BYTES": "-1"}, nil, "WARREN_MAX_INFLIGHT_BYTES must be >= 0, got -1"},
		{map[string]string{"WARREN_CONCURRENCY": "9"}, []string{"--max-inflight-bytes", "33554432"},
			"the prefetch (8) must be at least WARREN_CONCURRENCY (9), or handlers would sit idle"},
		{nil, []string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout must be >= 0, got -1s"},
		{map[string]string{"WARREN_RETRY_TIERS": "5s,1s"}, nil,
			"WARREN_RETRY_TIERS: retry tier 1 (1s) is not longer than tier 0 (5s); tiers must increase"},
	} {
		code, out, errOut := runCLI(t, tc.vars, append([]string{"worker"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v %v: %s", tc.vars, tc.args, errOut)
		require.Empty(t, out)
		require.True(t, strings.HasPrefix(errOut, "warren worker: "+tc.want), "%v %v: %q", tc.vars, tc.args, errOut)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}

// A config file line that is not a setting is named by its number, never
// shown: it may be a token pasted on a line of its own (issue 24, item 8).
func TestConfigFileLineIsNotShown(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "warren.conf")
	require.NoError(t, os.WriteFile(config, []byte("# settings\nprefix p\n\nPASTEDTOKENSECRET\n"), 0o600))
	for _, args := range [][]string{{"worker", "--config", config}, {"status", "ID", "--config", config}} {
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "line 4 is not a setting of any command", "%v", args)
		require.NotContains(t, errOut, "PASTEDTOKENSECRET", "%v", args)
	}

	// The same with a value after it, and with a bad value of a setting.
	require.NoError(t, os.WriteFile(config, []byte("PASTEDTOKENSECRET  OTHERSECRET # note\n"), 0o600))
	code, _, errOut := runCLI(t, nil, "worker", "--config", config)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "line 1 is not a setting")
	require.NotContains(t, errOut, "SECRET")
}

// A config file or TLS key that every user may read is worth a warning:
// it holds tokens, passwords or the key. One readable by its owner only
// is not (issue 24, item 8).
func TestReadableSecretFilesAreWarnedOf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config, key := filepath.Join(dir, "warren.conf"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(config, []byte("prefix p\n"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte("not a key\n"), 0o600))
	parseServer := func(args ...string) string {
		var stderr bytes.Buffer
		env := &environment{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" },
			logger: slog.New(slog.DiscardHandler)}
		var f serverFlags
		fs := newFlagSet("server", "", env)
		f.register(fs, env)
		require.NoError(t, parse(fs, args, env))
		return stderr.String()
	}
	require.Empty(t, parseServer("--config", config, "--tls-key", key), "owner only: no warning")

	require.NoError(t, os.Chmod(config, 0o644))
	require.NoError(t, os.Chmod(key, 0o604))
	got := parseServer("--config", config, "--tls-key", key)
	require.Contains(t, got, "--config is readable by every user of this machine")
	require.Contains(t, got, "--tls-key is readable by every user of this machine")
	require.Contains(t, got, "mode=-rw----r--")
	require.NotContains(t, got, "not a key")

	require.NoError(t, os.Chmod(key, 0o640))
	got = parseServer("--config", config, "--tls-key", key)
	require.Contains(t, got, "--config is readable")
	require.NotContains(t, got, "--tls-key", "group-readable is a deployment's choice (an ssl-cert group)")
}

// --queue-idle-delete (WARREN_QUEUE_IDLE_DELETE) defaults to an hour; 0
// is never, which Config says with a negative duration.
func TestQueueIdleDeleteFlag(t *testing.T) {
	t.Parallel()
	cfg, err := serverConfig(t, nil)
	require.NoError(t, err)
	require.Equal(t, time.Hour, cfg.QueueIdleDelete)
	cfg, err = serverConfig(t, map[string]string{"WARREN_QUEUE_IDLE_DELETE": "10m"})
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, cfg.QueueIdleDelete)
	cfg, err = serverConfig(t, nil, "--queue-idle-delete", "0")
	require.NoError(t, err)
	require.Negative(t, cfg.QueueIdleDelete, "never")
}
