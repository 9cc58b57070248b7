// Package api is warren's HTTP API (v1): submitting jobs, reading their
// state, tasks and results, cancelling, redriving and deleting them, operating on
// the dead-letter queue, and the health, readiness, metrics and OpenAPI
// endpoints.
//
// The handler talks to the broker only through Config.DeadLetters: a
// submission is read whole and checked (its tasks spooled in memory, then
// in a temporary file), then written to the store in one transaction, and
// answered 202 Accepted; the outbox relay publishes the tasks later,
// and a redrive only requeues tasks in the store. Every error is a JSON object
// {"error": {"code", "message"}} with a 4xx status for bad input (which never
// leaves a job or task row behind), 503 when the store is down and 500 for
// anything else, whose detail is logged rather than sent.
//
// The routes, their parameters and their responses are described by the
// OpenAPI 3.0 document served at /v1/openapi.json (openapi.json in this
// directory); the package's tests check every response they provoke against
// it.
package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/heartbeats"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/ui"
	"github.com/warrenhq/warren/internal/webhooks"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// DefaultMaxBodyBytes is the largest request body accepted when
// Config.MaxBodyBytes is 0: 64 MiB.
const DefaultMaxBodyBytes = 64 << 20

// DefaultMaxTaskBytes is the largest task payload accepted when
// Config.MaxTaskBytes is 0: 1 MiB.
const DefaultMaxTaskBytes = 1 << 20

// DefaultMaxMetadataBytes is the largest job metadata accepted when
// Config.MaxMetadataBytes is 0: 64 KiB. Metadata is shown with the job
// wherever it is read; large data belongs elsewhere, referenced from it.
const DefaultMaxMetadataBytes = 64 << 10

// DefaultBodyTimeout is Config.BodyTimeout when it is 0.
const DefaultBodyTimeout = 30 * time.Second

// DefaultResultWriteTimeout is Config.ResultWriteTimeout when it is 0.
const DefaultResultWriteTimeout = 30 * time.Second

// probeTimeout bounds the store (and Ready) checks of /readyz and the
// store check that tells 503 from 500 after a failed store call.
const probeTimeout = 2 * time.Second

//go:embed openapi.json
var openAPIDocument []byte

// Config configures the API handler.
type Config struct {
	// Store is the job store. Required.
	Store store.Store
	// Tokens are the accepted bearer tokens and their scopes. Empty means
	// no authentication at all: the caller must then keep the handler on a
	// loopback address (the warren command refuses to do otherwise).
	Tokens []Token
	// MaxBodyBytes is the largest request body accepted; a larger one is
	// refused with 413 and writes nothing. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxTaskBytes is the largest task payload a submission may hold, in
	// bytes as submitted; a submission with a larger one is refused with
	// 413 naming the task, and writes nothing. 0 means
	// DefaultMaxTaskBytes.
	MaxTaskBytes int64
	// MaxMetadataBytes is the largest metadata a submission may give a
	// job, in bytes as submitted; a larger one is refused with 413 and
	// writes nothing. 0 means DefaultMaxMetadataBytes.
	MaxMetadataBytes int64
	// MaxJobTasks is the most tasks a job may have, spawned ones
	// included: a submission with more is refused with 413, and writes
	// nothing. 0 means no limit.
	MaxJobTasks int64
	// BodyTimeout is the longest a request body may go without delivering
	// a byte: a stalled upload is then cut with 408 and its connection
	// closed. Each read extends the deadline, so a large body that keeps
	// arriving is never cut. It needs the ResponseWriter of net/http's
	// server (http.ResponseController); with another, bodies are not
	// timed. 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// ResultWriteTimeout is how long the API may take to write each chunk
	// of a job's result (GET /v1/jobs/{id}/result, read from the store in
	// chunks of 256 KiB): a client that reads slower than a chunk in that
	// time is cut, so that stalled readers hold neither memory nor
	// connections. 0 means DefaultResultWriteTimeout.
	ResultWriteTimeout time.Duration
	// RetryTiers are the server's retry tiers: a job whose task_timeout
	// does not outlast the retry delays its tasks may wait in them is
	// refused with 422. nil means protocol.DefaultRetryTiers.
	RetryTiers []time.Duration
	// Ready reports whether the dependencies other than the store (the
	// broker, say) are ready; /readyz checks Store.Ping and then Ready. Its
	// error text is shown to unauthenticated callers of /readyz, so it must
	// not contain secrets. nil means only the store is checked.
	Ready func(ctx context.Context) error
	// Gatherer is served at /metrics. nil means prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Metrics, when not nil, records the API's own metrics (see
	// NewMetrics). nil means the handler records none.
	Metrics *Metrics
	// OnSubmit, when set, is called with the id of every job a submission
	// created (not for an idempotent replay), after its transaction
	// committed. The server uses it to wake the relay. It runs on the
	// request's goroutine, so it must not block.
	OnSubmit func(jobID string)
	// OnCancel, when set, is called with every job a request cancelled,
	// as the store returned it after it committed the cancel. The server
	// uses it to tell the workers. It runs on the request's goroutine, so
	// it must not block.
	OnCancel func(job warren.Job)
	// Pause, when set, tells every worker of a pause or a resume that the
	// store committed (a protocol.ControlPause or ControlResume of a job
	// or a queue) and returns once the broker confirmed it: the pause
	// routes answer after it, so that their answer means what
	// docs/operations.md says it does. A resume also wakes the relay. An
	// error is the answer's warning, not its failure: the pause stands,
	// and the server sends it again every protocol.PauseRefresh. nil means
	// no worker is told (the relay still publishes nothing paused).
	Pause func(ctx context.Context, c protocol.Control) error
	// OnRedrive, when set, is called with the id of every job a request
	// redrove, after the store committed it. The server uses it to wake
	// the relay. It runs on the request's goroutine, so it must not block.
	OnRedrive func(jobID string)
	// OnDelete, when set, is called with the id of every job a request
	// deleted (DELETE /v1/jobs/{id}), after the store committed it. The
	// server uses it to count the deletion and to have the job's tasks
	// purged soon. It runs on the request's goroutine, so it must not
	// block.
	OnDelete func(jobID string)
	// Retention is the server's retention of closed jobs that give none
	// of their own (server.Config.Retention): a job shows it as its
	// retention, and its expires_at follows from it. Negative means such
	// jobs are kept forever (their retention and expires_at are null); 0
	// means warren.DefaultRetention; otherwise at least a second.
	Retention time.Duration
	// DeadLetters lists, replays and purges the dead-letter queue for the
	// /v1/deadletters routes (a *dlq.Queue). nil means those routes answer
	// 503.
	DeadLetters DeadLetters
	// Workers lists the workers the server hears heartbeats from, for GET
	// /v1/workers. nil means that route answers 503.
	Workers func() []heartbeats.Worker
	// Waiting, when set, says why open job jobID, whose tasks go to work
	// queue queue, makes no progress (its "waiting" in GET
	// /v1/jobs/{id}), or returns nil. It must be quick: it is called for
	// every job shown. nil means never waiting.
	Waiting func(jobID, queue string) *Waiting
	// Queues reads warren's queues for GET /v1/queues. nil means that
	// route answers 503.
	Queues func(ctx context.Context) ([]Queue, error)
	// AllowedHosts are the host names, besides localhost (and names
	// under it) and IP addresses, that a handler without Tokens answers
	// to: a request whose Host header names another gets 421, so that a
	// page whose name its attacker points at the server (DNS rebinding)
	// reads nothing. Such a handler also refuses, with 403, every
	// state-changing request a browser sends from another origin than
	// the request's own host or one of these. With Tokens, neither check
	// applies: a page of another origin holds no token.
	AllowedHosts []string
	// WebhookAllowPrivate accepts webhook URLs whose host is, or resolves
	// to, a loopback, private, link-local or other non-public address
	// (webhooks.Forbidden); by default such a submission is refused with
	// 400.
	WebhookAllowPrivate bool
	// WebhookLookup resolves the host names of webhook URLs; nil means
	// the system resolver. Tests inject one.
	WebhookLookup webhooks.Lookup
	// Reducers are the reducers a submitted job may name; a job naming
	// another is refused with 422. nil means reduce.NewRegistry(), the
	// built-ins. Give the aggregator the same registry.
	Reducers *reduce.Registry
	// Events is the hub of the job event streams (GET
	// /v1/jobs/{id}/events); the server calls its Notify when it closed a
	// job. nil means a hub of the handler's own, with the default
	// EventsConfig. The handler notifies it of the jobs it cancels,
	// redrives and deletes itself.
	Events *Events
	// Logger receives the handler's logs. nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the server span of each submission (POST
	// /v1/jobs, continuing the request's W3C traceparent when it has one)
	// and the span of its store write (warren.job.create); the job keeps
	// the submission's trace context for the relay. nil means
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxTaskBytes == 0 {
		c.MaxTaskBytes = DefaultMaxTaskBytes
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.ResultWriteTimeout == 0 {
		c.ResultWriteTimeout = DefaultResultWriteTimeout
	}
	if len(c.RetryTiers) == 0 {
		c.RetryTiers = protocol.DefaultRetryTiers
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.DefaultGatherer
	}
	if c.Reducers == nil {
		c.Reducers = reduce.NewRegistry()
	}
	if c.Retention == 0 {
		c.Retention = warren.DefaultRetention
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Store == nil {
		return errors.New("api: Config.Store is required")
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("api: Config.MaxBodyBytes must be >= 0, got %d", c.MaxBodyBytes)
	}
	if c.MaxMetadataBytes < 0 {
		return fmt.Errorf("api: Config.MaxMetadataBytes must be >= 0, got %d", c.MaxMetadataBytes)
	}
	if c.MaxTaskBytes < 0 {
		return fmt.Errorf("api: Config.MaxTaskBytes must be >= 0, got %d", c.MaxTaskBytes)
	}
	if c.ResultWriteTimeout < 0 {
		return fmt.Errorf("api: Config.ResultWriteTimeout must be >= 0, got %s", c.ResultWriteTimeout)
	}
	if c.BodyTimeout < 0 {
		return fmt.Errorf("api: Config.BodyTimeout must be >= 0, got %s", c.BodyTimeout)
	}
	if c.Retention > 0 && c.Retention < time.Second {
		return fmt.Errorf("api: Config.Retention must be at least 1s (or negative, for forever), got %s", c.Retention)
	}
	for i, d := range c.RetryTiers {
		if d <= 0 {
			return fmt.Errorf("api: Config.RetryTiers[%d] must be > 0, got %s", i, d)
		}
	}
	for i, tok := range c.Tokens {
		if err := tok.validate(); err != nil {
			return fmt.Errorf("api: Config.Tokens[%d]: %w", i, err)
		}
	}
	return nil
}

// server holds what the handlers share.
type server struct {
	cfg    Config
	tracer trace.Tracer
	rules  rules // what a submission is checked against
	log    *slog.Logger
	auth   *authenticator
	mux    *http.ServeMux
	events *Events // the hub of the event streams
	// guard refuses other hosts and cross-origin writes; nil with tokens.
	guard   *originGuard
	methods []string // every method some route answers, for 405's Allow
	metrics http.Handler
	// unmatched answers requests no route matches (noRoute, instrumented).
	unmatched http.Handler
	// unservedAt is when a job's type was first seen unserved, for its
	// waiting (unserved.go).
	unservedAt unservedSince
}

// route is one endpoint: its ServeMux pattern (also its metrics label), the
// scope a token needs for it ("" for a public route) and its handler.
type route struct {
	pattern string
	scope   Scope
	handler http.HandlerFunc
}

// routes lists every endpoint the handler serves. The OpenAPI test checks
// that the document describes exactly these.
func (s *server) routes() []route {
	return []route{
		{"POST /v1/jobs", ScopeWrite, s.submitJob},
		{"GET /v1/jobs", ScopeRead, s.listJobs},
		{"GET /v1/jobs/{id}", ScopeRead, s.getJob},
		{"GET /v1/jobs/{id}/tasks", ScopeRead, s.listTasks},
		{"GET /v1/jobs/{id}/tasks/{task_id}", ScopeRead, s.getTask},
		{"GET /v1/jobs/{id}/result", ScopeRead, s.getResult},
		{"GET /v1/jobs/{id}/events", ScopeRead, s.jobEvents},
		{"POST /v1/jobs/{id}/cancel", ScopeWrite, s.cancelJob},
		{"POST /v1/jobs/{id}/redrive", ScopeWrite, s.redriveJob},
		{"POST /v1/jobs/{id}/pause", ScopeWrite, s.pauseJob},
		{"POST /v1/jobs/{id}/resume", ScopeWrite, s.resumeJob},
		{"POST /v1/queues/{queue}/pause", ScopeWrite, s.pauseQueue},
		{"POST /v1/queues/{queue}/resume", ScopeWrite, s.resumeQueue},
		{"DELETE /v1/jobs/{id}", ScopeWrite, s.deleteJob},
		{"GET /v1/jobs/{id}/timeline", ScopeRead, s.jobTimeline},
		{"GET /v1/auth", "", s.authInfo},
		{"GET /v1/jobs/{id}/deliveries", ScopeRead, s.listDeliveries},
		{"GET /v1/deadletters", ScopeRead, s.listDeadLetters},
		{"POST /v1/deadletters/replay", ScopeAdmin, s.replayDeadLetters},
		{"POST /v1/deadletters/purge", ScopeAdmin, s.purgeDeadLetters},
		{"GET /v1/workers", ScopeRead, s.listWorkers},
		{"GET /v1/queues", ScopeRead, s.listQueues},
		{"GET /healthz", "", s.healthz},
		{"GET /readyz", "", s.readyz},
		{"GET /metrics", ScopeRead, s.serveMetrics},
		{"GET /v1/openapi.json", "", s.openAPI},
	}
}

// New returns the API's http.Handler, or an error naming the Config field
// that is wrong.
func New(cfg Config) (http.Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, tracer: spans.Tracer(cfg.TracerProvider), log: slog.New(requestIDHandler{cfg.Logger.Handler()}), auth: newAuthenticator(cfg.Tokens), mux: http.NewServeMux(),
		rules: rules{reducers: cfg.Reducers, tiers: cfg.RetryTiers, maxTaskBytes: cfg.MaxTaskBytes, maxMetadataBytes: cfg.MaxMetadataBytes, maxJobTasks: cfg.MaxJobTasks}}
	if !s.auth.enabled() {
		s.guard = newOriginGuard(cfg.AllowedHosts)
	}
	if err := s.useEvents(); err != nil {
		return nil, err
	}
	s.metrics = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      promLogger{cfg.Logger},
		ErrorHandling: promhttp.ContinueOnError, // a failing collector is logged and left out
	})
	seen := map[string]bool{}
	for _, rt := range s.routes() {
		var h http.Handler = rt.handler
		h = s.authorize(rt.scope, h)
		if tracedRoutes[rt.pattern] {
			h = s.traced(rt.pattern, h)
		}
		h = cfg.Metrics.instrument(rt.pattern, h)
		s.mux.Handle(rt.pattern, h)
		method := methodOf(rt.pattern)
		if !seen[method] {
			seen[method] = true
			s.methods = append(s.methods, method)
		}
	}
	s.serveDashboard()
	s.unmatched = cfg.Metrics.instrument("unmatched", http.HandlerFunc(s.noRoute))
	return s, nil
}

// serveDashboard serves the dashboard's static files at /ui/ (package
// ui), and redirects /ui there. They are public, like the OpenAPI
// document: the data the page shows comes from the routes above, with the
// user's token. They are not API operations, so routes() and the OpenAPI
// document leave them out.
func (s *server) serveDashboard() {
	s.mux.Handle("GET "+ui.Prefix, s.cfg.Metrics.instrument("GET "+ui.Prefix, ui.Handler()))
	s.mux.Handle("GET /ui", s.cfg.Metrics.instrument("GET /ui", http.RedirectHandler(ui.Prefix, http.StatusMovedPermanently)))
}

// ServeHTTP answers a request the mux has a route for through the mux, and
// any other with a JSON 404 or 405.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = withRequestID(w, r)
	defer s.recoverPanic(w, r)
	r.Body = timeBody(w, r.Body, s.cfg.BodyTimeout)
	if s.guard != nil {
		if aerr := s.guard.check(r); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	s.unmatched.ServeHTTP(w, r)
}

// noRoute answers 405 with an Allow header when the path has routes for
// other methods, else 404.
func (s *server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range s.methods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
	}
	if len(allow) == 0 {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
}

// recoverPanic turns a handler's panic into a logged 500, except
// http.ErrAbortHandler, which keeps its meaning.
func (s *server) recoverPanic(w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler { // net/http's own signal to abort the response
		panic(v)
	}
	s.log.ErrorContext(r.Context(), "api: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
	writeError(w, errorf(http.StatusInternalServerError, codeInternal, "internal error"))
}

// methodOf returns the method of a "METHOD /path" pattern.
func methodOf(pattern string) string {
	method, _, _ := strings.Cut(pattern, " ")
	return method
}

// healthz says that the process is up.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, statusOK)
}

// statusOK is the body of a successful /healthz and /readyz.
var statusOK = map[string]string{"status": "ok"}

// readyz says whether the store and the other dependencies answer.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		s.log.WarnContext(r.Context(), "api: readiness: the job store does not answer", "error", err)
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "not ready: the job store does not answer"))
		return
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(ctx); err != nil {
			s.log.WarnContext(r.Context(), "api: readiness: not ready", "error", err)
			writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "not ready: %v", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, statusOK)
}

// serveMetrics serves the configured Gatherer. A collector that fails is
// logged and left out; the rest of the scrape is still served.
func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.ServeHTTP(w, r)
}

// promLogger adapts slog to promhttp's Logger.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("api: metrics: " + fmt.Sprint(v...)) }

// openAPI serves the embedded OpenAPI document.
func (s *server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
