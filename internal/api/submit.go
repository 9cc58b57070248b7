package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/spool"
	"github.com/warrenhq/warren/internal/webhooks"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// Media types a submission may have.
const (
	mediaJSON   = "application/json"
	mediaNDJSON = "application/x-ndjson"
)

// maxTypeLen and maxIdempotencyKeyLen bound the strings that travel in
// AMQP short strings or index keys.
const (
	maxTypeLen           = 255
	maxIdempotencyKeyLen = 255
	// maxTaskTimeout bounds task_timeout: a week.
	maxTaskTimeout = 7 * 24 * time.Hour
)

// specFields are the fields of a job spec other than "tasks", with the JSON
// type each must have (for error messages).
var specFields = map[string]string{
	"type":                      "a string",
	"reduce":                    `a string or an object {"task", "queue", "payload"}`,
	"max_retries":               "an integer",
	"tolerated_failures":        "an integer",
	"tolerated_failure_percent": "a number",
	"fail_fast":                 "a boolean",
	"task_timeout":              `a number of seconds or a duration string such as "30s"`,
	"batch_size":                "an integer",
	"priority":                  "an integer",
	"max_concurrency":           "an integer",
	"queue":                     "a string",
	"retention":                 `a number of seconds or a duration string such as "30s"`,
	"metadata":                  "an object",
	"webhook":                   `an object {"url", "secret"}`,
	"then":                      "an object (a job spec without tasks)",
}

// jobSpec is a submitted job without its tasks, as given. nil pointers are
// fields that were absent (or null).
type jobSpec struct {
	Type                    string
	Reduce                  string
	ReduceTask              *reduceTaskSpec
	MaxRetries              *int
	ToleratedFailures       *int64
	ToleratedFailurePercent *float64
	FailFast                bool
	TaskTimeout             *float64
	BatchSize               *int
	Priority                *int
	MaxConcurrency          *int
	Queue                   *string
	Retention               *float64
	Metadata                json.RawMessage
	Webhook                 *webhookSpec
	// Then is the follow-up job (then.go), nil for none.
	Then *jobSpec
	// path is where the spec sits in its chain, "" for the submission
	// itself, "then." for its follow-up: error messages name fields by it.
	path string
}

// reduceTaskSpec is a submission's "reduce" when it is an object: a
// reduce task run by a worker (warren.ReduceTask).
type reduceTaskSpec struct {
	Task    *string         `json:"task"`
	Queue   *string         `json:"queue"`
	Payload json.RawMessage `json:"payload"`
}

// reduceTask checks a reduce task spec and returns it for the store.
func (rt *reduceTaskSpec) reduceTask(r rules) (*warren.ReduceTask, *apiError) {
	invalid := func(format string, args ...any) *apiError {
		return errorf(http.StatusUnprocessableEntity, codeValidation, "reduce: "+format, args...)
	}
	switch {
	case rt.Task == nil || *rt.Task == "":
		return nil, invalid(`"task" is required: it names the reducer's task type, run by a worker`)
	case len(*rt.Task) > maxTypeLen:
		return nil, invalid("task must be at most %d bytes", maxTypeLen)
	case strings.ContainsFunc(*rt.Task, isControl):
		return nil, invalid("task must not contain control characters")
	}
	t := &warren.ReduceTask{Type: *rt.Task}
	if rt.Queue != nil {
		if err := protocol.CheckQueueName(*rt.Queue); err != nil {
			return nil, invalid("queue: %v", err)
		}
		t.Queue = *rt.Queue
	}
	if len(rt.Payload) > 0 && string(rt.Payload) != "null" {
		if int64(len(rt.Payload)) > r.maxTaskBytes {
			return nil, errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "reduce: the payload is %d bytes, over the limit of %d bytes per task",
				len(rt.Payload), r.maxTaskBytes)
		}
		if d := protocol.Depth(rt.Payload); d > protocol.MaxPayloadDepth {
			return nil, invalid("the payload is nested %d levels deep: payloads may nest arrays and objects at most %d levels", d, protocol.MaxPayloadDepth)
		}
		t.Payload = rt.Payload
	}
	return t, nil
}

// webhookSpec is a submission's "webhook", as given.
type webhookSpec struct {
	URL    *string `json:"url"`
	Secret *string `json:"secret"`
}

// submitResponse is the body of a 202.
type submitResponse struct {
	ID        string          `json:"id"`
	State     warren.JobState `json:"state"`
	StatusURL string          `json:"status_url"`
	// Warnings say what may hold the job up (no live worker serves its
	// type on its queue); absent when none.
	Warnings []string `json:"warnings,omitempty"`
}

// submitJob handles POST /v1/jobs.
func (s *server) submitJob(w http.ResponseWriter, r *http.Request) {
	media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (media != mediaJSON && media != mediaNDJSON) {
		writeError(w, errorf(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be %s or %s", mediaJSON, mediaNDJSON))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKeyLen || !validText(key) {
		writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter,
			"Idempotency-Key must be at most %d bytes of UTF-8 without control characters", maxIdempotencyKeyLen))
		return
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		writeError(w, tooLarge(s.cfg.MaxBodyBytes))
		return
	}
	// The digest of the request (its media type and body) goes with an
	// Idempotency-Key, so that a replay with another body is refused.
	digest := sha256.New()
	_, _ = io.WriteString(digest, media+"\n")
	limited := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	body := io.TeeReader(limited, digest)

	var (
		spec  store.NewJob
		tasks iter.Seq2[json.RawMessage, error]
		perr  *apiError
	)
	if media == mediaNDJSON {
		spec, tasks, perr = parseNDJSON(body, s.rules)
	} else {
		spec, tasks, perr = parseJSON(body, s.rules)
	}
	if perr != nil {
		writeError(w, perr)
		return
	}
	spec.IdempotencyKey = key
	if spec.Webhook != nil {
		// Before the tasks are read: a refused webhook reads no further.
		if err := webhooks.CheckURL(r.Context(), spec.Webhook.URL, s.cfg.WebhookAllowPrivate, s.cfg.WebhookLookup); err != nil {
			writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "%v", err))
			return
		}
	}
	for _, hook := range webhooksOf(spec) {
		if err := webhooks.CheckURL(r.Context(), hook.URL, s.cfg.WebhookAllowPrivate, s.cfg.WebhookLookup); err != nil {
			writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "then: %v", err))
			return
		}
	}

	// The whole body is read and checked before the store is called, so
	// that no store connection waits on the client, and bad input writes
	// nothing.
	sp, err := spool.Tasks(limitTasks(tasks, s.cfg.MaxJobTasks))
	if err != nil {
		if e, ok := errors.AsType[*apiError](err); ok {
			writeError(w, e)
			return
		}
		s.log.ErrorContext(r.Context(), "api: spool a submission", "type", spec.Type, "error", err)
		writeError(w, errorf(http.StatusInternalServerError, codeInternal, "internal error"))
		return
	}
	defer sp.Close()
	if key != "" {
		// What the parser left unread (trailing white space) counts too.
		if _, err := io.Copy(io.Discard, body); err != nil {
			writeError(w, bodyError(err))
			return
		}
		spec.RequestHash = hex.EncodeToString(digest.Sum(nil))
	}

	job, created, err := s.createJob(r.Context(), spec, sp)
	if err != nil {
		s.storeError(w, r, err, "create job", "type", spec.Type)
		return
	}
	if created {
		s.cfg.Metrics.jobCreated(job.ExpectedTasks)
		s.log.InfoContext(r.Context(), "api: job submitted", "job_id", job.ID, "type", job.Type, "tasks", job.ExpectedTasks)
		if s.cfg.OnSubmit != nil {
			s.cfg.OnSubmit(job.ID)
		}
	} else {
		s.cfg.Metrics.idempotentReplay()
		s.log.DebugContext(r.Context(), "api: idempotent replay", "job_id", job.ID)
	}
	url := jobURL(job.ID)
	w.Header().Set("Location", url)
	writeJSON(w, http.StatusAccepted, submitResponse{ID: job.ID, State: job.State, StatusURL: url, Warnings: s.submitWarnings(job)})
}

// createJob writes the job of spec and its spooled tasks in a
// warren.job.create span, keeping with the job the trace context of the
// submission's span (ctx's), for the relay to continue.
func (s *server) createJob(ctx context.Context, spec store.NewJob, sp *spool.Spool) (warren.Job, bool, error) {
	saved := spans.Save(ctx)
	spec.TraceParent, spec.TraceState = saved.Parent, saved.State
	submit := trace.SpanFromContext(ctx)
	ctx, span := s.tracer.Start(ctx, spans.JobCreate)
	defer span.End()
	job, created, err := s.cfg.Store.CreateJob(ctx, spec, sp.All())
	spans.Fail(span, err)
	if err == nil && span.IsRecording() {
		attrs := []attribute.KeyValue{spans.JobID.String(job.ID), spans.JobType.String(job.Type)}
		submit.SetAttributes(attrs...)
		span.SetAttributes(append(attrs, spans.TaskCount.Int64(job.ExpectedTasks), attribute.Bool("warren.created", created))...)
	}
	return job, created, err
}

// rules are what a submission is checked against.
type rules struct {
	// reducers are the reducers a job may name.
	reducers *reduce.Registry
	// tiers are the server's retry tiers, which a job's task_timeout must
	// outlast (retryWait).
	tiers []time.Duration
	// maxTaskBytes is the largest task payload accepted.
	maxTaskBytes int64
	// maxMetadataBytes is the largest metadata accepted.
	maxMetadataBytes int64
	// maxJobTasks is the most tasks a job may have (0: no limit), which a
	// follow-up job made from a result is held to too.
	maxJobTasks int64
}

// newJob validates the spec against r and returns it as a store.NewJob
// with the defaults filled in; problems are 422s.
func (sp jobSpec) newJob(r rules) (store.NewJob, *apiError) {
	switch {
	case sp.Type == "":
		return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "type is required: it names the handler that runs the tasks")
	case len(sp.Type) > maxTypeLen:
		return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "type must be at most %d bytes", maxTypeLen)
	case strings.ContainsFunc(sp.Type, isControl):
		return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "type must not contain control characters")
	}
	p := warren.Policy{Reduce: sp.Reduce, MaxRetries: warren.DefaultMaxRetries, FailFast: sp.FailFast}
	switch {
	case sp.ReduceTask != nil:
		rt, err := sp.ReduceTask.reduceTask(r)
		if err != nil {
			return store.NewJob{}, err
		}
		p.ReduceTask = rt
	case p.Reduce == "":
		p.Reduce = reduce.Default
	}
	if _, ok := r.reducers.Lookup(p.Reduce); !ok && p.ReduceTask == nil {
		return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "unknown reducer %q (known: %s; or an object {\"task\": TYPE} for a reduce task run by a worker)",
			p.Reduce, strings.Join(r.reducers.Names(), ", "))
	}
	if sp.MaxRetries != nil {
		p.MaxRetries = *sp.MaxRetries
	}
	p.ToleratedFailures, p.ToleratedFailurePercent = tolerances(sp.ToleratedFailures, sp.ToleratedFailurePercent)
	if sp.TaskTimeout != nil {
		secs := *sp.TaskTimeout
		if !(secs >= 1 && secs <= maxTaskTimeout.Seconds()) {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation,
				"task_timeout must be between 1 and %.0f seconds, got %v", maxTaskTimeout.Seconds(), secs)
		}
		p.TaskTimeout = time.Duration(secs * float64(time.Second))
	}
	if sp.BatchSize != nil {
		if *sp.BatchSize < 1 || *sp.BatchSize > warren.MaxBatchSize {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation,
				"batch_size must be between 1 and %d, got %d", warren.MaxBatchSize, *sp.BatchSize)
		}
		p.BatchSize = *sp.BatchSize
	}
	if sp.Priority != nil {
		if *sp.Priority < warren.MinPriority || *sp.Priority > warren.MaxPriority {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation,
				"priority must be between %d and %d, got %d", warren.MinPriority, warren.MaxPriority, *sp.Priority)
		}
		p.Priority = *sp.Priority
	}
	if sp.MaxConcurrency != nil {
		if *sp.MaxConcurrency < 1 || *sp.MaxConcurrency > warren.MaxConcurrencyLimit {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation,
				"max_concurrency must be between 1 and %d, got %d", warren.MaxConcurrencyLimit, *sp.MaxConcurrency)
		}
		p.MaxConcurrency = *sp.MaxConcurrency
	}
	if sp.Queue != nil {
		if err := protocol.CheckQueueName(*sp.Queue); err != nil {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "queue: %v", err)
		}
		if *sp.Queue != protocol.DefaultQueue {
			p.Queue = *sp.Queue
		}
	}
	if sp.Retention != nil {
		secs := *sp.Retention
		if !(secs >= 1 && secs <= warren.MaxRetention.Seconds()) {
			return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation,
				"retention must be between 1 and %.0f seconds (100 years), got %v", warren.MaxRetention.Seconds(), secs)
		}
		p.Retention = time.Duration(secs * float64(time.Second))
	}
	if err := p.Validate(); err != nil {
		return store.NewJob{}, errorf(http.StatusUnprocessableEntity, codeValidation, "%v", err)
	}
	if err := checkRetryWait(p, sp.TaskTimeout != nil, r.tiers); err != nil {
		return store.NewJob{}, err
	}
	if err := checkMetadata(sp.Metadata, r.maxMetadataBytes); err != nil {
		return store.NewJob{}, err
	}
	webhook, err := sp.Webhook.webhook()
	if err != nil {
		return store.NewJob{}, err
	}
	then, err := sp.followUp(r)
	if err != nil {
		return store.NewJob{}, err
	}
	return store.NewJob{Type: sp.Type, Policy: p, Metadata: sp.Metadata, Webhook: webhook, Then: then}, nil
}

// checkMetadata refuses metadata over max bytes (413) or nested deeper
// than a payload may be (422): a job's metadata is shown with every read
// of the job, by the CLI, the dashboard and clients in any language,
// whose JSON parsers have depth limits of their own.
func checkMetadata(md json.RawMessage, max int64) *apiError {
	if int64(len(md)) > max {
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge,
			"metadata is %d bytes, over the limit of %d bytes (WARREN_MAX_METADATA_BYTES): keep large data elsewhere, with a reference in the metadata", len(md), max)
	}
	if d := protocol.Depth(md); d > protocol.MaxPayloadDepth {
		return errorf(http.StatusUnprocessableEntity, codeValidation,
			"metadata is nested %d levels deep, more than the %d a payload may be", d, protocol.MaxPayloadDepth)
	}
	return nil
}

// webhook checks the form of a submission's webhook (an absolute http or
// https URL, a secret of 1 to store.MaxWebhookSecretBytes bytes) and
// returns it for the store; nil for none. Where its URL goes is checked
// by the handler (webhooks.CheckURL), which may resolve its name.
func (w *webhookSpec) webhook() (*store.Webhook, *apiError) {
	if w == nil {
		return nil, nil
	}
	bad := func(format string, args ...any) *apiError {
		return errorf(http.StatusBadRequest, codeInvalidParameter, format, args...)
	}
	switch {
	case w.URL == nil:
		return nil, bad(`webhook.url is required: the http:// or https:// URL warren POSTs to when the job closes`)
	case len(*w.URL) > store.MaxWebhookURLBytes:
		return nil, bad("webhook.url must be at most %d bytes", store.MaxWebhookURLBytes)
	case !validText(*w.URL):
		return nil, bad("webhook.url must be UTF-8 without control characters")
	case w.Secret == nil || *w.Secret == "":
		return nil, bad("webhook.secret is required: warren signs each delivery's body with it (X-Warren-Signature)")
	case len(*w.Secret) > store.MaxWebhookSecretBytes:
		return nil, bad("webhook.secret must be 1 to %d bytes, got %d", store.MaxWebhookSecretBytes, len(*w.Secret))
	case !utf8.ValidString(*w.Secret) || strings.ContainsRune(*w.Secret, 0):
		return nil, bad("webhook.secret must be UTF-8 without NUL")
	}
	if _, err := webhooks.ParseURL(*w.URL); err != nil {
		return nil, bad("%v", err)
	}
	return &store.Webhook{URL: *w.URL, Secret: *w.Secret}, nil
}

// tolerances returns the policy's tolerances for the count and percent a
// job gave (nil when not given), with the meaning of AWS Step Functions: a
// tolerance that is not given does not limit, both given must both hold,
// and neither tolerates no failure. What does not limit is stored as a
// value that warren.Policy.Tolerates reads as such: percent 100, count
// warren.UnlimitedFailures.
func tolerances(count *int64, percent *float64) (int64, float64) {
	switch {
	case count == nil && percent == nil:
		return 0, 0
	case count == nil:
		return warren.UnlimitedFailures, *percent
	case percent == nil:
		return *count, 100
	}
	return *count, *percent
}

// retryWait returns the longest a task of a job with maxRetries may wait
// in the retry tiers between its runs: its nth retry waits in the nth
// tier, every retry past the last tier in the last.
func retryWait(maxRetries int, tiers []time.Duration) time.Duration {
	var wait time.Duration
	for n := 1; n <= maxRetries; n++ {
		wait += tiers[protocol.RetryTier(n, len(tiers))]
	}
	return wait
}

// checkRetryWait refuses a policy whose task timeout does not outlast the
// retry delays its tasks may wait: the timeout runs from a task's last
// publish, and a retry waiting in a tier is not republished, so the
// reconciler would take a task that is only waiting for its next run for
// lost. given says whether the job gave its task_timeout.
func checkRetryWait(p warren.Policy, given bool, tiers []time.Duration) *apiError {
	wait := retryWait(p.MaxRetries, tiers)
	timeout := p.EffectiveTaskTimeout()
	if timeout > wait {
		return nil
	}
	which := fmt.Sprintf("task_timeout %g s", timeout.Seconds())
	if !given {
		which = "the default " + which
	}
	names := make([]string, len(tiers))
	for i, d := range tiers {
		names[i] = protocol.RetryTierName(d)
	}
	return errorf(http.StatusUnprocessableEntity, codeValidation,
		"%s does not outlast the retry delays: with max_retries %d a task may wait %g s between its runs "+
			"in the server's retry tiers (%s, the last repeating), and would be taken for lost meanwhile; "+
			"give a task_timeout above %g s plus the time the runs take, or fewer retries",
		which, p.MaxRetries, wait.Seconds(), strings.Join(names, ", "), wait.Seconds())
}

// checkTask refuses the payload of task number task (on NDJSON line line,
// 0 for JSON) when it is over maxBytes (413) or nested deeper than the
// protocol carries (422).
func checkTask(task int, line int, raw json.RawMessage, maxBytes int64) *apiError {
	if int64(len(raw)) > maxBytes {
		return taskTooLarge(task, line, int64(len(raw)), maxBytes)
	}
	if d := protocol.Depth(raw); d > protocol.MaxPayloadDepth {
		return errorf(http.StatusUnprocessableEntity, codeValidation,
			"%s is nested %d levels deep: payloads may nest arrays and objects at most %d levels (the wire protocol's limit)",
			taskName(task, line), d, protocol.MaxPayloadDepth)
	}
	return nil
}

// taskTooLarge is the error for task number task (on NDJSON line line, 0
// for JSON) whose payload is size bytes (-1 when it was cut short) and over
// limit.
func taskTooLarge(task, line int, size, limit int64) *apiError {
	if size < 0 {
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "%s is larger than the limit of %d bytes per task",
			taskName(task, line), limit)
	}
	return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "%s is %d bytes, over the limit of %d bytes per task",
		taskName(task, line), size, limit)
}

// taskName names task number task, and its NDJSON line when line > 0.
func taskName(task, line int) string {
	if line > 0 {
		return fmt.Sprintf("task %d (line %d)", task, line)
	}
	return fmt.Sprintf("task %d", task)
}

// noTasks is the error for a job without tasks.
func noTasks() *apiError {
	return errorf(http.StatusUnprocessableEntity, codeValidation, "tasks must not be empty: a job has at least one task")
}

// tooLarge is the error for a body over limit bytes.
func tooLarge(limit int64) *apiError {
	return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than the limit of %d bytes", limit)
}

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validText reports whether s is UTF-8 without control characters: what
// every store can keep in a text column (PostgreSQL refuses NUL and
// invalid UTF-8).
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, isControl)
}
