package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/store"
)

// runCLIStdin is runCLI with stdin.
func runCLIStdin(t *testing.T, vars map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &environment{
		stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return vars[k] },
		logger: slog.New(slog.NewTextHandler(&stderr, nil)),
	}
	code := run(context.Background(), args, env)
	return code, stdout.String(), stderr.String()
}

// secrets are in the environment of TestNoSecretIsEverPrinted; none may
// appear in any output.
var secrets = map[string]string{
	"WARREN_AMQP_URL":     "amqp://warren:AMQPSECRET@rabbit.example:5672/",
	"WARREN_DATABASE_URL": "postgres://warren:DBSECRET@db.example/warren?sslmode=require&password=DBPARAMSECRET",
	"WARREN_API_TOKENS":   "APITOKENSECRET:admin",
	"WARREN_TOKEN":        "CLIENTTOKENSECRET",
	"WARREN_SERVER":       "http://user:SERVERSECRET@127.0.0.1:1",
}

func requireNoSecret(t *testing.T, out string, what string) {
	t.Helper()
	for _, s := range []string{"AMQPSECRET", "DBSECRET", "DBPARAMSECRET", "APITOKENSECRET", "CLIENTTOKENSECRET", "SERVERSECRET"} {
		require.NotContains(t, out, s, what)
	}
}

// Help, a bad flag and a bad value show where a setting comes from, never
// its value, for every command and dlq subcommand.
func TestNoSecretIsEverPrinted(t *testing.T) {
	t.Parallel()
	var lines [][]string
	for _, c := range commands {
		lines = append(lines, []string{c.name, "--help"}, []string{"help", c.name}, []string{c.name, "--no-such-flag"},
			[]string{c.name, "--log-level", "loud"})
	}
	for _, sub := range []string{"list", "replay", "purge"} {
		lines = append(lines, []string{"dlq", sub, "--help"}, []string{"dlq", sub, "--no-such-flag"})
	}
	for _, args := range lines {
		code, out, errOut := runCLI(t, secrets, args...)
		requireNoSecret(t, out+errOut, strings.Join(args, " "))
		require.NotEqual(t, exitOK == code && strings.Contains(strings.Join(args, " "), "no-such"), true, "%v", args)
	}
	code, out, _ := runCLI(t, secrets, "server", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "set from WARREN_AMQP_URL")
	require.Contains(t, out, "set from WARREN_DATABASE_URL")
	require.Contains(t, out, "set from WARREN_API_TOKENS")
	code, out, _ = runCLI(t, secrets, "status", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "set from WARREN_TOKEN")
	require.Contains(t, out, "set from WARREN_SERVER")

	// Values that do not parse are not echoed: a database URL of an
	// unsupported scheme, an AMQP URL that does not parse, a server URL
	// that cannot be reached.
	for _, args := range [][]string{
		{"migrate", "--database", "mysql://warren:DBSECRET@db.example/warren"},
		{"server", "--database", "mysql://warren:DBSECRET@db.example/warren"},
		{"worker", "--amqp-url", "amqp://warren:AMQPSECRET@rabbit.example:bad/"},
		{"server", "--amqp-url", "amqp://warren:AMQPSECRET@rabbit.example:bad/"},
		{"status", "some-id"},
		{"list"},
		{"watch", "some-id", "--server", "http://user:SERVERSECRET@127.0.0.1:1"},
	} {
		vars := map[string]string{"WARREN_SERVER": secrets["WARREN_SERVER"], "WARREN_TOKEN": secrets["WARREN_TOKEN"]}
		code, out, errOut := runCLI(t, vars, args...)
		require.NotEqual(t, 0, code, "%v", args)
		requireNoSecret(t, out+errOut, strings.Join(args, " "))
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres://u:pw@h/db?sslmode=require":                "postgres://u:xxxxx@h/db?sslmode=require",
		"postgres://u@h/db?password=pw&sslmode=verify-full":   "postgres://u@h/db?password=xxxxx&sslmode=verify-full",
		"postgres://u@h/db?sslpassword=pw":                    "postgres://u@h/db?sslpassword=xxxxx",
		"https://user:pw@warren.example:8443":                 "https://user:xxxxx@warren.example:8443",
		"amqps://u:pw@rabbit.example:5671/vhost":              "amqps://u:xxxxx@rabbit.example:5671/vhost",
		"not a url: pw":                                       "(unparsable URL)",
		"http://127.0.0.1:8080":                               "http://127.0.0.1:8080",
		"postgres://u:pw@h/db?application_name=warren&x=1&y=": "postgres://u:xxxxx@h/db?application_name=warren&x=1&y=",
	} {
		got := redactURL(raw)
		require.Equal(t, want, got, raw)
		require.NotContains(t, got, "pw", raw)
	}
	require.Equal(t, "sqlite:///var/lib/warren.db", redactDB("sqlite:///var/lib/warren.db"))
}

// A setting comes from the command line, else its variable, else the
// config file, else its default; errors name the source actually used.
func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "warren.conf")
	require.NoError(t, os.WriteFile(config, []byte(`# warren settings
max-task-bytes 100
body-timeout 7s
idle-timeout 9s
prefix fromfile
listen 127.0.0.1:9999
concurrency 3
`), 0o600))
	vars := map[string]string{"WARREN_CONFIG": config, "WARREN_BODY_TIMEOUT": "5s", "WARREN_PREFIX": "fromenv"}
	cfg, err := serverConfig(t, vars, "--prefix", "fromflag")
	require.NoError(t, err)
	require.Equal(t, int64(100), cfg.MaxTaskBytes, "config file")
	require.Equal(t, 5*time.Second, cfg.BodyTimeout, "environment over config file")
	require.Equal(t, 9*time.Second, cfg.IdleTimeout, "config file over default")
	require.Equal(t, "fromflag", cfg.Prefix, "flag over environment")
	require.Equal(t, "127.0.0.1:9999", cfg.Listen)

	cfg, err = serverConfig(t, nil, "--config", config)
	require.NoError(t, err)
	require.Equal(t, "fromfile", cfg.Prefix)

	bad := filepath.Join(t.TempDir(), "bad.conf")
	require.NoError(t, os.WriteFile(bad, []byte("max-task-bytes -1\nretry-tiers 5s,1s\n"), 0o600))
	_, err = serverConfig(t, map[string]string{"WARREN_MAX_TASK_BYTES": "100"}, "--config", bad)
	require.ErrorContains(t, err, "retry-tiers in config file "+bad+": retry tier 1 (1s) is not longer than tier 0 (5s)")
	_, err = serverConfig(t, map[string]string{"WARREN_RETRY_TIERS": "1s,2s"}, "--config", bad)
	require.ErrorContains(t, err, "max-task-bytes in config file "+bad+" must be >= 1")
	_, err = serverConfig(t, map[string]string{"WARREN_MAX_TASK_BYTES": "-1", "WARREN_RETRY_TIERS": "1s,2s"}, "--config", bad)
	require.ErrorContains(t, err, "WARREN_MAX_TASK_BYTES must be >= 1")

	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"--config", filepath.Join(t.TempDir(), "missing.conf")}, "--config: open "},
		{map[string]string{"WARREN_CONFIG": filepath.Join(t.TempDir(), "missing.conf")}, nil, "WARREN_CONFIG: open "},
		{nil, []string{"--retry-tiers", "10s,10s"}, "--retry-tiers: retry tier 1 (10s) is not longer than tier 0 (10s)"},
		{map[string]string{"WARREN_RETRY_TIERS": "1s,nope"}, nil, `WARREN_RETRY_TIERS: "nope" is not a duration`},
		{map[string]string{"WARREN_RELAY_BATCH": "-1"}, nil, "WARREN_RELAY_BATCH must be >= 1"},
		{map[string]string{"WARREN_API_TOKENS": "nocolon"}, nil, "WARREN_API_TOKENS: "},
		{nil, []string{"--tls-cert", "c.pem"}, "--tls-cert is set but not --tls-key"},
		{map[string]string{"WARREN_TLS_KEY": "k.pem"}, nil, "WARREN_TLS_KEY is set but not --tls-cert"},
	} {
		_, err := serverConfig(t, tc.vars, tc.args...)
		require.ErrorContains(t, err, tc.want, "%v %v", tc.vars, tc.args)
		var ue *usageError
		require.ErrorAs(t, err, &ue, "a usage error: exit status 2")
	}

	// A name no command has is a mistake.
	typo := filepath.Join(t.TempDir(), "typo.conf")
	require.NoError(t, os.WriteFile(typo, []byte("prefix p\nrelay-bach 10\n"), 0o600))
	_, err = serverConfig(t, nil, "--config", typo)
	require.ErrorContains(t, err, `config file `+typo+` (--config): line 2 is not a setting of any command`)
	// One file serves every command: a worker's setting is not the
	// server's, and the server skips it.
	shared := filepath.Join(t.TempDir(), "shared.conf")
	require.NoError(t, os.WriteFile(shared, []byte("prefix p\nconcurrency 3\n"), 0o600))
	cfg, err = serverConfig(t, nil, "--config", shared)
	require.NoError(t, err)
	require.Equal(t, "p", cfg.Prefix)

	// A flag read from the command line only is refused in the file.
	local := filepath.Join(t.TempDir(), "local.conf")
	require.NoError(t, os.WriteFile(local, []byte("json true\n"), 0o600))
	code, _, errOut := runCLI(t, nil, "status", "ID", "--config", local)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "json cannot be set in a config file")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `^warren \S+\ncommit \S+.*\ngo1\.\d+`, out)
	}
	code, out, _ := runCLI(t, nil, "version", "--json")
	require.Equal(t, 0, code)
	var v buildVersion
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.True(t, strings.HasPrefix(v.GoVersion, "go1."), v.GoVersion)
	require.NotEmpty(t, v.Version)
	require.NotEmpty(t, v.Revision)
}

// Help is on stdout with status 0; usage lines name the positional
// arguments; mistakes are one line on stderr with status 2.
func TestHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, 0, code, "%v", args)
		require.Empty(t, errOut)
		require.Contains(t, out, "Exit status: 0 success")
	}
	for cmd, use := range map[string]string{
		"status": "Usage: warren status ID [flags]", "tasks": "Usage: warren tasks ID [flags]",
		"result": "Usage: warren result ID [flags]", "cancel": "Usage: warren cancel ID [flags]",
		"submit": "Usage: warren submit [FILE|-] [flags]", "completion": "Usage: warren completion bash|zsh [flags]",
	} {
		code, out, _ := runCLI(t, nil, "help", cmd)
		require.Equal(t, 0, code, cmd)
		require.Contains(t, out, use, cmd)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `warren: unknown command "frobnicate"`},
		{[]string{"status", "--bogus", "x"}, "warren status: unknown flag --bogus"},
		{[]string{"status"}, "want exactly one job id, got 0 arguments"},
		{[]string{"list", "--limit", "many"}, `warren list: --limit: "many" is not a whole number`},
		{[]string{"list", "--state", "done"}, `--state: "done" is not a job state`},
		{[]string{"tasks", "ID", "--state", "done"}, `--state: "done" is not a task state`},
		{[]string{"dlq"}, "missing subcommand"},
		{[]string{"dlq", "drop"}, `unknown subcommand "drop"`},
		{[]string{"dlq", "purge"}, "dlq purge needs --job ID, --settled or --all"},
		{[]string{"dlq", "purge", "--all", "--job", "x"}, "dlq purge needs --job ID, --settled or --all"},
		{[]string{"dlq", "purge", "--all", "--settled"}, "(and --all alone)"},
		{[]string{"completion", "fish"}, "want bash or zsh"},
		{[]string{"help", "a", "b"}, "want one command"},
		{[]string{"status", "ID", "--server", "ftp://user:pw@h/"}, "--server: ftp://user:xxxxx@h/ is not an http:// or https:// URL"},
		{[]string{"server", "--max-body", "-1"}, "--max-body must be >= 1"},
	} {
		code, out, errOut := runCLI(t, nil, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	code, _, errOut := runCLI(t, nil)
	require.Equal(t, exitUsage, code, "no command is a usage error")
	require.Contains(t, errOut, "Usage: warren <command>")
}

// Client commands find the server through WARREN_SERVER or --server;
// WARREN_LISTEN alone still works, its wildcard host read as loopback.
func TestServerAddressSources(t *testing.T) {
	t.Parallel()
	url, _ := apiServer(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	for _, vars := range []map[string]string{
		{"WARREN_SERVER": url},
		{"WARREN_SERVER": url, "WARREN_LISTEN": "127.0.0.1:1"},
		{"WARREN_LISTEN": "0.0.0.0:" + port},
		{"WARREN_LISTEN": ":" + port},
	} {
		code, out, errOut := runCLI(t, vars, "list", "--json")
		require.Equal(t, 0, code, "%v: %s", vars, errOut)
		require.JSONEq(t, `{"jobs": [], "next_cursor": null}`, out)
	}
	code, _, errOut := runCLI(t, map[string]string{"WARREN_LISTEN": "0.0.0.0:" + port}, "list", "--server", "http://127.0.0.1:1")
	require.Equal(t, exitError, code, "the flag wins")
	require.Contains(t, errOut, "cannot reach the warren server at http://127.0.0.1:1")
}

// completeJob publishes a job's tasks and records every one completed
// with its payload as result, then closes the job as completed.
func completeJob(t *testing.T, st store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := st.RelayBatch(ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	job, err := st.GetJob(ctx, id)
	require.NoError(t, err)
	var outcomes []store.Outcome
	// The tasks started 4 s ago: the job's rate is about its tasks per 4 s.
	started := time.Now().Add(-4 * time.Second)
	for i := int64(1); i <= job.ExpectedTasks; i++ {
		outcomes = append(outcomes, store.Outcome{JobID: id, TaskID: i, State: warren.TaskCompleted, Result: json.RawMessage(fmt.Sprint(i)), Attempts: 1,
			StartedAt: &started})
	}
	_, err = st.ApplyOutcomes(ctx, outcomes)
	require.NoError(t, err)
	job, err = st.GetJob(ctx, id)
	require.NoError(t, err)
	closed, err := st.FinishJob(ctx, id, job.Version, warren.JobCompleted, []byte(`{"sum":3}`), "")
	require.NoError(t, err)
	require.True(t, closed)
}

// submit - reads standard input; submit --json prints the job; list,
// tasks, result and cancel print tables or, with --json, JSON.
func TestJobCommands(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	vars := map[string]string{"WARREN_SERVER": url}

	code, out, errOut := runCLIStdin(t, vars, `{"type":"echo","tasks":[1,2]}`, "submit", "-")
	require.Equal(t, 0, code, errOut)
	first := strings.TrimSpace(out)
	code, out, errOut = runCLIStdin(t, vars, "{\"type\":\"wordcount\"}\n\"a b\"\n", "submit", "--json")
	require.Equal(t, 0, code, errOut)
	var created client.Job
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	require.Equal(t, "wordcount", created.Type)
	require.Equal(t, int64(1), created.ExpectedTasks)
	second := created.ID
	code, out, errOut = runCLIStdin(t, vars, `{"type":"echo","tasks":[3]}`, "submit")
	require.Equal(t, 0, code, errOut)
	third := strings.TrimSpace(out)

	completeJob(t, st, first)

	code, out, errOut = runCLI(t, vars, "list")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^ID\s+TYPE\s+STATE\s+FINISHED\s+FAILED\s+RATE\s+CREATED$`, out)
	require.Regexp(t, `(?m)^`+first+`\s+echo\s+completed\s+2/2\s+0\s+0\.[45]\d/s\s+`, out, "2 tasks finished over the 4 s since the first started")
	require.Regexp(t, `(?m)^`+third+`\s+echo\s+\w+\s+0/1\s+0\s+-\s+`, out, "no rate before a task finished")
	require.Equal(t, 4, strings.Count(out, "\n"))

	var list client.JobList
	code, out, _ = runCLI(t, vars, "list", "--json", "--state", "completed")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Jobs, 1)
	require.Equal(t, first, list.Jobs[0].ID)

	code, out, _ = runCLI(t, vars, "list", "--json", "--type", "wordcount")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Jobs, 1)
	require.Equal(t, second, list.Jobs[0].ID)

	// Paging: one job, a cursor, and the rest from the cursor.
	code, out, errOut = runCLI(t, vars, "list", "--json", "--limit", "1")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Jobs, 1)
	require.Equal(t, third, list.Jobs[0].ID, "newest first")
	require.NotNil(t, list.NextCursor)
	code, out, _ = runCLI(t, vars, "list", "--json", "--cursor", *list.NextCursor, "--limit", "0")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Jobs, 2)
	require.Equal(t, []string{second, first}, []string{list.Jobs[0].ID, list.Jobs[1].ID})
	require.Nil(t, list.NextCursor)
	code, _, errOut = runCLI(t, vars, "list", "--limit", "1")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "more: warren list --cursor ")

	code, out, errOut = runCLI(t, vars, "tasks", first)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^TASK\s+STATE\s+ATTEMPTS\s+WORKER\s+FINISHED\s+ERROR$`, out)
	require.Regexp(t, `(?m)^2\s+completed\s+1\s+`, out)
	var tasks client.TaskList
	code, out, _ = runCLI(t, vars, "tasks", first, "--json", "--state", "completed", "--limit", "1")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &tasks))
	require.Len(t, tasks.Tasks, 1)
	require.JSONEq(t, "1", string(tasks.Tasks[0].Result))
	// completeJob published every open job's tasks.
	code, out, errOut = runCLI(t, vars, "tasks", "--state", "queued", "--json", second)
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &tasks))
	require.Len(t, tasks.Tasks, 1)

	code, out, errOut = runCLI(t, vars, "result", first)
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"sum":3}`, out)
	code, _, errOut = runCLI(t, vars, "result", second)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "its result is available once it is completed")

	code, out, errOut = runCLI(t, vars, "cancel", second)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "job "+second+" is cancelled\n", out)
	code, out, errOut = runCLI(t, vars, "cancel", third, "--json")
	require.Equal(t, 0, code, errOut)
	var cancelled client.Job
	require.NoError(t, json.Unmarshal([]byte(out), &cancelled))
	require.Equal(t, client.JobCancelled, cancelled.State)
	code, _, errOut = runCLI(t, vars, "cancel", third)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "already cancelled")
	code, out, errOut = runCLI(t, vars, "redrive", third, "--json")
	require.Equal(t, exitError, code, "a cancelled job cannot be redriven")
	require.Empty(t, out)
	require.Contains(t, errOut, "cannot be redriven")

	// watch: 0 for a completed job, 1 for a cancelled one, --json.
	code, out, errOut = runCLI(t, vars, "watch", first, "--json")
	require.Equal(t, exitOK, code, errOut)
	var watched client.Job
	require.NoError(t, json.Unmarshal([]byte(out), &watched))
	require.Equal(t, client.JobCompleted, watched.State)
	code, _, errOut = runCLI(t, vars, "watch", third)
	require.Equal(t, exitJobFailed, code)
	require.Contains(t, errOut, "job "+third+" is cancelled")

	code, out, errOut = runCLI(t, vars, "delete", third, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.JSONEq(t, `{"id": "`+third+`", "deleted": true}`, out)
}

// A one-line JSON spec followed by blank lines is one JSON document, not
// the head of an NDJSON stream.
func TestOneLineSpecWithBlankLinesIsJSON(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	c := client.New(url)
	for _, spec := range []string{
		"{\"type\":\"echo\",\"tasks\":[1,2]}\n\n",
		"{\"type\":\"echo\",\"tasks\":[1,2]}\n \r\n\t\n",
		"{\"type\":\"echo\",\"tasks\":[1,2]}\n",
	} {
		sub, err := submitSpec(context.Background(), c, bufio.NewReader(strings.NewReader(spec)), overrides{})
		require.NoError(t, err, "%q", spec)
		job, err := st.GetJob(context.Background(), sub.ID)
		require.NoError(t, err)
		require.Equal(t, int64(2), job.ExpectedTasks, "%q", spec)
	}
	// NDJSON after a blank line is still NDJSON.
	sub, err := submitSpec(context.Background(), c, bufio.NewReader(strings.NewReader("{\"type\":\"echo\"}\n\n1\n2\n3\n")), overrides{})
	require.NoError(t, err)
	job, err := st.GetJob(context.Background(), sub.ID)
	require.NoError(t, err)
	require.Equal(t, int64(3), job.ExpectedTasks)
}

// watch gives up, status 3, when the server stops answering: one that is
// gone (the stream and the polls are refused) and one that accepts
// connections and never answers.
func TestWatchGivesUpOnASilentServer(t *testing.T) {
	t.Parallel()
	gone, _ := net.Listen("tcp", "127.0.0.1:0")
	goneAddr := gone.Addr().String()
	require.NoError(t, gone.Close())
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	for name, addr := range map[string]string{"gone": goneAddr, "silent": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, _, errOut := runCLI(t, nil, "watch", "some-job", "--server", "http://"+addr)
			took := time.Since(start)
			require.Equal(t, exitError, code, errOut)
			require.Contains(t, errOut, "gave up watching job some-job at http://"+addr+": the warren server is not answering (no answer for 1")
			require.Less(t, took, 15*time.Second)
			require.GreaterOrEqual(t, took, watchGiveUp)
		})
	}
}

func TestSecondSignalWithinGraceIsTheSameStop(t *testing.T) {
	t.Parallel()
	first := time.Now()
	require.False(t, isExitSignal(first, first))
	require.False(t, isExitSignal(first, first.Add(999*time.Millisecond)))
	require.True(t, isExitSignal(first, first.Add(time.Second)))
}

// The completion scripts name every command and each command's flags,
// and the shells accept them.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh"} {
		code, out, errOut := runCLI(t, nil, "completion", shell)
		require.Equal(t, 0, code, errOut)
		for _, c := range commands {
			require.Contains(t, out, c.name, shell)
		}
		for _, flag := range []string{"--server", "--amqp-url", "--tls-cert", "--state", "--all", "--ca-cert", "--config"} {
			require.Contains(t, out, flag, shell)
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s is not installed: script syntax not checked", shell)
			continue
		}
		cmd := exec.Command(path, "-n")
		cmd.Stdin = strings.NewReader(out)
		msg, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s -n: %s", shell, msg)
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		// Complete "warren dlq purge --a" and "warren stat".
		_, script, _ := runCLI(t, nil, "completion", "bash")
		cmd := exec.Command(bash, "-c", script+`
COMP_WORDS=(warren dlq purge --a); COMP_CWORD=3; _warren; echo "${COMPREPLY[@]}"
COMP_WORDS=(warren stat); COMP_CWORD=1; _warren; echo "${COMPREPLY[@]}"
COMP_WORDS=(warren server --tls); COMP_CWORD=2; _warren; echo "${COMPREPLY[@]}"`)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "--all\nstatus\n--tls-cert --tls-key\n", string(out))
	}
}
