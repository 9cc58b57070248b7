package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/api"
)

// overrides are the settings submit's flags give the spec: each, when
// set, wins over the spec's own field.
type overrides struct {
	typ, reduce, key       string
	taskTimeout, retention time.Duration
}

func runSubmit(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("submit", "Submit a job spec from FILE, or from standard input with - (the default): JSON {\"type\", \"tasks\": [...], ...}\n"+
		"or NDJSON (the spec without tasks on the first line, then one task payload per line). Prints the job id.\n"+
		"Or, with --payloads, no spec at all: the flags (--type, ...) are the spec and the payloads come from a file.\n"+
		"A spec is checked with the API's own decoder before it is sent: an error names the field, or the byte of FILE.\n"+
		"task_timeout and retention take seconds or a duration string (\"90s\", \"1h30m\").", env)
	fs.positional = "[FILE|-]"
	cf.register(fs)
	var o overrides
	fs.StringVar(&o.typ, "type", "", "set the job's type (handler name)")
	fs.StringVar(&o.reduce, "reduce", "", `set the job's reducer (collect, sum, concat, merge, none), or a reduce task a worker runs, as JSON: '{"task": "TYPE"}'`)
	fs.StringVar(&o.key, "idempotency-key", "", "resubmitting with the same key returns the same job")
	fs.DurationVar(&o.taskTimeout, "task-timeout", 0, "set the job's task_timeout (like 90s, 10m)")
	fs.DurationVar(&o.retention, "retention", 0, "set how long the job is kept once it closed (like 1h, 168h)")
	payloads := fs.String("payloads", "", "take the tasks from `FILE` (- for standard input): a JSON array of payloads, or JSON lines (one payload a line); no spec FILE then")
	lines := fs.Bool("lines", false, "with --payloads: each line of the file is one payload, a JSON string of the line's text (empty lines are skipped)")
	asJSON := fs.Bool("json", false, "print the created job, as GET /v1/jobs/{id} returns it, instead of its id")
	fs.localFlags("type", "reduce", "idempotency-key", "task-timeout", "retention", "payloads", "lines", "json")
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) > 1:
		return usageErrorf("at most one FILE (usage: warren submit [FILE|-] [flags])")
	case *payloads != "" && len(positional) > 0:
		return usageErrorf("--payloads takes the tasks from %s: give the job's settings as flags (--type, --reduce, ...), not a spec FILE too", *payloads)
	case *lines && *payloads == "":
		return usageErrorf("--lines reads the file of --payloads: give --payloads FILE")
	case *payloads != "" && o.typ == "":
		return usageErrorf("--payloads needs --type: the job's type, which names the handler that runs the tasks")
	case o.taskTimeout < 0 || o.retention < 0:
		return usageErrorf("--task-timeout and --retention must not be negative")
	}
	if err := applyLogFlags(fs, env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	in, name := env.stdin, "standard input"
	if path := firstOf(*payloads, positional); path != "" && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, path
	}
	var sub client.Submitted
	if *payloads != "" {
		sub, err = submitPayloads(ctx, c, bufio.NewReaderSize(in, 1<<20), name, *lines, o)
	} else {
		sub, err = submitSpec(ctx, c, bufio.NewReaderSize(in, 1<<20), o)
	}
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

// firstOf is payloads, else the one positional argument, else "".
func firstOf(payloads string, positional []string) string {
	if payloads != "" {
		return payloads
	}
	if len(positional) == 1 {
		return positional[0]
	}
	return ""
}

// submitSpec reads a JSON or NDJSON job spec from r and submits it. A
// first line that is a whole JSON object followed by more non-blank
// lines is NDJSON and is streamed; anything else (a one-line spec
// followed by blank lines too) is one JSON document. The spec is checked
// as written with the API's decoder first (api.CheckSpec), so that its
// errors are the API's: field names, and bytes of the spec as given.
func submitSpec(ctx context.Context, c *client.Client, r *bufio.Reader, o overrides) (client.Submitted, error) {
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
		if err := api.CheckNDJSONSpec(trimmed); err != nil {
			return client.Submitted{}, fmt.Errorf("job spec: %w", err)
		}
		spec, err := specFrom(head, o)
		if err != nil {
			return client.Submitted{}, err
		}
		return c.SubmitNDJSON(ctx, spec, r)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		return client.Submitted{}, err
	}
	body := append(first, rest...)
	if err := api.CheckSpec(body); err != nil {
		return client.Submitted{}, fmt.Errorf("job spec: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return client.Submitted{}, fmt.Errorf("the job spec is not a JSON object (or NDJSON): %v", err)
	}
	spec, err := specFrom(doc, o)
	if err != nil {
		return client.Submitted{}, err
	}
	return c.Submit(ctx, spec)
}

// submitPayloads submits a job whose spec is the flags' and whose tasks
// are the payloads r holds (name says which file, for errors), streamed
// as NDJSON: r's text lines as strings when lines is true, else r's JSON
// array or JSON lines. A payload that is not JSON stops the upload before
// its end, so the server creates nothing.
func submitPayloads(ctx context.Context, c *client.Client, r *bufio.Reader, name string, lines bool, o overrides) (client.Submitted, error) {
	spec, err := specFrom(map[string]json.RawMessage{}, o)
	if err != nil {
		return client.Submitted{}, err
	}
	convert := jsonPayloads
	if lines {
		convert = textPayloads
	}
	pr, pw := io.Pipe()
	var convErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := bufio.NewWriterSize(pw, 64<<10)
		err := convert(r, w)
		if err == nil {
			err = w.Flush()
		} else if !errors.Is(err, io.ErrClosedPipe) {
			convErr = fmt.Errorf("%s: %w", name, err)
		}
		pw.CloseWithError(err) // nil: the body's end
	}()
	sub, err := c.SubmitNDJSON(ctx, spec, pr)
	pr.CloseWithError(io.ErrClosedPipe) // the server answered: stop converting
	<-done
	if convErr != nil {
		return client.Submitted{}, convErr
	}
	return sub, err
}

// textPayloads writes each non-empty line of r as a JSON string, one a
// line. The line's end (\n or \r\n) is not part of it.
func textPayloads(r *bufio.Reader, w io.Writer) error {
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			if !utf8.Valid(line) {
				return fmt.Errorf("line %d is not UTF-8 text", n)
			}
			if len(line) > 0 {
				s, _ := json.Marshal(string(line))
				if _, werr := w.Write(append(s, '\n')); werr != nil {
					return werr
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// jsonPayloads writes the payloads of r, one a line: r is one JSON array
// of them (on one line, or over many), or JSON lines (one payload a line,
// blank lines skipped). A first line that is a JSON value of its own
// followed by more non-blank lines makes JSON lines, as for submit's
// NDJSON; so a file of one line that is an array is the array's elements.
func jsonPayloads(r *bufio.Reader, w io.Writer) error {
	first, err := r.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	trimmed := bytes.TrimSpace(first)
	if len(trimmed) > 0 && (trimmed[0] != '[' || json.Valid(trimmed) && moreThanBlank(r)) {
		return jsonLines(io.MultiReader(bytes.NewReader(first), r), w)
	}
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(first), r))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return errors.New("not a JSON array of payloads, nor JSON lines")
	}
	var line bytes.Buffer
	for n := 1; dec.More(); n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("payload %d: %v (at byte %d)", n, err, dec.InputOffset())
		}
		line.Reset()
		_ = json.Compact(&line, raw) // raw is valid JSON
		line.WriteByte('\n')
		if _, err := w.Write(line.Bytes()); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("the array of payloads does not end: %v", err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("more after the array of payloads, which ends at byte %d", end)
	}
	return nil
}

// jsonLines copies the non-blank lines of r, each one JSON value.
func jsonLines(r io.Reader, w io.Writer) error {
	lr := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := lr.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if !json.Valid(t) {
				return fmt.Errorf("line %d is not one JSON value", n)
			}
			if _, werr := w.Write(append(t, '\n')); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
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

// durationFields are the spec's fields in seconds, which a spec may give
// as a duration string ("90s") as the API takes them.
var durationFields = []string{"task_timeout", "retention"}

// specFrom builds a client.JobSpec from a decoded spec, with the command
// line's overrides. Unknown fields are passed on for the server to judge.
func specFrom(doc map[string]json.RawMessage, o overrides) (client.JobSpec, error) {
	if o.typ != "" {
		doc["type"], _ = json.Marshal(o.typ)
	}
	if o.taskTimeout > 0 {
		doc["task_timeout"], _ = json.Marshal(o.taskTimeout.Seconds())
	}
	if o.retention > 0 {
		doc["retention"], _ = json.Marshal(o.retention.Seconds())
	}
	for _, f := range durationFields {
		// client.JobSpec holds seconds: a duration string becomes them
		// (api.CheckSpec has checked that it is one).
		var s string
		if raw, ok := doc[f]; ok && json.Unmarshal(raw, &s) == nil {
			d, err := time.ParseDuration(s)
			if err != nil {
				return client.JobSpec{}, fmt.Errorf("job spec: %s: %q is not a duration", f, s)
			}
			doc[f], _ = json.Marshal(d.Seconds())
		}
	}
	switch {
	case strings.HasPrefix(strings.TrimSpace(o.reduce), "{"):
		if !json.Valid([]byte(o.reduce)) {
			return client.JobSpec{}, fmt.Errorf(`--reduce: a reduce task must be a JSON object such as '{"task": "TYPE"}'`)
		}
		doc["reduce"] = json.RawMessage(o.reduce)
	case o.reduce != "":
		doc["reduce"], _ = json.Marshal(o.reduce)
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
	spec.IdempotencyKey = o.key
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
	then, err := specFrom(doc, overrides{})
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
