package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
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

func runSubmit(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("submit", "Submit a job spec from FILE, or from standard input with - (the default): JSON {\"type\", \"tasks\": [...], ...}\n"+
		"or NDJSON (the spec without tasks on the first line, then one task payload per line). Prints the job id.", env)
	fs.positional = "[FILE|-]"
	cf.register(fs)
	typ := fs.String("type", "", "set the job's type (handler name)")
	reduce := fs.String("reduce", "", `set the job's reducer (collect, sum, concat, merge, none), or a reduce task a worker runs, as JSON: '{"task": "TYPE"}'`)
	key := fs.String("idempotency-key", "", "resubmitting with the same key returns the same job")
	asJSON := fs.Bool("json", false, "print the created job, as GET /v1/jobs/{id} returns it, instead of its id")
	fs.localFlags("type", "reduce", "idempotency-key", "json")
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		fmt.Fprintln(env.stderr, "warren submit: at most one FILE (usage: warren submit [FILE|-] [flags])")
		return errUsage
	}
	if err := applyLogFlags(fs, env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var in io.Reader = env.stdin
	if len(positional) == 1 && positional[0] != "-" {
		f, err := os.Open(positional[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	sub, err := submitSpec(ctx, c, bufio.NewReaderSize(in, 1<<20), *typ, *reduce, *key)
	if err != nil {
		return err
	}
	for _, w := range sub.Warnings {
		// The job is submitted: a warning is no failure (exit status 0).
		fmt.Fprintf(env.stderr, "warren submit: warning: %s\n", w)
	}
	if !*asJSON {
		fmt.Fprintln(env.stdout, sub.ID)
		return nil
	}
	raw, err := c.GetRaw(ctx, sub.ID)
	if err != nil {
		return err
	}
	return printRawJSON(env.stdout, raw)
}

// submitSpec reads a JSON or NDJSON job spec from r and submits it. A
// first line that is a whole JSON object followed by more non-blank
// lines is NDJSON and is streamed; anything else (a one-line spec
// followed by blank lines too) is one JSON document.
func submitSpec(ctx context.Context, c *client.Client, r *bufio.Reader, typ, reduce, key string) (client.Submitted, error) {
	first, err := r.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return client.Submitted{}, err
	}
	trimmed := bytes.TrimSpace(first)
	if len(trimmed) == 0 {
		return client.Submitted{}, errors.New("the job spec is empty")
	}
	var head map[string]json.RawMessage
	if json.Unmarshal(trimmed, &head) == nil && moreThanBlank(r) {
		if _, ok := head["tasks"]; ok {
			return client.Submitted{}, errors.New(`NDJSON: the first line is the spec without "tasks"; the tasks follow, one per line`)
		}
		spec, err := specFrom(head, typ, reduce, key)
		if err != nil {
			return client.Submitted{}, err
		}
		return c.SubmitNDJSON(ctx, spec, r)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		return client.Submitted{}, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(append(first, rest...), &doc); err != nil {
		return client.Submitted{}, fmt.Errorf("the job spec is not a JSON object (or NDJSON): %v", err)
	}
	spec, err := specFrom(doc, typ, reduce, key)
	if err != nil {
		return client.Submitted{}, err
	}
	return c.Submit(ctx, spec)
}

// moreThanBlank reports whether r holds more than white space, without
// consuming it: it peeks as far as the white space goes (up to the
// reader's buffer).
func moreThanBlank(r *bufio.Reader) bool {
	for n := 1; n <= r.Size(); n++ {
		b, err := r.Peek(n)
		if len(b) < n || err != nil {
			return false
		}
		switch b[n-1] {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return true
	}
	return true
}

// specFrom builds a client.JobSpec from a decoded spec, with the command
// line's overrides. Unknown fields are passed on for the server to judge.
func specFrom(doc map[string]json.RawMessage, typ, reduce, key string) (client.JobSpec, error) {
	if typ != "" {
		doc["type"], _ = json.Marshal(typ)
	}
	switch {
	case strings.HasPrefix(strings.TrimSpace(reduce), "{"):
		if !json.Valid([]byte(reduce)) {
			return client.JobSpec{}, fmt.Errorf(`-reduce: a reduce task must be a JSON object such as '{"task": "TYPE"}'`)
		}
		doc["reduce"] = json.RawMessage(reduce)
	case reduce != "":
		doc["reduce"], _ = json.Marshal(reduce)
	}
	reduceDoc, thenDoc := doc["reduce"], doc["then"]
	delete(doc, "reduce")
	delete(doc, "then")
	raw, err := json.Marshal(doc)
	if err != nil {
		return client.JobSpec{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec client.JobSpec
	if err := dec.Decode(&spec); err != nil {
		return client.JobSpec{}, fmt.Errorf("job spec: %v", err)
	}
	if err := decodeReduce(reduceDoc, &spec); err != nil {
		return client.JobSpec{}, err
	}
	if spec.Then, err = decodeThen(thenDoc); err != nil {
		return client.JobSpec{}, err
	}
	spec.IdempotencyKey = key
	return spec, nil
}

// decodeThen reads a spec's "then", the follow-up job, as a spec of its
// own (absent or null: none). Its tasks and the rest are the server's to
// judge.
func decodeThen(raw json.RawMessage) (*client.JobSpec, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("job spec: then must be an object, a job spec without tasks: %v", err)
	}
	then, err := specFrom(doc, "", "", "")
	if err != nil {
		return nil, fmt.Errorf("then: %w", err)
	}
	return &then, nil
}

// decodeReduce sets spec's reducer from a spec's "reduce": a name, or a
// reduce task object (absent or null: the server's default).
func decodeReduce(raw json.RawMessage, spec *client.JobSpec) error {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0 || string(t) == "null":
		return nil
	case t[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		spec.ReduceTask = new(client.ReduceTask)
		if err := dec.Decode(spec.ReduceTask); err != nil {
			return fmt.Errorf(`job spec: reduce: %v (a reduce task is {"task": TYPE, "queue": QUEUE, "payload": JSON})`, err)
		}
		return nil
	default:
		if err := json.Unmarshal(t, &spec.Reduce); err != nil {
			return fmt.Errorf(`job spec: reduce must be a reducer's name or an object {"task": TYPE}: %v`, err)
		}
		return nil
	}
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
	fmt.Fprintf(w, "tasks     %d expected, %d completed, %d failed, %d pending\n", j.ExpectedTasks, j.CompletedTasks, j.FailedTasks, j.PendingTasks)
	if j.SpawnedTasks > 0 {
		fmt.Fprintf(w, "spawned   %d of the expected tasks were spawned by its tasks\n", j.SpawnedTasks)
	}
	if j.Waiting != nil && !j.Terminal() {
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
