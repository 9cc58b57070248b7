package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/warrenhq/warren/store"
)

// Submission bodies.
//
// application/json: {"type", "tasks": [...], "reduce", "max_retries",
// "tolerated_failures", "tolerated_failure_percent", "fail_fast",
// "task_timeout", "batch_size", "retention", "metadata", "webhook"}. The fields are read in order with a token walk. When every
// other field comes before "tasks", the job is fully known when its tasks
// start, so they are read one payload at a time, never all in memory.
// When a field may still follow "tasks" (any field not given before it),
// the tasks array is buffered as raw bytes until the object ends (a copy
// bounded by the body limit), and then read. Clients that send large jobs
// should put "tasks" last after every other field, or use NDJSON.
//
// application/x-ndjson: the first line is the job without "tasks", every
// later line one task payload (blank lines are skipped). It is always read
// one line at a time.
//
// The task stream feeds the handler's spool (spool.go), not the store: the
// store is called once the body has ended.
//
// A problem found while the tasks stream (malformed JSON, an empty array,
// the body limit, a task over the per-task limit or nested too deep) is
// yielded by the task iterator. The handler spools the whole stream before
// it calls the store, so such a problem writes nothing.

// parseJSON reads an application/json submission up to its tasks (or, when
// it must, to its end) and returns the job, checked against r, and its task
// stream.
func parseJSON(body io.Reader, r rules) (store.NewJob, iter.Seq2[json.RawMessage, error], *apiError) {
	dec := json.NewDecoder(body)
	if err := expectObject(dec); err != nil {
		return store.NewJob{}, nil, err
	}
	var (
		sp       jobSpec
		seen     = map[string]bool{}
		buffered json.RawMessage // the tasks array, when it could not stream
	)
	for dec.More() {
		key, err := nextKey(dec, seen, true)
		if err != nil {
			return store.NewJob{}, nil, err
		}
		if key != "tasks" {
			if err := decodeField(dec, key, &sp); err != nil {
				return store.NewJob{}, nil, err
			}
			continue
		}
		if len(seen) == len(specFields)+1 { // every field is known: stream
			return streamJSONTasks(dec, sp, seen, r)
		}
		if err := decodeTasksArray(dec, &buffered); err != nil {
			return store.NewJob{}, nil, err
		}
	}
	if err := endObject(dec); err != nil {
		return store.NewJob{}, nil, err
	}
	if buffered == nil {
		return store.NewJob{}, nil, errorf(http.StatusUnprocessableEntity, codeValidation, "tasks is required: a non-empty array of task payloads")
	}
	job, err := sp.newJob(r)
	if err != nil {
		return store.NewJob{}, nil, err
	}
	if emptyArray(buffered) {
		return store.NewJob{}, nil, noTasks()
	}
	dec = json.NewDecoder(bytes.NewReader(buffered))
	_, _ = dec.Token() // '[': buffered is a valid array
	return job, arrayElements(dec, r.maxTaskBytes, nil), nil
}

// streamJSONTasks returns the job of sp and a task stream that reads the
// tasks array from dec, then checks that the body ends with the object.
func streamJSONTasks(dec *json.Decoder, sp jobSpec, seen map[string]bool, r rules) (store.NewJob, iter.Seq2[json.RawMessage, error], *apiError) {
	job, err := sp.newJob(r)
	if err != nil {
		return store.NewJob{}, nil, err
	}
	tok, rerr := dec.Token()
	if rerr != nil {
		return store.NewJob{}, nil, bodyError(rerr)
	}
	if tok == nil {
		return store.NewJob{}, nil, noTasks()
	}
	if tok != json.Delim('[') {
		return store.NewJob{}, nil, errorf(http.StatusBadRequest, codeInvalidType, "tasks must be an array, got %s", tokenKind(tok))
	}
	rest := func() *apiError {
		// Every field was seen before tasks, so any later key is a
		// duplicate or unknown: nextKey says which.
		for dec.More() {
			if _, err := nextKey(dec, seen, true); err != nil {
				return err
			}
		}
		return endObject(dec)
	}
	return job, arrayElements(dec, r.maxTaskBytes, rest), nil
}

// arrayElements yields the elements of the array whose '[' dec has just
// read, then reads its ']' and runs after (when not nil). An empty array,
// malformed JSON, an element that checkTask refuses (over maxTaskBytes, or
// nested too deep), or an error from after is yielded as an error, once,
// and ends the stream.
func arrayElements(dec *json.Decoder, maxTaskBytes int64, after func() *apiError) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		n := 0
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				yield(nil, bodyError(err))
				return
			}
			n++
			if err := checkTask(n, 0, raw, maxTaskBytes); err != nil {
				yield(nil, err)
				return
			}
			if !yield(raw, nil) {
				return
			}
		}
		if _, err := dec.Token(); err != nil { // ']'
			yield(nil, bodyError(err))
			return
		}
		if n == 0 {
			yield(nil, noTasks())
			return
		}
		if after != nil {
			if err := after(); err != nil {
				yield(nil, err)
			}
		}
	}
}

// parseNDJSON reads the job line of an application/x-ndjson submission and
// returns the job, checked against r, and the stream of its task lines.
func parseNDJSON(body io.Reader, r rules) (store.NewJob, iter.Seq2[json.RawMessage, error], *apiError) {
	lines := &lineReader{r: bufio.NewReaderSize(body, 64<<10)}
	head, err := lines.next(0)
	if err == io.EOF {
		return store.NewJob{}, nil, errorf(http.StatusBadRequest, codeInvalidJSON, "empty body: the first line must be the job spec")
	}
	if err != nil {
		return store.NewJob{}, nil, bodyError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(head))
	if err := expectObject(dec); err != nil {
		return store.NewJob{}, nil, lineError(lines.n, err)
	}
	var (
		sp   jobSpec
		seen = map[string]bool{}
	)
	for dec.More() {
		key, err := nextKey(dec, seen, false)
		if err != nil {
			return store.NewJob{}, nil, lineError(lines.n, err)
		}
		if err := decodeField(dec, key, &sp); err != nil {
			return store.NewJob{}, nil, lineError(lines.n, err)
		}
	}
	if err := endObject(dec); err != nil {
		return store.NewJob{}, nil, lineError(lines.n, err)
	}
	job, aerr := sp.newJob(r)
	if aerr != nil {
		return store.NewJob{}, nil, aerr
	}
	tasks := func(yield func(json.RawMessage, error) bool) {
		n := 0
		for {
			line, err := lines.next(r.maxTaskBytes)
			if err == io.EOF {
				break
			}
			if err == errLineTooLong {
				yield(nil, taskTooLarge(n+1, lines.n, -1, r.maxTaskBytes))
				return
			}
			if err != nil {
				yield(nil, bodyError(err))
				return
			}
			if !json.Valid(line) {
				yield(nil, errorf(http.StatusBadRequest, codeInvalidJSON, "line %d is not one JSON value", lines.n))
				return
			}
			n++
			if err := checkTask(n, lines.n, line, r.maxTaskBytes); err != nil {
				yield(nil, err)
				return
			}
			if !yield(line, nil) {
				return
			}
		}
		if n == 0 {
			yield(nil, noTasks())
		}
	}
	return job, tasks, nil
}

// lineReader returns the non-blank lines of an NDJSON body, each in a
// slice of its own, and counts lines (blank ones too) for error messages.
type lineReader struct {
	r *bufio.Reader
	n int // number of the line last returned
}

// errLineTooLong is next's error for a line over its limit.
var errLineTooLong = errors.New("line too long")

// next returns the next non-blank line without its surrounding white
// space, or io.EOF after the last. A line whose bytes, white space around
// them aside, are more than limit (when limit > 0) is errLineTooLong as
// soon as that many are read: it is never held whole.
func (l *lineReader) next(limit int64) ([]byte, error) {
	for {
		line, err := l.readLine(limit)
		if len(line) > 0 || err == errLineTooLong {
			l.n++
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			return trimmed, nil
		}
		if err == io.EOF {
			return nil, io.EOF
		}
	}
}

// readLine returns the rest of the current line, its newline included, in
// a slice of its own, or errLineTooLong once more than limit bytes of it
// (white space around them aside) are read, when limit > 0.
func (l *lineReader) readLine(limit int64) ([]byte, error) {
	var line []byte
	for {
		frag, err := l.r.ReadSlice('\n')
		line = append(line, frag...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
		if limit > 0 && int64(len(bytes.TrimSpace(line))) > limit {
			return nil, errLineTooLong
		}
	}
}

// expectObject reads the '{' that starts a job spec.
func expectObject(dec *json.Decoder) *apiError {
	tok, err := dec.Token()
	if err != nil {
		return bodyError(err)
	}
	if tok != json.Delim('{') {
		return errorf(http.StatusBadRequest, codeInvalidType, "the job spec must be a JSON object, got %s", tokenKind(tok))
	}
	return nil
}

// nextKey reads the next key of the job spec object and records it in
// seen: an unknown key (or "tasks" when tasksAllowed is false) and a key
// given twice are errors.
func nextKey(dec *json.Decoder, seen map[string]bool, tasksAllowed bool) (string, *apiError) {
	tok, err := dec.Token()
	if err != nil {
		return "", bodyError(err)
	}
	key, _ := tok.(string) // the decoder only returns strings as keys
	_, known := specFields[key]
	switch {
	case key == "tasks" && !tasksAllowed:
		return "", errorf(http.StatusBadRequest, codeUnknownField, `unknown field "tasks": in NDJSON the tasks are the lines after the job spec`)
	case !known && key != "tasks":
		return "", errorf(http.StatusBadRequest, codeUnknownField, "unknown field %q", key)
	case seen[key]:
		return "", errorf(http.StatusBadRequest, codeInvalidJSON, "field %q is given twice", key)
	}
	seen[key] = true
	return key, nil
}

// endObject reads the '}' that ends the job spec, then checks that nothing
// but white space follows it.
func endObject(dec *json.Decoder) *apiError {
	if _, err := dec.Token(); err != nil {
		return bodyError(err)
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return nil
	case err != nil:
		return bodyError(err)
	default:
		return errorf(http.StatusBadRequest, codeInvalidJSON, "unexpected data after the job spec object")
	}
}

// decodeField decodes the value of field key into sp.
func decodeField(dec *json.Decoder, key string, sp *jobSpec) *apiError {
	var target any
	switch key {
	case "type":
		target = &sp.Type
	case "reduce":
		return decodeReduce(dec, sp)
	case "max_retries":
		target = &sp.MaxRetries
	case "tolerated_failures":
		target = &sp.ToleratedFailures
	case "tolerated_failure_percent":
		target = &sp.ToleratedFailurePercent
	case "fail_fast":
		target = &sp.FailFast
	case "task_timeout":
		return decodeSeconds(dec, sp.path+key, &sp.TaskTimeout)
	case "batch_size":
		target = &sp.BatchSize
	case "priority":
		target = &sp.Priority
	case "max_concurrency":
		target = &sp.MaxConcurrency
	case "queue":
		target = &sp.Queue
	case "retention":
		return decodeSeconds(dec, sp.path+key, &sp.Retention)
	case "metadata":
		target = &sp.Metadata
	case "webhook":
		return decodeWebhook(dec, sp)
	case "then":
		return decodeThen(dec, sp)
	}
	if err := dec.Decode(target); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return errorf(http.StatusBadRequest, codeInvalidType, "%s must be %s, got %s", key, specFields[key], te.Value)
		}
		return bodyError(err)
	}
	if key == "metadata" {
		switch {
		case string(sp.Metadata) == "null":
			sp.Metadata = nil
		case sp.Metadata[0] != '{':
			return errorf(http.StatusBadRequest, codeInvalidType, "metadata must be an object, got %s", jsonKind(sp.Metadata))
		}
	}
	return nil
}

// decodeSeconds decodes a field that takes seconds, field naming it by its
// path, into *dst: a number of seconds, or a Go duration string ("30s",
// "1m", "1h30m"), which people write more readily than 86400 and which
// the CLI's flags take too. null is absent. Bounds are newJob's.
func decodeSeconds(dec *json.Decoder, field string, dst **float64) *apiError {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err)
	}
	switch raw[0] {
	case 'n':
		*dst = nil
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bodyError(err)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return errorf(http.StatusBadRequest, codeInvalidType, `%s: %q is not a duration (a number of seconds, or a string such as "30s", "1m", "1h30m")`, field, s)
		}
		secs := d.Seconds()
		*dst = &secs
		return nil
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err != nil {
		return errorf(http.StatusBadRequest, codeInvalidType, "%s must be %s, got %s", field, specFields["task_timeout"], jsonKind(raw))
	}
	*dst = &secs
	return nil
}

// decodeReduce decodes the value of "reduce" into sp: a string names a
// reducer the server runs, an object {"task", "queue", "payload"} a reduce
// task a worker runs, and null is absent.
func decodeReduce(dec *json.Decoder, sp *jobSpec) *apiError {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err)
	}
	switch raw[0] {
	case 'n':
		return nil
	case '"':
		if err := json.Unmarshal(raw, &sp.Reduce); err != nil {
			return bodyError(err)
		}
		return nil
	case '{':
		rd := json.NewDecoder(bytes.NewReader(raw))
		rd.DisallowUnknownFields()
		var rt reduceTaskSpec
		if err := rd.Decode(&rt); err != nil {
			return errorf(http.StatusBadRequest, codeInvalidType, `reduce must be a string or an object {"task": string, "queue": string, "payload": any JSON}: %v`, err)
		}
		sp.ReduceTask = &rt
		return nil
	}
	return errorf(http.StatusBadRequest, codeInvalidType, "reduce must be %s, got %s", specFields["reduce"], jsonKind(raw))
}

// decodeWebhook decodes the value of "webhook" into sp: null is absent,
// and anything but an object of "url" and "secret" strings is refused.
func decodeWebhook(dec *json.Decoder, sp *jobSpec) *apiError {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err)
	}
	switch {
	case string(raw) == "null":
		sp.Webhook = nil
		return nil
	case raw[0] != '{':
		return errorf(http.StatusBadRequest, codeInvalidType, "webhook must be %s, got %s", specFields["webhook"], jsonKind(raw))
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	var w webhookSpec
	if err := strict.Decode(&w); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return errorf(http.StatusBadRequest, codeInvalidType, "webhook.%s must be a string, got %s", te.Field, te.Value)
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return errorf(http.StatusBadRequest, codeUnknownField, "unknown field webhook.%s: a webhook has a url and a secret", strings.Trim(field, `"`))
		}
		return bodyError(err)
	}
	sp.Webhook = &w
	return nil
}

// decodeTasksArray decodes the tasks value into *dst, which must be an
// array. null counts as absent, since absent fields and null ones are the
// same everywhere else.
func decodeTasksArray(dec *json.Decoder, dst *json.RawMessage) *apiError {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err)
	}
	switch {
	case string(raw) == "null":
		return noTasks()
	case raw[0] != '[':
		return errorf(http.StatusBadRequest, codeInvalidType, "tasks must be an array, got %s", jsonKind(raw))
	}
	*dst = raw
	return nil
}

// emptyArray reports whether the JSON array a holds no element.
func emptyArray(a json.RawMessage) bool {
	return len(bytes.TrimSpace(a[1:len(a)-1])) == 0
}

// bodyError turns an error from reading or decoding the body into an
// apiError.
func bodyError(err error) *apiError {
	if e, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return tooLarge(e.Limit)
	}
	if e, ok := errors.AsType[*errBodyStalled](err); ok {
		return errorf(http.StatusRequestTimeout, codeTimeout, "%v: the upload is cut", e)
	}
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return errorf(http.StatusBadRequest, codeInvalidJSON, "malformed JSON at byte %d: %v", e.Offset, e)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return errorf(http.StatusBadRequest, codeInvalidType, "%v", e)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(http.StatusBadRequest, codeInvalidJSON, "the body ends before the JSON does")
	}
	return errorf(http.StatusBadRequest, codeInvalidJSON, "reading the body: %v", err)
}

// lineError prefixes an error in an NDJSON body with its line number.
func lineError(line int, e *apiError) *apiError {
	e.message = fmt.Sprintf("line %d: %s", line, e.message)
	return e
}

// tokenKind names the JSON kind of a token from json.Decoder.Token.
func tokenKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// jsonKind names the JSON kind of a valid JSON value.
func jsonKind(v json.RawMessage) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
