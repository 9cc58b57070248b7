package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// Ctrl-C stops a client command at once with exit status 130 (SIGTERM:
// 143) and says nothing: no "shutting down" log line, no error. Both a watch that
// follows a job's event stream and a status waiting on a server that
// never answers.
func TestInterruptedClientCommandsExit130Quietly(t *testing.T) {
	t.Parallel()
	url, _ := apiServer(t)
	code, out, errOut := runCLIStdin(t, nil, `{"type":"nobody-runs-this","tasks":[1]}`, "submit", "--server", url)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	// The watch is watching once its event stream is open: the proxy
	// says so.
	streaming := make(chan struct{}, 1)
	target := strings.TrimPrefix(url, "http://")
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			select {
			case streaming <- struct{}{}:
			default:
			}
		}
		r.URL.Scheme, r.URL.Host = "http", target
		r.RequestURI = ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(proxy.Close)

	silent, accepted := silentServer(t)
	silent2, accepted2 := silentServer(t)

	for _, tc := range []struct {
		name    string
		args    []string
		waiting chan struct{}
		sig     syscall.Signal
		want    int
	}{
		{"watch", []string{"watch", id, "--server", proxy.URL}, streaming, syscall.SIGINT, exitInterrupted},
		{"status", []string{"--server", "http://" + silent, "status", id}, accepted, syscall.SIGINT, exitInterrupted},
		{"status, terminated", []string{"status", id, "--server", "http://" + silent2}, accepted2, syscall.SIGTERM, exitTerminated},
	} {
		cmd := exec.Command(warrenBinary(t), tc.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start(), tc.name)
		select {
		case <-tc.waiting:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s never reached the server", tc.name)
		}
		require.NoError(t, cmd.Process.Signal(tc.sig), tc.name)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s did not stop on %v", tc.name, tc.sig)
		}
		require.Equal(t, tc.want, cmd.ProcessState.ExitCode(), "%s: %s", tc.name, stderr.String())
		require.Empty(t, stderr.String(), tc.name)
	}
}

// silentServer accepts connections and never answers; accepted gets a
// token when the first connection arrives.
func silentServer(t *testing.T) (addr string, accepted chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	accepted = make(chan struct{}, 1)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	return l.Addr().String(), accepted
}

// A mistyped command is answered with the command it is closest to, and
// exit status 2; a word near no command gets no guess.
func TestMistypedCommandGetsDidYouMean(t *testing.T) {
	t.Parallel()
	for typo, want := range map[string]string{"wacth": "watch", "stauts": "status", "sbumit": "submit", "lst": "list", "taskss": "tasks", "redrvie": "redrive"} {
		code, out, errOut := runCLI(t, nil, typo, "some-id")
		require.Equal(t, exitUsage, code, typo)
		require.Empty(t, out, typo)
		require.Equal(t, `warren: unknown command "`+typo+`": did you mean "`+want+`"? (run "warren help")`+"\n", errOut, typo)
	}
	code, _, errOut := runCLI(t, nil, "frobnicate")
	require.Equal(t, exitUsage, code)
	require.Equal(t, "warren: unknown command \"frobnicate\" (run \"warren help\")\n", errOut)
	require.Equal(t, 1, editDistance("watch", "wacth"))
	require.Equal(t, 3, editDistance("", "abc"))
	require.Equal(t, 0, editDistance("list", "list"))
}

// Flags may come before the command: "warren --server URL --json status
// ID" is "warren status ID --server URL --json".
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	url, _ := apiServer(t)
	code, out, errOut := runCLIStdin(t, nil, `{"type":"echo","tasks":[1,2,3]}`, "--server", url, "submit")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	code, out, errOut = runCLI(t, nil, "--server="+url, "--json", "status", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"id": "`+id+`"`)
	// dlq reads its subcommand first: the flags still reach it (this
	// server, with no broker, answers that it has no dead-letter queue).
	code, _, errOut = runCLI(t, nil, "--server", url, "--log-level", "warn", "dlq", "list", "--json")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, "this server has no dead-letter queue")

	for _, tc := range []struct{ in, want []string }{
		{[]string{"--json", "list"}, []string{"list", "--json"}},
		{[]string{"--server", "http://h", "watch", "ID"}, []string{"watch", "ID", "--server", "http://h"}},
		{[]string{"--fail-fast", "list", "-q"}, []string{"list", "-q", "--fail-fast"}},
		{[]string{"--token=T", "submit", "--", "-file"}, []string{"submit", "--token=T", "--", "-file"}},
		{[]string{"status", "--json"}, []string{"status", "--json"}},
		{[]string{"--help"}, []string{"--help"}},
	} {
		require.Equal(t, tc.want, hoistGlobalFlags(tc.in), "%v", tc.in)
	}
	code, _, errOut = runCLI(t, nil, "--server", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "flags but no command")
}

// -q prints ids only, one a line: job ids for list, task ids for tasks.
func TestListAndTasksQuiet(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), t.TempDir()+"/w.db")
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h, err := api.New(api.Config{Store: st})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	vars := map[string]string{"WARREN_SERVER": srv.URL}
	var ids []string
	for range 2 {
		code, out, errOut := runCLIStdin(t, vars, `{"type":"echo","tasks":["a","b","c"]}`, "submit")
		require.Equal(t, 0, code, errOut)
		ids = append(ids, strings.TrimSpace(out))
	}
	code, out, errOut := runCLI(t, vars, "list", "-q")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, ids[1]+"\n"+ids[0]+"\n", out) // newest first
	code, out, errOut = runCLI(t, vars, "tasks", ids[0], "-q", "--limit", "2")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "1\n2\n", out)
	for _, cmd := range [][]string{{"list", "-q", "--json"}, {"tasks", ids[0], "-q", "--json"}} {
		code, _, errOut = runCLI(t, vars, cmd...)
		require.Equal(t, exitUsage, code, "%v", cmd)
		require.Contains(t, errOut, "--json and -q: choose one", "%v", cmd)
	}
}

// submit reports a bad spec as the API does, naming the field and the
// byte of the file as written, not a Go type; and nothing is submitted.
func TestSubmitReportsSpecErrorsAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	for _, tc := range []struct{ spec, want string }{
		{`{"type": "echo", "max_retries": "3", "tasks": [1]}`, `warren submit: job spec: max_retries must be an integer, got string (invalid_type)`},
		{`{"type": "echo" "tasks": [1]}`, `warren submit: job spec: malformed JSON at byte 16: invalid character '"' after object key:value pair (invalid_json)`},
		{`{"type": "echo", "task_timeout": "soon", "tasks": [1]}`, `warren submit: job spec: task_timeout: "soon" is not a duration (a number of seconds, or a string such as "30s", "1m", "1h30m") (invalid_type)`},
		{`{"type": "echo", "colour": "blue", "tasks": [1]}`, `warren submit: job spec: unknown field "colour" (unknown_field)`},
		{"{\"type\": \"echo\", \"fail_fast\": 1}\n1\n2\n", `warren submit: job spec: line 1: fail_fast must be a boolean, got number (invalid_type)`},
		{`{"type": "echo", "then": {"type": "echo", "retention": false}, "tasks": [1]}`, `warren submit: job spec: then.retention must be a number of seconds or a duration string such as "30s", got a boolean (invalid_type)`},
	} {
		code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, tc.spec))
		require.Equal(t, exitError, code, tc.spec)
		require.Empty(t, out, tc.spec)
		require.Equal(t, tc.want+"\n", errOut, tc.spec)
	}
	requireNoJobsIn(t, st)
}

// Durations: a spec's task_timeout and retention, and submit's
// --task-timeout and --retention, take "90s" as well as seconds.
func TestSubmitTakesDurations(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	for _, tc := range []struct {
		spec               string
		args               []string
		timeout, retention time.Duration
	}{
		{`{"type": "echo", "task_timeout": "90s", "retention": "1h30m", "tasks": [1]}`, nil, 90 * time.Second, 90 * time.Minute},
		{"{\"type\": \"echo\", \"task_timeout\": \"2m\"}\n1\n2\n", nil, 2 * time.Minute, 0},
		{`{"type": "echo", "task_timeout": 60, "tasks": [1]}`, []string{"--task-timeout", "5m", "--retention", "48h"}, 5 * time.Minute, 48 * time.Hour},
	} {
		args := append([]string{"submit", "--server", url, writeFile(t, tc.spec)}, tc.args...)
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, 0, code, "%s: %s", tc.spec, errOut)
		job, err := st.GetJob(t.Context(), strings.TrimSpace(out))
		require.NoError(t, err)
		require.Equal(t, tc.timeout, job.Policy.TaskTimeout, tc.spec)
		if tc.retention > 0 {
			require.Equal(t, tc.retention, job.Policy.Retention, tc.spec)
		}
	}
	code, _, errOut := runCLI(t, nil, "submit", "--server", url, "--task-timeout", "soon", writeFile(t, `{"type":"echo","tasks":[1]}`))
	require.Equal(t, exitUsage, code)
	require.Equal(t, "warren submit: --task-timeout: \"soon\" is not a duration (like 500ms, 30s, 2m) (see \"warren submit --help\")\n", errOut)
}

// --payloads FILE submits a job of the flags' spec whose tasks are the
// file's payloads: a JSON array, JSON lines, or (--lines) text lines.
func TestSubmitPayloadsFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		lines      bool
		want       []string
	}{
		{"array", "[1, {\"a\": [2,\n 3]},\n \"x\"]\n", false, []string{`1`, `{"a":[2,3]}`, `"x"`}},
		{"one-line array", `[[1], [2]]`, false, []string{`[1]`, `[2]`}},
		{"json lines", "{\"n\": 1}\n\n[2]\n\"three\"\n", false, []string{`{"n": 1}`, `[2]`, `"three"`}},
		{"json lines of arrays", "[1]\n[2]\n", false, []string{`[1]`, `[2]`}},
		{"text lines", "hello world\r\n\n  spaced \"quoted\"\nlast", true, []string{`"hello world"`, `"  spaced \"quoted\""`, `"last"`}},
	} {
		url, st := apiServer(t)
		path := writeFile(t, tc.file)
		args := []string{"--server", url, "submit", "--type", "echo", "--payloads", path}
		if tc.lines {
			args = append(args, "--lines")
		}
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, 0, code, "%s: %s", tc.name, errOut)
		id := strings.TrimSpace(out)
		job, err := st.GetJob(t.Context(), id)
		require.NoError(t, err, tc.name)
		require.Equal(t, "echo", job.Type, tc.name)
		require.Equal(t, int64(len(tc.want)), job.ExpectedTasks, tc.name)
		require.Equal(t, tc.want, payloadsOf(t, st), tc.name)
	}

	// A payload that is not JSON stops the upload: nothing is created.
	url2, st2 := apiServer(t)
	for _, tc := range []struct{ file, want string }{
		{"{\"n\": 1}\n{\"n\": \n", "line 2 is not one JSON value"},
		{"[1, 2, }", "payload 3: invalid character '}' looking for beginning of value"},
		{"[1, 2] 3", "more after the array of payloads, which ends at byte 6"},
	} {
		path := writeFile(t, tc.file)
		code, out, errOut := runCLI(t, nil, "submit", "--server", url2, "--type", "echo", "--payloads", path)
		require.Equal(t, exitError, code, tc.file)
		require.Empty(t, out, tc.file)
		require.Contains(t, errOut, "warren submit: "+path+": "+tc.want, tc.file)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
	code, _, errOut := runCLI(t, nil, "submit", "--server", url2, "--type", "echo", "--payloads", writeFile(t, "a\n\xff\n"), "--lines")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "line 2 is not UTF-8 text")
	requireNoJobsIn(t, st2)

	for _, args := range [][]string{
		{"--payloads", "f", "spec.json", "--type", "echo"},
		{"--lines"},
		{"--payloads", "f"},
	} {
		code, _, errOut := runCLI(t, nil, append([]string{"submit", "--server", url2}, args...)...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
}

// requireNoJobsIn checks that st holds no job.
func requireNoJobsIn(t *testing.T, st store.Store) {
	t.Helper()
	jobs, _, err := st.ListJobs(t.Context(), store.ListJobsOpts{})
	require.NoError(t, err)
	require.Empty(t, jobs)
}

// payloadsOf returns the payloads of the tasks in st's outbox, the one
// job's, in task id order, leaving them unpublished.
func payloadsOf(t *testing.T, st store.Store) []string {
	t.Helper()
	var got []string
	_, err := st.RelayBatch(t.Context(), 100, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		for _, task := range tasks {
			got = append(got, string(task.Payload))
		}
		return nil, nil
	})
	require.NoError(t, err)
	return got
}

// Bash completion completes job ids from the server (the one the line
// names with --server), quietly none when it does not answer, and the
// values of enum flags; the command may follow flags.
func TestCompletionOfJobIDsAndValues(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err, "the completion test runs the script in bash")
	url, _ := apiServer(t)
	code, out, errOut := runCLIStdin(t, nil, `{"type":"echo","tasks":[1]}`, "submit", "--server", url)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	_, script, _ := runCLI(t, nil, "completion", "bash")
	bin := warrenBinary(t)
	gone := "http://" + freeAddr(t)
	cmd := exec.Command(bash, "-c", script+`
show() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=(); _warren; echo "${COMPREPLY[*]}"; }
show "$BIN" status --server "$URL" ""
show "$BIN" --server "$URL" watch "${ID:0:4}"
show "$BIN" status --server "$GONE" ""
show "$BIN" list --state c
show "$BIN" tasks ID --state q
show "$BIN" --log-level w
show "$BIN" submit --log-level w
show "$BIN" submit --reduce s
show "$BIN" --server "$URL" wat`)
	cmd.Env = append(cmd.Environ(), "BIN="+bin, "URL="+url, "GONE="+gone, "ID="+id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.Empty(t, stderr.String())
	require.Equal(t, strings.Join([]string{id, id, "", "completed cancelled", "queued", "warn", "warn", "sum", "watch"}, "\n")+"\n", stdout.String())
}
