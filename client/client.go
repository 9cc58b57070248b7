// Package client is the Go client of warren's HTTP API (v1). The warren
// command uses it; programs can too:
//
//	c := client.New("http://127.0.0.1:8080", client.WithToken(tok))
//	job, err := c.Submit(ctx, client.JobSpec{Type: "thumbnail", Tasks: payloads, Reduce: "collect"})
//	final, err := c.Wait(ctx, job.ID, nil)                     // polls
//	final, err = c.Watch(ctx, job.ID, func(j client.Job) { ... }) // follows its events
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spans"
)

// Client talks to one warren server. It is safe for concurrent use.
type Client struct {
	base  string
	http  *http.Client
	token string
	// giveUp bounds how long Wait and Watch go on without an answer from
	// the server; 0: forever.
	giveUp time.Duration
}

// BaseURL is the server's base URL the client was made with.
func (c *Client) BaseURL() string { return c.base }

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as a bearer token with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a client with a 30 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithRootCAs trusts the certificate authorities in pool, instead of the
// system's, for an https:// server: a server whose certificate a private
// CA signed. It replaces the transport of the client's HTTP client, so
// give it after WithHTTPClient, if both.
func WithRootCAs(pool *x509.CertPool) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		hc := *c.http
		hc.Transport = t
		c.http = &hc
	}
}

// WithGiveUpAfter makes Wait and Watch give up, with an error that
// wraps ErrUnreachable, once the server has not answered for d (each
// request then waits at most d as well). 0, the default, waits for the
// server forever.
func WithGiveUpAfter(d time.Duration) Option { return func(c *Client) { c.giveUp = d } }

// ErrUnreachable is wrapped by the error of Wait and Watch when the
// server has not answered for the time given to WithGiveUpAfter.
var ErrUnreachable = errors.New("the warren server is not answering")

// LoadCAFile reads the PEM certificates of the authorities to trust in
// path, for WithRootCAs.
func LoadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080", or https://).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is an error answer of the API: its HTTP status and the body's
// {"error": {"code", "message"}}.
type Error struct {
	Status  int
	Code    string
	Message string
}

// Error says what the server answered: its message, status and code.
func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// IsNotFound reports whether err is an API answer 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// ReduceTask is a job's reduce task: one task of type Task, on Queue (the
// job's queue when ""), run by a worker's reducer over every outcome of
// the job in task id order.
type ReduceTask struct {
	Task    string          `json:"task"`
	Queue   string          `json:"queue,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// MarshalJSON writes the spec as the API takes it: "reduce" is Reduce, or
// ReduceTask as an object.
func (s JobSpec) MarshalJSON() ([]byte, error) {
	type plain JobSpec
	var reduce any
	switch {
	case s.ReduceTask != nil:
		reduce = s.ReduceTask
	case s.Reduce != "":
		reduce = s.Reduce
	}
	return json.Marshal(struct {
		plain
		Reduce any `json:"reduce,omitempty"`
	}{plain(s), reduce})
}

// UnmarshalJSON reads a job as the API shows it: "reduce" is a name or a
// reduce task object.
func (j *Job) UnmarshalJSON(data []byte) error {
	type plain Job
	var v struct {
		*plain
		Reduce json.RawMessage `json:"reduce"`
	}
	v.plain = (*plain)(j)
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	j.Reduce, j.ReduceTask = "", nil
	switch {
	case len(v.Reduce) == 0 || string(v.Reduce) == "null":
	case v.Reduce[0] == '{':
		j.ReduceTask = new(ReduceTask)
		return json.Unmarshal(v.Reduce, j.ReduceTask)
	default:
		return json.Unmarshal(v.Reduce, &j.Reduce)
	}
	return nil
}

// JobSpec is a job to submit.
type JobSpec struct {
	// Type names the handler that runs the tasks.
	Type string `json:"type"`
	// Tasks are the payloads, one per task; task ids are their positions.
	Tasks []json.RawMessage `json:"tasks,omitempty"`
	// Reduce names the reducer ("" for the server's default, collect).
	Reduce string `json:"-"`
	// ReduceTask, when set, is a reduce task a worker runs over every
	// outcome once every task is accounted for (in place of Reduce): its
	// result is the job's result.
	ReduceTask *ReduceTask `json:"-"`
	// MaxRetries is the retry budget (0 to 100); nil for the server's
	// default (3).
	MaxRetries *int `json:"max_retries,omitempty"`
	// ToleratedFailures is how many failed tasks a completed job may
	// have, and ToleratedFailurePercent what share of its tasks (0-100).
	// 0 leaves a tolerance out, and one left out does not limit (as in
	// AWS Step Functions): with only ToleratedFailures 3, three tasks may
	// fail whatever their share; with both, both must hold; with
	// neither, no task may fail.
	ToleratedFailures       int64   `json:"tolerated_failures,omitempty"`
	ToleratedFailurePercent float64 `json:"tolerated_failure_percent,omitempty"`
	FailFast                bool    `json:"fail_fast,omitempty"`
	// TaskTimeout is in seconds; 0 for the server's default (1 h). It
	// must outlast the retry delays a task may wait between its runs
	// (with the default tiers and 3 retries, 36 s), or the job is
	// refused.
	TaskTimeout float64 `json:"task_timeout,omitempty"`
	// BatchSize is how many consecutive tasks go out as one task message,
	// 1 to 1000 (1: one message per task); 0 leaves it to warren, which
	// sizes batches from the job's observed task durations.
	BatchSize int `json:"batch_size,omitempty"`
	// Priority is the job's share of the relay's window, 1 to 100 (0 for
	// the server's default, 10): a job of priority 20 gets twice the share
	// of one of 10 while both have tasks waiting.
	Priority int `json:"priority,omitempty"`
	// MaxConcurrency is the most of the job's tasks that run at once,
	// across all workers, 1 to 10000; 0 for no cap. A task counts from
	// its publish until its outcome is recorded, its retries included.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Queue is the work queue the job's tasks go to ("" for "default");
	// workers consume the queues they serve.
	Queue string `json:"queue,omitempty"`
	// Retention is how long, in seconds, the job is kept once it closed,
	// with its tasks, results and idempotency key, before the server
	// deletes it (at least 1, at most 100 years); 0 for the server's
	// retention (7 days unless configured, or forever).
	Retention float64         `json:"retention,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	// Webhook, when set, is POSTed to when the job closes, signed with
	// its secret (docs/operations.md, "Webhooks").
	Webhook *Webhook `json:"webhook,omitempty"`
	// Then, when set, is the job's follow-up: a spec without Tasks (nor
	// IdempotencyKey), which the server creates when this job completes,
	// with one task per element of its result (a JSON array), its own
	// Then continuing the chain (at most 10 jobs in all). It inherits
	// this job's webhook unless it gives one.
	Then *JobSpec `json:"then,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header: submitting the
	// same key again returns the same job.
	IdempotencyKey string `json:"-"`
}

// JobState is a job's lifecycle state as the API reports it: the same
// type as warren.JobState, so a value compares with the constants of
// either package and with an untyped string constant ("completed").
// Terminal reports whether the job is closed; Valid whether the state is
// one of the five below. On the wire it is the plain JSON string.
type JobState = warren.JobState

// The job states the API reports. A job is open while pending or running
// and closed once completed, failed or cancelled.
const (
	// JobPending: the job is stored but not all its tasks are published.
	JobPending = warren.JobPending
	// JobRunning: every task has been published at least once.
	JobRunning = warren.JobRunning
	// JobCompleted: every task finished within the job's failure
	// tolerance; Client.Result returns the reduced result.
	JobCompleted = warren.JobCompleted
	// JobFailed: the failed tasks exceeded the job's tolerance.
	JobFailed = warren.JobFailed
	// JobCancelled: the job was cancelled before it closed.
	JobCancelled = warren.JobCancelled
)

// TaskState is one task's lifecycle state as the API reports it: the
// same type as warren.TaskState, with Terminal and Valid. On the wire it
// is the plain JSON string.
type TaskState = warren.TaskState

// The task states the API reports. Completed, failed and cancelled are
// terminal; a task leaves them only through a redrive.
const (
	// TaskPending: the task is stored and not yet published.
	TaskPending = warren.TaskPending
	// TaskQueued: the broker confirmed the task's message.
	TaskQueued = warren.TaskQueued
	// TaskCompleted: a handler returned the task's result.
	TaskCompleted = warren.TaskCompleted
	// TaskFailed: the task failed for good (a permanent error, retries
	// exhausted, or dead-lettered by the broker).
	TaskFailed = warren.TaskFailed
	// TaskCancelled: the task's job closed before the task finished.
	TaskCancelled = warren.TaskCancelled
)

// Submitted is the answer to a submission.
type Submitted struct {
	ID string `json:"id"`
	// State is the new job's state: JobPending, or the existing job's
	// state when the idempotency key was seen before.
	State     JobState `json:"state"`
	StatusURL string   `json:"status_url"`
	// Warnings say what may hold the job up, such as no live worker
	// serving its type on its queue (its tasks then wait for one, and fail
	// unknown_type after its task_timeout); nil when none. The job is
	// created all the same.
	Warnings []string `json:"warnings,omitempty"`
}

// TaskError is one failed task in a job's failure sample.
type TaskError struct {
	TaskID int64  `json:"task_id"`
	Error  string `json:"error"`
}

// Job is a job's status as GET /v1/jobs/{id} returns it.
// ToleratedFailures is nil when only ToleratedFailurePercent limits the
// failed tasks; ToleratedFailurePercent is 100 when only
// ToleratedFailures does. Retention is how long, in seconds, the job is
// kept once it closed (its own retention or the server's), and ExpiresAt
// when the closed job may be deleted with its tasks, results and
// idempotency key; Retention is nil when the job is kept forever, and
// ExpiresAt then and while the job is open.
type Job struct {
	ID             string   `json:"id"`
	Type           string   `json:"type"`
	State          JobState `json:"state"`
	ExpectedTasks  int64    `json:"expected_tasks"`
	CompletedTasks int64    `json:"completed_tasks"`
	FailedTasks    int64    `json:"failed_tasks"`
	PendingTasks   int64    `json:"pending_tasks"`
	// SpawnedTasks counts the tasks the job's tasks spawned; they are in
	// ExpectedTasks too.
	SpawnedTasks int64 `json:"spawned_tasks"`
	// Reduce is the reducer's name; "" when the job has a ReduceTask.
	Reduce string `json:"-"`
	// ReduceTask is the job's reduce task, nil when it has none.
	ReduceTask *ReduceTask `json:"-"`
	// ReduceState is the reduce task's progress: "" before it starts,
	// "running" while the job is reducing, then "completed" or "failed".
	ReduceState             string          `json:"reduce_state,omitempty"`
	MaxRetries              int             `json:"max_retries"`
	ToleratedFailures       *int64          `json:"tolerated_failures"`
	ToleratedFailurePercent float64         `json:"tolerated_failure_percent"`
	FailFast                bool            `json:"fail_fast"`
	TaskTimeout             float64         `json:"task_timeout"`
	BatchSize               int             `json:"batch_size"`
	Priority                int             `json:"priority"`
	MaxConcurrency          int             `json:"max_concurrency"` // 0 when uncapped
	Queue                   string          `json:"queue"`
	Retention               *float64        `json:"retention"`
	ExpiresAt               *time.Time      `json:"expires_at"`
	Metadata                json.RawMessage `json:"metadata"`
	CreatedAt               *time.Time      `json:"created_at"`
	// StartedAt is when the job's first task started, as its worker
	// reported it (nil before the first outcome with a start);
	// PublishedAt when every task had been published; LastFinishedAt
	// when its latest recorded outcome finished.
	StartedAt      *time.Time `json:"started_at"`
	PublishedAt    *time.Time `json:"published_at"`
	LastFinishedAt *time.Time `json:"last_finished_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	// Rate is finished tasks (completed and failed) per second, from
	// the first task's start to the latest finish while the job runs,
	// to its close once closed; nil while it cannot be measured.
	Rate      *float64 `json:"rate"`
	ResultURL *string  `json:"result_url"`
	// Error says why the job failed or was cancelled; empty otherwise.
	Error string `json:"error"`
	// Webhook is the job's webhook, its URL only (the server never shows
	// the secret); nil when it has none.
	Webhook *Webhook    `json:"webhook"`
	Errors  []TaskError `json:"errors"`
	// Then is the job's follow-up, nil for none.
	Then *FollowUp `json:"then"`
	// NextJob is the id of the follow-up this job started when it
	// completed, "" until then; PreviousJob the id of the job whose
	// completion started this one, "" for a submitted job.
	NextJob     string `json:"next_job"`
	PreviousJob string `json:"previous_job"`
	// Waiting says why an open job makes no progress, nil when nothing
	// is known to hold it up (and in listings).
	Waiting *Waiting `json:"waiting"`
	// Paused says that the job itself is paused (Pause), since PausedAt
	// (nil while it is not). A job of a paused queue is not paused
	// itself: its Waiting says "queue_paused".
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at"`
	// Warnings are set only by Pause and Resume, when the server could
	// not tell the workers (the pause stands; the server tells them
	// again within seconds).
	Warnings []string `json:"warnings,omitempty"`
}

// QueuePause is a work queue's pause, as PauseQueue and ResumeQueue
// return it.
type QueuePause struct {
	// Queue is the work queue's name ("default" for the jobs that name
	// none).
	Queue string `json:"queue"`
	// Paused says whether it is paused now, since PausedAt.
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at"`
	// Warnings, as Job.Warnings.
	Warnings []string `json:"warnings,omitempty"`
}

// Waiting is why an open job makes no progress, as the server knows it.
type Waiting struct {
	// Reason is "paused": the job is paused (Pause); "queue_paused": its
	// work queue is (PauseQueue); "no_consumer": its work queue has no
	// consumer (no worker runs, none consumes that queue, or they have
	// another prefix); or "no_worker_for_type": live workers consume the
	// queue, and none advertises Type.
	Reason string `json:"reason"`
	// Queue is the work queue without a consumer, or without a live
	// worker serving Type.
	Queue string `json:"queue"`
	// Type is the task type no live worker serves, for
	// "no_worker_for_type"; "" otherwise.
	Type string `json:"type,omitempty"`
	// Since is when the server first found it so.
	Since time.Time `json:"since"`
}

// FollowUp is a job's follow-up as the API shows it.
type FollowUp struct {
	// Type is the follow-up's task type.
	Type string `json:"type"`
	// Remaining is how many jobs the chain still starts after this one,
	// the follow-up included.
	Remaining int `json:"remaining"`
}

// Webhook is where the server POSTs when a job closes: an absolute http
// or https URL (to a public address, unless the server allows private
// ones), and the secret it signs the body with (1 to 1024 bytes).
type Webhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// Delivery is one webhook delivery of a job, as the API reports it.
type Delivery struct {
	// ID is sent as X-Warren-Delivery on every attempt.
	ID    string `json:"id"`
	Event string `json:"event"`
	// State is "pending", "delivered" or "failed".
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status"`
	LastError     string     `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
}

// Terminal reports whether the job is closed: j.State.Terminal().
func (j Job) Terminal() bool { return j.State.Terminal() }

// JobList is one page of jobs.
type JobList struct {
	Jobs       []Job   `json:"jobs"`
	NextCursor *string `json:"next_cursor"`
}

// Task is one task's row as the API lists it.
type Task struct {
	TaskID     int64           `json:"task_id"`
	State      TaskState       `json:"state"`
	Attempts   int             `json:"attempts"`
	Worker     string          `json:"worker"`
	Error      string          `json:"error"`
	QueuedAt   *time.Time      `json:"queued_at"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	Result     json.RawMessage `json:"result"`
}

// Attempt is one run of a task as the server kept it (TaskDetail).
type Attempt struct {
	Attempt    int                   `json:"attempt"`
	Generation int                   `json:"generation"`
	Outcome    warren.AttemptOutcome `json:"outcome"`
	Worker     string                `json:"worker"`
	StartedAt  *time.Time            `json:"started_at"`
	FinishedAt time.Time             `json:"finished_at"`
	// Error is why the run failed (its first 8 KiB).
	Error string `json:"error"`
	// Traceback is where the failure came from, when the worker sent it
	// (its last 16 KiB); "" otherwise.
	Traceback string `json:"traceback"`
}

// TaskDeadLetter is a failed task's dead letter in the dead-letter queue.
type TaskDeadLetter struct {
	MessageID string     `json:"message_id"`
	Reason    string     `json:"reason"`
	Error     string     `json:"error"`
	Attempts  int        `json:"attempts"`
	Time      *time.Time `json:"time"`
}

// TaskDetail is one task whole (Client.Task): its row, its payload, the
// attempts the server kept (the last ones, oldest first) and its dead
// letter, nil when it has none there.
type TaskDetail struct {
	JobID string `json:"job_id"`
	Task
	Generation     int             `json:"generation"`
	Payload        json.RawMessage `json:"payload"`
	AttemptHistory []Attempt       `json:"attempt_history"`
	DeadLetter     *TaskDeadLetter `json:"dead_letter"`
}

// TaskList is one page of a job's tasks.
type TaskList struct {
	Tasks      []Task  `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
}

// ListOpts filters and pages the list calls; zero values mean "any" and
// the server's default page size.
type ListOpts struct {
	// State keeps only jobs (or tasks) in that state.
	State string
	// Type filters jobs by their type (List only).
	Type string
	// Queue keeps only jobs of that work queue, exactly ("default" for
	// the jobs that name none; List only).
	Queue string
	// Search keeps only the jobs it finds (List only, the API's q): by
	// id prefix, or as a substring, ignoring case, of the type, the
	// queue, a metadata value, the job's error or a task's error; 3 to
	// 200 bytes.
	Search string
	// CreatedAfter and CreatedBefore, when not zero, keep only jobs
	// created at or after, and before, them (List only).
	CreatedAfter, CreatedBefore time.Time
	// Limit is the page size (0: the server's default).
	Limit int
	// Cursor is the NextCursor of the page before, or "".
	Cursor string
}

func (o *ListOpts) query() string {
	if o == nil {
		return ""
	}
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Type != "" {
		q.Set("type", o.Type)
	}
	if o.Queue != "" {
		q.Set("queue", o.Queue)
	}
	if o.Search != "" {
		q.Set("q", o.Search)
	}
	if !o.CreatedAfter.IsZero() {
		q.Set("created_after", o.CreatedAfter.Format(time.RFC3339Nano))
	}
	if !o.CreatedBefore.IsZero() {
		q.Set("created_before", o.CreatedBefore.Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// Submit submits a job with its tasks in one JSON body. The tasks go
// last in the body, so the server streams them into its store.
func (c *Client) Submit(ctx context.Context, spec JobSpec) (Submitted, error) {
	tasks := spec.Tasks
	spec.Tasks = nil
	head, err := json.Marshal(spec)
	if err != nil {
		return Submitted{}, err
	}
	var body bytes.Buffer
	body.Write(head[:len(head)-1]) // without the closing brace
	if len(head) > 2 {
		body.WriteByte(',')
	}
	body.WriteString(`"tasks":[`)
	for i, t := range tasks {
		if i > 0 {
			body.WriteByte(',')
		}
		if len(t) == 0 {
			t = json.RawMessage("null")
		}
		body.Write(t)
	}
	body.WriteString("]}")
	var out Submitted
	err = c.do(ctx, http.MethodPost, "/v1/jobs", "application/json", spec.IdempotencyKey, &body, &out)
	return out, err
}

// SubmitNDJSON submits a job as NDJSON, streaming: the spec (its Tasks
// must be empty) as the first line, then tasks, which holds one JSON
// payload per line, copied as it is read.
func (c *Client) SubmitNDJSON(ctx context.Context, spec JobSpec, tasks io.Reader) (Submitted, error) {
	if len(spec.Tasks) > 0 {
		return Submitted{}, errors.New("client: SubmitNDJSON takes the tasks from the reader, not spec.Tasks")
	}
	head, err := json.Marshal(spec)
	if err != nil {
		return Submitted{}, err
	}
	body := io.MultiReader(bytes.NewReader(append(head, '\n')), tasks)
	var out Submitted
	err = c.do(ctx, http.MethodPost, "/v1/jobs", "application/x-ndjson", spec.IdempotencyKey, body, &out)
	return out, err
}

// Get returns a job's status.
func (c *Client) Get(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", "", nil, &out)
	return out, err
}

// GetRaw returns a job's status exactly as the server encoded it.
func (c *Client) GetRaw(ctx context.Context, id string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", "", nil, &out)
	return out, err
}

// List returns one page of jobs, newest first.
func (c *Client) List(ctx context.Context, opts *ListOpts) (JobList, error) {
	var out JobList
	err := c.do(ctx, http.MethodGet, "/v1/jobs"+opts.query(), "", "", nil, &out)
	return out, err
}

// Tasks returns one page of a job's tasks, in task id order.
func (c *Client) Tasks(ctx context.Context, id string, opts *ListOpts) (TaskList, error) {
	var out TaskList
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/tasks"+opts.query(), "", "", nil, &out)
	return out, err
}

// Task returns task taskID of job id whole: its payload, result, every
// attempt the server kept and its dead letter (warren.ReduceTaskID is
// the job's reduce task). An unknown job or task is an *Error with status
// 404.
func (c *Client) Task(ctx context.Context, id string, taskID int64) (TaskDetail, error) {
	var out TaskDetail
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/tasks/"+strconv.FormatInt(taskID, 10), "", "", nil, &out)
	return out, err
}

// Deliveries returns the webhook deliveries of a job, oldest first: one
// per close of a job with a webhook.
func (c *Client) Deliveries(ctx context.Context, id string) ([]Delivery, error) {
	var out struct {
		Deliveries []Delivery `json:"deliveries"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/deliveries", "", "", nil, &out)
	return out.Deliveries, err
}

// Result returns a completed job's reduced result.
func (c *Client) Result(ctx context.Context, id string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/result", "", "", nil, &out)
	return out, err
}

// Cancel cancels an open job and returns it.
func (c *Client) Cancel(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", "", "", nil, &out)
	return out, err
}

// Pause pauses an open job and returns it: once it returns, no new task
// of the job starts until Resume (tasks already running finish), as
// docs/operations.md ("Pausing a job or a queue") says. Pausing a paused
// job changes nothing. A closed job is a 409 Error, an unknown one a 404
// (IsNotFound).
func (c *Client) Pause(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/pause", "", "", nil, &out)
	return out, err
}

// Resume resumes a paused job and returns it. Resuming a job that is not
// paused changes nothing.
func (c *Client) Resume(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/resume", "", "", nil, &out)
	return out, err
}

// PauseQueue pauses a work queue ("default" for the jobs that name
// none): as Pause for every job of the queue, those submitted later
// included, until ResumeQueue.
func (c *Client) PauseQueue(ctx context.Context, queue string) (QueuePause, error) {
	var out QueuePause
	err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(queue)+"/pause", "", "", nil, &out)
	return out, err
}

// ResumeQueue resumes a paused work queue.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (QueuePause, error) {
	var out QueuePause
	err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(queue)+"/resume", "", "", nil, &out)
	return out, err
}

// Redrive requeues the failed tasks of a closed job (failed, or completed
// with tolerated failures) and returns the job, running again. A job that
// is open, cancelled or has no failed task is a 409 Error that says why.
func (c *Client) Redrive(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/redrive", "", "", nil, &out)
	return out, err
}

// Delete deletes a closed job (completed, failed or cancelled), whatever
// its retention, with its tasks, results and idempotency key. An open job
// is a 409 Error (cancel it first), an unknown one a 404 (IsNotFound).
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), "", "", nil, nil)
}

// DeadLetter is one message of the dead-letter queue: a task that failed
// for good.
type DeadLetter struct {
	JobID  string `json:"job_id"`
	TaskID int64  `json:"task_id"`
	// TaskIDs lists every task of a task batch message the broker
	// dead-lettered whole (TaskID is its first); empty otherwise.
	TaskIDs []int64 `json:"task_ids,omitempty"`
	// MessageID is the AMQP message id, "<job_id>:<task_id>".
	MessageID string `json:"message_id"`
	// RoutingKey is the key the task was dead-lettered with.
	RoutingKey string `json:"routing_key"`
	// Reason is why: permanent, retries_exhausted, unknown_type,
	// malformed, or the broker's delivery_limit, rejected, expired.
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Attempts is the number of runs the task had.
	Attempts int `json:"attempts"`
	// Time is when the task was dead-lettered; zero when unknown.
	Time time.Time `json:"time,omitzero"`
	// Pending is false once a redrive, a replay or a delete settled the
	// dead letter; Settled then says how (job_deleted, job_cancelled,
	// resent, completed, unknown_task), "" while pending.
	Pending bool   `json:"pending"`
	Settled string `json:"settled,omitempty"`
}

// DeadLetters lists the dead letters, oldest first, of job jobID (all
// jobs when empty), at most limit of them (all when 0). Listing leaves
// them in the queue.
func (c *Client) DeadLetters(ctx context.Context, jobID string, limit int) ([]DeadLetter, error) {
	return c.deadLetters(ctx, jobID, limit, false)
}

// PendingDeadLetters is DeadLetters of only the pending dead letters
// (DeadLetter.Pending), limit counting those: what a redrive, a replay
// or a delete has not settled.
func (c *Client) PendingDeadLetters(ctx context.Context, jobID string, limit int) ([]DeadLetter, error) {
	return c.deadLetters(ctx, jobID, limit, true)
}

func (c *Client) deadLetters(ctx context.Context, jobID string, limit int, pending bool) ([]DeadLetter, error) {
	if limit < 0 {
		return nil, fmt.Errorf("client: limit must be >= 0, got %d", limit)
	}
	q := url.Values{}
	if pending {
		q.Set("pending", "true")
	}
	if jobID != "" {
		q.Set("job_id", jobID)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/deadletters"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		DeadLetters []DeadLetter `json:"deadletters"`
	}
	err := c.do(ctx, http.MethodGet, path, "", "", nil, &out)
	return out.DeadLetters, err
}

// ReplayDeadLetters republishes the dead letters of job jobID (all jobs
// when empty), oldest first, at most limit of them (all when 0), with
// their retries reset. Skipped counts the ones left in the queue because
// their task is not failed any more (or is not a task).
func (c *Client) ReplayDeadLetters(ctx context.Context, jobID string, limit int) (replayed, skipped int, err error) {
	body, err := filterBody(jobID, limit)
	if err != nil {
		return 0, 0, err
	}
	var out struct {
		Replayed int `json:"replayed"`
		Skipped  int `json:"skipped"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/deadletters/replay", "application/json", "", body, &out)
	return out.Replayed, out.Skipped, err
}

// PurgeDeadLetters deletes the dead letters of job jobID (every one when
// empty) and returns how many it deleted.
func (c *Client) PurgeDeadLetters(ctx context.Context, jobID string) (int, error) {
	// The API purges every dead letter only when asked to in so many
	// words: a body that names nothing is refused.
	var body io.Reader = strings.NewReader(`{"all": true}`)
	if jobID != "" {
		var err error
		if body, err = filterBody(jobID, 0); err != nil {
			return 0, err
		}
	}
	var out struct {
		Purged int `json:"purged"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/deadletters/purge", "application/json", "", body, &out)
	return out.Purged, err
}

// PurgeSettledDeadLetters deletes the settled dead letters (not
// DeadLetter.Pending) of job jobID, of every job when empty, and says
// how many: those whose task a redrive or a replay sent back, or whose
// job was deleted or cancelled. Pending ones stay.
func (c *Client) PurgeSettledDeadLetters(ctx context.Context, jobID string) (int, error) {
	b, err := json.Marshal(struct {
		JobID   string `json:"job_id,omitempty"`
		Settled bool   `json:"settled"`
	}{jobID, true})
	if err != nil {
		return 0, err
	}
	var out struct {
		Purged int `json:"purged"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/deadletters/purge", "application/json", "", bytes.NewReader(b), &out)
	return out.Purged, err
}

// filterBody is the JSON body of a dead-letter operation.
func filterBody(jobID string, limit int) (io.Reader, error) {
	if limit < 0 {
		return nil, fmt.Errorf("client: limit must be >= 0, got %d", limit)
	}
	f := struct {
		JobID string `json:"job_id,omitempty"`
		Limit int    `json:"limit,omitempty"`
	}{jobID, limit}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// WaitOpts tunes Wait.
type WaitOpts struct {
	// MinInterval and MaxInterval bound the polling interval, which grows
	// by half each poll; defaults 50 ms and 2 s.
	MinInterval, MaxInterval time.Duration
	// OnProgress, when set, is called with every status read.
	OnProgress func(Job)
}

// Wait polls a job with backoff until it is closed or ctx is done, and
// returns its last status. Transient failures to reach the server are
// retried; API errors (such as 404) end the wait.
func (c *Client) Wait(ctx context.Context, id string, opts *WaitOpts) (Job, error) {
	return c.wait(ctx, id, opts, time.Now())
}

// wait is Wait for a server that last answered at answered.
func (c *Client) wait(ctx context.Context, id string, opts *WaitOpts, answered time.Time) (Job, error) {
	lo, hi := 50*time.Millisecond, 2*time.Second
	var progress func(Job)
	if opts != nil {
		if opts.MinInterval > 0 {
			lo = opts.MinInterval
		}
		if opts.MaxInterval > 0 {
			hi = opts.MaxInterval
		}
		progress = opts.OnProgress
	}
	interval := lo
	for {
		job, err := c.getBounded(ctx, id)
		var apiErr *Error
		if err == nil || errors.As(err, &apiErr) {
			answered = time.Now()
		}
		switch {
		case err == nil:
			if progress != nil {
				progress(job)
			}
			if job.Terminal() {
				return job, nil
			}
		case errors.As(err, &apiErr) && apiErr.Status < 500:
			return Job{}, err
		case ctx.Err() != nil:
			return Job{}, ctx.Err()
		case c.giveUp > 0 && time.Since(answered) >= c.giveUp:
			return Job{}, fmt.Errorf("%w (no answer for %s): %v", ErrUnreachable, time.Since(answered).Round(time.Second), err)
		}
		// Jitter keeps many waiters from polling in step.
		d := interval/2 + rand.N(interval/2+1)
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(d):
		}
		interval = min(interval*3/2, hi)
	}
}

// redacted is base without a password.
func redacted(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// getBounded is Get, bounded by the give-up time when there is one.
func (c *Client) getBounded(ctx context.Context, id string) (Job, error) {
	if c.giveUp <= 0 {
		return c.Get(ctx, id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.giveUp)
	defer cancel()
	return c.Get(ctx, id)
}

func (c *Client) do(ctx context.Context, method, path, contentType, idemKey string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	// The server continues the caller's trace, if ctx has one: a job
	// submitted from a traced program is in that program's trace.
	spans.Inject(trace.SpanContextFromContext(ctx), propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the warren server at %s: %w", redacted(c.base), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		*raw = b
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: bad answer to %s %s: %w", method, path, err)
	}
	return nil
}

func decodeError(resp *http.Response) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(raw, &body); err != nil || body.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(resp.Status + " " + string(raw))}
	}
	return &Error{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message}
}
