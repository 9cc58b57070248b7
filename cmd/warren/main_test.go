package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCLI runs one command line in process with the given environment.
func runCLI(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &environment{
		stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return vars[k] },
		logger: slog.New(slog.NewTextHandler(&stderr, nil)),
	}
	code := run(context.Background(), args, env)
	return code, stdout.String(), stderr.String()
}

func TestHelpListsCommands(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, nil, "help")
	require.Equal(t, 0, code)
	for _, c := range commands {
		require.Contains(t, out, c.name)
	}
	code, _, _ = runCLI(t, nil)
	require.Equal(t, 2, code, "no command is a usage error")
}

func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		// Help is asked for: it goes to stdout, and the exit status is 0.
		code, out, errOut := runCLI(t, nil, c.name, "--help")
		require.Equal(t, 0, code, c.name)
		require.Empty(t, errOut, c.name)
		require.Contains(t, out, "Usage: warren "+c.name, c.name)
		env := "WARREN_AMQP_URL"
		switch c.name {
		case "submit", "list", "status", "tasks", "task", "watch", "result", "cancel", "redrive", "pause", "resume", "delete", "dlq":
			env = "WARREN_SERVER"
		case "version", "completion":
			env = "WARREN_CONFIG"
		}
		require.Contains(t, out, env, c.name)
	}
}

func TestBadCommandLinesExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"frobnicate"},
		{"server", "--no-such-flag"},
		{"worker", "stray-argument"},
	} {
		code, _, errOut := runCLI(t, nil, args...)
		require.Equal(t, 2, code, "%v", args)
		require.NotEmpty(t, errOut, "%v", args)
	}
}

func TestBadFlagValuesAreOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", "--types", "echo,nope"}, `unknown handler "nope"`},
		{[]string{"worker", "--concurrency", "-1"}, "--concurrency must be >= 0"},
		{[]string{"server", "--relay-batch", "-1"}, "--relay-batch must be >= 1"},
		{[]string{"migrate", "--database", "mysql://x"}, "unsupported scheme"},
		{[]string{"server", "--quorum-replicas", "-1"}, "--quorum-replicas must be >= 0"},
		{[]string{"worker", "--quorum-replicas", "-1"}, "--quorum-replicas must be >= 0"},
	} {
		// A bad value is a usage error (exit status 2; 1 before issue 15).
		code, _, errOut := runCLI(t, nil, tc.args...)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}

// Every command that connects to RabbitMQ checks each URL of the list
// before it starts, and names the wrong one without its password.
func TestAMQPURLListIsCheckedUpFront(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"WARREN_AMQP_URL": "amqp://guest:s3cret@127.0.0.1:5672/, amqp://guest:s3cret@127.0.0.1:bad/"}
	for _, cmd := range []string{"server", "worker", "bench", "demo"} {
		code, _, errOut := runCLI(t, vars, cmd)
		require.Equal(t, 2, code, cmd)
		require.Contains(t, errOut, "WARREN_AMQP_URL: URL 2 of 2, (unparsable URL), is not an AMQP URL", cmd)
		require.NotContains(t, errOut, "s3cret", cmd)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	code, _, errOut := runCLI(t, map[string]string{"WARREN_AMQP_URL": "amqp://guest:s3cret@127.0.0.1:1/,amqp://guest:s3cret@127.0.0.1:2/"}, "worker")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "cannot connect to RabbitMQ at any of its 2 nodes: amqp://guest:xxxxx@127.0.0.1:")
	require.NotContains(t, errOut, "s3cret")
}

func TestUnreachableServicesAreOneClearLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errOut := runCLI(t, map[string]string{
		"WARREN_AMQP_URL":     "amqp://guest:secret@127.0.0.1:1/",
		"WARREN_DATABASE_URL": "sqlite://" + filepath.Join(dir, "w.db"),
	}, "server")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "cannot connect to RabbitMQ")
	require.NotContains(t, errOut, "secret")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)

	for _, cmd := range []string{"migrate", "server"} {
		code, _, errOut = runCLI(t, nil, cmd, "--database", "postgres://postgres@127.0.0.1:1/test?connect_timeout=5")
		require.Equal(t, 3, code, cmd)
		require.Contains(t, errOut, "unreachable", cmd)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	code, _, errOut = runCLI(t, map[string]string{"WARREN_AMQP_URL": "amqp://127.0.0.1:1/"}, "worker")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "cannot connect to RabbitMQ")
}

func TestMigrateCreatesTheStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "w.db")
	code, _, errOut := runCLI(t, map[string]string{"WARREN_DATABASE_URL": "sqlite://" + path}, "migrate")
	require.Equal(t, 0, code, errOut)
	_, err := os.Stat(path)
	require.NoError(t, err)
	// Twice is fine.
	code, _, errOut = runCLI(t, nil, "migrate", "--database", "sqlite://"+path)
	require.Equal(t, 0, code, errOut)
}

// Every command takes --log-format and --log-level (or WARREN_LOG_FORMAT
// and WARREN_LOG_LEVEL), and refuses a bad value with one line naming the
// flag.
func TestEveryCommandTakesTheLogFlags(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "w.db")
	var out, errb bytes.Buffer
	env := &environment{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, logger: slog.New(slog.DiscardHandler)}
	require.Equal(t, 0, run(t.Context(), []string{"migrate", "--database", db, "--log-format", "json"}, env))
	var line map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(errb.Bytes()), &line), errb.String())
	require.Equal(t, "store migrated", line["msg"])

	errb.Reset()
	require.Equal(t, 0, run(t.Context(), []string{"migrate", "--database", db, "--log-level", "warn"}, env), errb.String())
	require.Empty(t, errb.String(), "info is below warn")

	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"migrate", "--database", db, "--log-format", "xml"}, nil, `warren migrate: --log-format must be text or json, got "xml"`},
		{[]string{"status", "ID", "--log-level", "loud"}, nil, `warren status: --log-level must be debug, info, warn or error, got "loud"`},
		{[]string{"migrate", "--database", db}, map[string]string{"WARREN_LOG_FORMAT": "yaml"}, `warren migrate: WARREN_LOG_FORMAT must be text or json, got "yaml"`},
	} {
		errb.Reset()
		env := &environment{stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }, logger: slog.New(slog.DiscardHandler)}
		require.Equal(t, 2, run(t.Context(), c.args, env), "%v", c.args)
		require.Equal(t, c.want+"\n", errb.String())
	}
}
