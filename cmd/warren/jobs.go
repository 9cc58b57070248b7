package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
}

func (f *clientFlags) register(fs *flag.FlagSet, env *environment) {
	fs.StringVar(&f.server, "server", "http://"+orDefault(env.getenv("WARREN_LISTEN"), server.DefaultListen),
		"warren server URL (default from env WARREN_LISTEN)")
	fs.StringVar(&f.token, "token", defaultToken(env), "API token (env WARREN_TOKEN, else the first of WARREN_API_TOKENS)")
}

func defaultToken(env *environment) string {
	if t := env.getenv("WARREN_TOKEN"); t != "" {
		return t
	}
	if tokens, err := server.ParseTokens(env.getenv("WARREN_API_TOKENS")); err == nil && len(tokens) > 0 {
		return tokens[0].Value
	}
	return ""
}

func (f *clientFlags) client() *client.Client {
	server := f.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return client.New(server, client.WithToken(f.token))
}

// parseWithID parses flags that may come before or after one positional
// job id, and returns the id.
func parseWithID(fs *flag.FlagSet, args []string, env *environment) (string, error) {
	fs.SetOutput(env.stderr)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", err
			}
			return "", errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintf(env.stderr, "warren %s: want exactly one job id, got %d arguments\n", fs.Name(), len(positional))
		return "", errUsage
	}
	return positional[0], applyLogFlags(fs, env)
}

func runSubmit(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("submit", "Submit a job spec from FILE (or - for standard input, the default): JSON {\"type\", \"tasks\": [...], ...}\nor NDJSON (the spec without tasks on the first line, then one task payload per line). Prints the job id.", env)
	cf.register(fs, env)
	typ := fs.String("type", "", "set the job's type (handler name)")
	reduce := fs.String("reduce", "", "set the job's reducer (collect, sum, concat, merge, none)")
	key := fs.String("idempotency-key", "", "resubmitting with the same key returns the same job")
	fs.SetOutput(env.stderr)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) > 1 {
		fmt.Fprintln(env.stderr, "warren submit: at most one FILE")
		return errUsage
	}
	if err := applyLogFlags(fs, env); err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if len(positional) == 1 && positional[0] != "-" {
		f, err := os.Open(positional[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	sub, err := submitSpec(ctx, cf.client(), bufio.NewReaderSize(in, 1<<20), *typ, *reduce, *key)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, sub.ID)
	return nil
}

// submitSpec reads a JSON or NDJSON job spec from r and submits it. A
// first line that is a whole JSON object followed by more lines is NDJSON
// and is streamed; anything else is one JSON document.
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
	_, peekErr := r.Peek(1)
	if json.Unmarshal(trimmed, &head) == nil && peekErr == nil {
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

// specFrom builds a client.JobSpec from a decoded spec, with the command
// line's overrides. Unknown fields are passed on for the server to judge.
func specFrom(doc map[string]json.RawMessage, typ, reduce, key string) (client.JobSpec, error) {
	if typ != "" {
		doc["type"], _ = json.Marshal(typ)
	}
	if reduce != "" {
		doc["reduce"], _ = json.Marshal(reduce)
	}
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
	spec.IdempotencyKey = key
	return spec, nil
}

func runStatus(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("status", "Show a job's status: warren status ID [--json].", env)
	cf.register(fs, env)
	asJSON := fs.Bool("json", false, "print the job object as the API returns it")
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	c := cf.client()
	if *asJSON {
		raw, err := c.GetRaw(ctx, id)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := json.Indent(&out, raw, "", "  "); err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, out.String())
		return nil
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
	fmt.Fprintf(w, "tasks     %d expected, %d completed, %d failed, %d pending\n", j.ExpectedTasks, j.CompletedTasks, j.FailedTasks, j.PendingTasks)
	tolerated := "any" // only the percent limits
	if j.ToleratedFailures != nil {
		tolerated = strconv.FormatInt(*j.ToleratedFailures, 10)
	}
	fmt.Fprintf(w, "policy    reduce=%s max_retries=%d tolerated_failures=%s tolerated_failure_percent=%g fail_fast=%t\n",
		j.Reduce, j.MaxRetries, tolerated, j.ToleratedFailurePercent, j.FailFast)
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
	for _, e := range j.Errors {
		fmt.Fprintf(w, "error     task %d: %s\n", e.TaskID, e.Error)
	}
}

func runWatch(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("watch", "Show a job's progress until it closes: warren watch ID. Exits 0 only if the job completed.\nFollows the job's event stream, or polls a server without one.", env)
	cf.register(fs, env)
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	bar := newProgress(env.stdout)
	job, err := cf.client().Watch(ctx, id, bar.update)
	bar.finish()
	if err != nil {
		return err
	}
	printStatus(env.stdout, job)
	if job.State != "completed" {
		return fmt.Errorf("job %s is %s", job.ID, job.State)
	}
	return nil
}

// seconds is a number of seconds as a duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

func runDelete(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("delete", "Delete a closed job now, whatever its retention, with its tasks, results and idempotency key: warren delete ID.\nAn open job is refused: cancel it first.", env)
	cf.register(fs, env)
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	if err := cf.client().Delete(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "job %s deleted\n", id)
	return nil
}
