package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/server"
)

// clientFlags are the settings of the commands that talk to a server.
type clientFlags struct {
	server string
	token  string
	caCert string
	fs     *flagSet
}

// defaultServer is the server client commands talk to by default.
const defaultServer = "http://" + server.DefaultListen

// watchGiveUp is how long watch waits for a server that does not answer.
const watchGiveUp = 10 * time.Second

func (f *clientFlags) register(fs *flagSet) {
	f.fs = fs
	fs.StringVar(&f.server, "server", defaultServer, "the warren server's base `URL`, http:// or https:// (without WARREN_SERVER, WARREN_LISTEN: http:// and that address)")
	fs.envVar("server", "WARREN_SERVER")
	fs.envFuncs["server"] = serverFromListen
	fs.StringVar(&f.token, "token", "", "API token (without WARREN_TOKEN, the first of WARREN_API_TOKENS)")
	fs.envVar("token", "WARREN_TOKEN")
	fs.envFuncs["token"] = tokenFromServerTokens
	fs.StringVar(&f.caCert, "ca-cert", "", "trust the certificate authorities in the PEM `FILE` for an https:// server, instead of the system's")
	fs.secretFlags("token")
}

// serverFromListen is the server client commands use when WARREN_SERVER
// is not set but WARREN_LISTEN is (a shell set up for `warren server`,
// before WARREN_SERVER existed): http:// and that address, its wildcard
// host (0.0.0.0, ::, none) read as loopback.
func serverFromListen(getenv func(string) string) (string, string) {
	listen := getenv("WARREN_LISTEN")
	if listen == "" {
		return "", ""
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", ""
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), "WARREN_LISTEN"
}

// tokenFromServerTokens is the first of WARREN_API_TOKENS, when
// WARREN_TOKEN is not set: a shell set up for the server is one for its
// client too.
func tokenFromServerTokens(getenv func(string) string) (string, string) {
	if tokens, err := server.ParseTokens(getenv("WARREN_API_TOKENS")); err == nil && len(tokens) > 0 {
		return tokens[0].Value, "WARREN_API_TOKENS"
	}
	return "", ""
}

// client returns a client of --server; its errors name the flag or
// variable they come from, and never show a password.
func (f *clientFlags) client(opts ...client.Option) (*client.Client, error) {
	base := f.server
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("%s: %s is not an http:// or https:// URL", f.fs.from("server"), redactURL(base))
	}
	opts = append([]client.Option{client.WithToken(f.token)}, opts...)
	if f.caCert != "" {
		pool, err := client.LoadCAFile(f.caCert)
		if err != nil {
			return nil, usageErrorf("%s: %v", f.fs.from("ca-cert"), err)
		}
		opts = append(opts, client.WithRootCAs(pool))
	}
	return client.New(base, opts...), nil
}

// jobCommand parses the arguments of a client command about one job: the
// client flags, the flags define adds (nil: none), and the job's id. It
// returns the id and a client made with opts.
func jobCommand(name, summary string, args []string, env *environment, define func(*flagSet), opts ...client.Option) (string, *client.Client, error) {
	var cf clientFlags
	fs := newFlagSet(name, summary, env)
	cf.register(fs)
	if define != nil {
		define(fs)
	}
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return "", nil, err
	}
	c, err := cf.client(opts...)
	if err != nil {
		return "", nil, err
	}
	return id, c, nil
}

// jsonFlag defines the command-line-only flag --json with usage.
func jsonFlag(fs *flagSet, usage string) *bool {
	asJSON := fs.Bool("json", false, usage)
	fs.localFlags("json")
	return asJSON
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

// printRawJSON writes a JSON document indented.
func printRawJSON(w io.Writer, raw []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, out.String())
	return err
}

func runStatus(ctx context.Context, args []string, env *environment) error {
	var asJSON *bool
	id, c, err := jobCommand("status", "Show a job's status.", args, env, func(fs *flagSet) {
		asJSON = jsonFlag(fs, "print the job object as the API returns it")
	})
	if err != nil {
		return err
	}
	if *asJSON {
		raw, err := c.GetRaw(ctx, id)
		if err != nil {
			return err
		}
		return printRawJSON(env.stdout, raw)
	}
	job, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	printStatus(env.stdout, job)
	return nil
}

func printStatus(w io.Writer, j client.Job) {
	fmt.Fprintf(w, "job       %s (%s)\n", j.ID, j.Type)
	fmt.Fprintf(w, "state     %s\n", j.State)
	if j.Error != "" {
		fmt.Fprintf(w, "why       %s\n", j.Error)
	}
	fmt.Fprintf(w, "tasks     %d expected: %d finished (%d completed, %d failed), %d pending\n",
		j.ExpectedTasks, j.CompletedTasks+j.FailedTasks, j.CompletedTasks, j.FailedTasks, j.PendingTasks)
	if j.SpawnedTasks > 0 {
		fmt.Fprintf(w, "spawned   %d of the expected tasks were spawned by its tasks\n", j.SpawnedTasks)
	}
	if j.Paused && j.PausedAt != nil && !j.Terminal() {
		fmt.Fprintf(w, "paused    since %s: no new task starts until `warren resume %s`\n", j.PausedAt.Format("2006-01-02 15:04:05.000Z07:00"), j.ID)
	}
	if j.Waiting != nil && !j.Terminal() && !j.Paused {
		fmt.Fprintf(w, "waiting   %s\n", waitingText(*j.Waiting, time.Now()))
	}
	tolerated := "any" // only the percent limits
	if j.ToleratedFailures != nil {
		tolerated = strconv.FormatInt(*j.ToleratedFailures, 10)
	}
	reduce := j.Reduce
	if rt := j.ReduceTask; rt != nil {
		reduce = "task:" + rt.Task
		if rt.Queue != "" {
			reduce += "@" + rt.Queue
		}
	}
	fmt.Fprintf(w, "policy    reduce=%s max_retries=%d tolerated_failures=%s tolerated_failure_percent=%g fail_fast=%t\n",
		reduce, j.MaxRetries, tolerated, j.ToleratedFailurePercent, j.FailFast)
	if j.ReduceState != "" {
		fmt.Fprintf(w, "reduce    task 0 %s\n", j.ReduceState)
	}
	if j.MaxConcurrency > 0 {
		fmt.Fprintf(w, "cap       at most %d tasks at once\n", j.MaxConcurrency)
	}
	if j.CreatedAt != nil {
		fmt.Fprintf(w, "created   %s\n", j.CreatedAt.Format("2006-01-02 15:04:05.000Z07:00"))
	}
	if j.PublishedAt != nil {
		fmt.Fprintf(w, "published %s (every task out to the broker)\n", j.PublishedAt.Format("2006-01-02 15:04:05.000Z07:00"))
	}
	if j.StartedAt != nil {
		fmt.Fprintf(w, "started   %s (the first task's start)\n", j.StartedAt.Format("2006-01-02 15:04:05.000Z07:00"))
	}
	fmt.Fprintf(w, "rate      %s%s\n", rateText(j.Rate), rateSpan(j))
	if j.FinishedAt != nil && j.CreatedAt != nil {
		fmt.Fprintf(w, "finished  %s (%s after creation)\n", j.FinishedAt.Format("2006-01-02 15:04:05.000Z07:00"), j.FinishedAt.Sub(*j.CreatedAt).Round(1e6))
	}
	if j.ResultURL != nil {
		fmt.Fprintf(w, "result    %s\n", *j.ResultURL)
	}
	switch {
	case j.Retention == nil:
		fmt.Fprintf(w, "retention forever\n")
	case j.ExpiresAt != nil:
		fmt.Fprintf(w, "retention %s: deleted after %s\n", seconds(*j.Retention), j.ExpiresAt.Format("2006-01-02 15:04:05.000Z07:00"))
	default:
		fmt.Fprintf(w, "retention %s once it closes\n", seconds(*j.Retention))
	}
	printChain(w, j)
	for _, e := range j.Errors {
		fmt.Fprintf(w, "error     task %d: %s\n", e.TaskID, e.Error)
	}
}

// rateSpan says what j's rate measured: " over 7.3s" from the first
// start to the close, " over 3s, the last finish 5s ago" while it runs,
// "" while there is no rate.
func rateSpan(j client.Job) string {
	if j.Rate == nil || j.StartedAt == nil {
		return ""
	}
	if j.FinishedAt != nil {
		return fmt.Sprintf(" over %s", j.FinishedAt.Sub(*j.StartedAt).Round(time.Millisecond))
	}
	if j.LastFinishedAt == nil {
		return ""
	}
	return fmt.Sprintf(" over %s, the last finish %s ago", j.LastFinishedAt.Sub(*j.StartedAt).Round(time.Millisecond),
		max(time.Since(*j.LastFinishedAt), 0).Round(time.Second))
}

// printChain prints where j stands in its chain of follow-up jobs: the
// job that started it, the follow-up it started or will start.
func printChain(w io.Writer, j client.Job) {
	if j.PreviousJob != "" {
		fmt.Fprintf(w, "previous  %s\n", j.PreviousJob)
	}
	switch {
	case j.NextJob != "":
		fmt.Fprintf(w, "next      %s\n", j.NextJob)
	case j.Then != nil && !j.State.Terminal():
		fmt.Fprintf(w, "then      %s, once this job completes (%d more %s in the chain)\n", j.Then.Type, j.Then.Remaining, plural(j.Then.Remaining, "job", "jobs"))
	case j.Then != nil:
		fmt.Fprintf(w, "then      %s: not started, the job %s\n", j.Then.Type, j.State)
	}
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func runWatch(ctx context.Context, args []string, env *environment) error {
	var asJSON *bool
	id, c, err := jobCommand("watch", "Show a job's progress until it closes. Exits 0 if the job completed, 1 if it failed or was cancelled,\n"+
		"3 if the server did not answer for 10 s. Follows the job's event stream, or polls a server without one.\n"+
		"A job with follow-ups (then) is followed along its chain: each stage is shown as it closes, and the exit\n"+
		"status is the last job's.", args, env, func(fs *flagSet) {
		asJSON = jsonFlag(fs, "print no progress, then the last closed job of the chain as JSON")
	}, client.WithGiveUpAfter(watchGiveUp))
	if err != nil {
		return err
	}
	var job client.Job
	for {
		update := func(client.Job) {}
		bar := newProgress(env.stdout)
		if !*asJSON {
			update = bar.update
		}
		job, err = c.Watch(ctx, id, update)
		bar.finish()
		if errors.Is(err, client.ErrUnreachable) {
			return fmt.Errorf("gave up watching job %s at %s: %v", id, redactURL(c.BaseURL()), err)
		}
		if err != nil {
			return err
		}
		if job.State != client.JobCompleted || job.NextJob == "" {
			break
		}
		if !*asJSON {
			printStatus(env.stdout, job)
			fmt.Fprintf(env.stdout, "\nfollowing job %s, its follow-up\n", job.NextJob)
		}
		id = job.NextJob
	}
	if *asJSON {
		if err := printJSON(env.stdout, job); err != nil {
			return err
		}
	} else {
		printStatus(env.stdout, job)
	}
	return jobOutcome(job)
}

// jobOutcome is nil for a completed job, else a jobFailed (exit status 1).
func jobOutcome(job client.Job) error {
	if job.State == client.JobCompleted {
		return nil
	}
	return &jobFailed{fmt.Sprintf("job %s is %s", job.ID, job.State)}
}

// jobFailed says a job failed or was cancelled: exit status 1.
type jobFailed struct{ msg string }

func (e *jobFailed) Error() string { return e.msg }

// seconds is a number of seconds as a duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

func runDelete(ctx context.Context, args []string, env *environment) error {
	var asJSON *bool
	id, c, err := jobCommand("delete", "Delete a closed job now, whatever its retention, with its tasks, results and idempotency key.\nAn open job is refused: cancel it first.", args, env, func(fs *flagSet) {
		asJSON = jsonFlag(fs, `print {"id": ID, "deleted": true}`)
	})
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, id); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, map[string]any{"id": id, "deleted": true})
	}
	fmt.Fprintf(env.stdout, "job %s deleted\n", id)
	return nil
}
