package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
)

// storeKind names a store implementation the tests run against.
type storeKind string

const (
	sqliteStore   storeKind = "sqlite"
	postgresStore storeKind = "postgres"
)

// bothStores are the stores the core paths are tested against.
var bothStores = []storeKind{sqliteStore, postgresStore}

// options change what setup builds; the zero value is an SQLite store, no
// tokens and the default limits.
type options struct {
	kind    storeKind
	tokens  string                              // WARREN_API_TOKENS
	maxBody int64                               // Config.MaxBodyBytes
	ready   func(ctx context.Context) error     // Config.Ready
	wrap    func(s store.Store) store.Store     // what the handler sees instead of the store
	onNew   func(t *testing.T, cfg *api.Config) // last changes to the Config
	around  func(h http.Handler) http.Handler   // what the test server serves instead of the handler
	pgPool  int                                 // pool_max_conns of a PostgreSQL store; 0 for pgx's default
}

// testBundle is one API server over a fresh store.
type testBundle struct {
	store store.Store // the real store, for arranging and checking
	srv   *httptest.Server
	reg   *prometheus.Registry

	mu        sync.Mutex
	submitted []string // ids passed to OnSubmit
}

// setup starts an API server over a fresh store of opts.kind.
func setup(t *testing.T, opts *options) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &options{}
	}
	b := &testBundle{store: openStore(t, opts.kind, opts.pgPool), reg: prometheus.NewRegistry()}
	handlerStore := b.store
	if opts.wrap != nil {
		handlerStore = opts.wrap(b.store)
	}
	tokens, err := api.ParseTokens(opts.tokens)
	require.NoError(t, err)
	metrics, err := api.NewMetrics(b.reg, handlerStore)
	require.NoError(t, err)
	cfg := api.Config{
		Store:        handlerStore,
		Tokens:       tokens,
		MaxBodyBytes: opts.maxBody,
		Ready:        opts.ready,
		Gatherer:     b.reg,
		Metrics:      metrics,
		OnSubmit: func(id string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.submitted = append(b.submitted, id)
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	if opts.onNew != nil {
		opts.onNew(t, &cfg)
	}
	h, err := api.New(cfg)
	require.NoError(t, err)
	if opts.around != nil {
		h = opts.around(h)
	}
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	return b
}

// openStore opens a fresh, migrated store of kind that is closed when the
// test ends; a PostgreSQL store has at most pgPool connections when
// pgPool > 0.
func openStore(t *testing.T, kind storeKind, pgPool int) store.Store {
	t.Helper()
	var (
		s   store.Store
		err error
	)
	switch kind {
	case sqliteStore, "":
		s, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	case postgresStore:
		url := pgtest.URL(t)
		if pgPool > 0 {
			url += fmt.Sprintf("&pool_max_conns=%d", pgPool)
		}
		s, err = postgres.Open(context.Background(), url)
	default:
		t.Fatalf("unknown store kind %q", kind)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// onSubmitCalls returns the job ids OnSubmit was called with.
func (b *testBundle) onSubmitCalls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.submitted...)
}

// response is an answer of the API, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic value.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return v
}

// do sends a request with body (nil for none) and header pairs ("Name",
// "value", ...) and returns the answer, after checking it against the
// OpenAPI document (see conform).
func (b *testBundle) do(t *testing.T, method, path string, body io.Reader, header ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, b.srv.Client(), req)
}

// send sends req with c, reads the answer and checks it against the
// OpenAPI document.
func send(t *testing.T, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := response{status: resp.StatusCode, header: resp.Header, body: body}
	conform(t, req, out)
	return out
}

// get sends a GET request.
func (b *testBundle) get(t *testing.T, path string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodGet, path, nil, header...)
}

// submit POSTs a JSON job spec.
func (b *testBundle) submit(t *testing.T, spec string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(spec), append([]string{"Content-Type", "application/json"}, header...)...)
}

// submitNDJSON POSTs an NDJSON job.
func (b *testBundle) submitNDJSON(t *testing.T, body string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(body), append([]string{"Content-Type", "application/x-ndjson"}, header...)...)
}

// mustSubmit submits spec, requires a 202 and returns the job id.
func (b *testBundle) mustSubmit(t *testing.T, spec string, header ...string) string {
	t.Helper()
	resp := b.submit(t, spec, header...)
	require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
	id, _ := resp.json(t)["id"].(string)
	require.NotEmpty(t, id)
	return id
}

// requireError checks that resp is an error of status and code.
func requireError(t *testing.T, resp response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.status, "body: %s", resp.body)
	require.Equal(t, "application/json", resp.header.Get("Content-Type"))
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &body), "body: %s", resp.body)
	require.Equal(t, code, body.Error.Code, "message: %s", body.Error.Message)
	require.NotEmpty(t, body.Error.Message)
}

// errorMessage returns the message of an error body.
func errorMessage(t *testing.T, resp response) string {
	t.Helper()
	e, _ := resp.json(t)["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

// requireNoJobs checks that the store holds no job at all.
func requireNoJobs(t *testing.T, s store.Store) {
	t.Helper()
	jobs, _, err := s.ListJobs(context.Background(), store.ListJobsOpts{})
	require.NoError(t, err)
	require.Empty(t, jobs, "the store must be unchanged")
}

// createJob writes a job of n tasks ({"i":1} ... {"i":n}) straight into
// the store.
func createJob(t *testing.T, s store.Store, n int) warren.Job {
	t.Helper()
	job, _, err := s.CreateJob(context.Background(),
		store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect", MaxRetries: 1}}, payloads(n))
	require.NoError(t, err)
	return job
}

// payloads yields n payloads {"i":1} ... {"i":n}.
func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil) {
				return
			}
		}
	}
}

// publishAll marks every pending task queued, as a relay whose broker
// confirms everything would, and returns the tasks in task order.
func publishAll(t *testing.T, s store.Store) []store.OutboxTask {
	t.Helper()
	var all []store.OutboxTask
	for {
		var batch []store.OutboxTask
		_, err := s.RelayBatch(context.Background(), 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			batch = append(batch, tasks...)
			refs := make([]store.TaskRef, len(tasks))
			for i, task := range tasks {
				refs[i] = task.Ref()
			}
			return refs, nil
		})
		require.NoError(t, err)
		if len(batch) == 0 {
			return all
		}
		all = append(all, batch...)
	}
}

// payloadsOf publishes every pending task and returns the payloads of job
// id's tasks in task order.
func payloadsOf(t *testing.T, s store.Store, id string) []string {
	t.Helper()
	var out []string
	for _, task := range publishAll(t, s) {
		if task.JobID == id {
			require.Equal(t, int64(len(out)+1), task.TaskID)
			out = append(out, string(task.Payload))
		}
	}
	return out
}

// finish publishes job id's tasks, records an outcome for each (failed for
// the task ids in failedIDs, completed with result {"i":n} otherwise) and
// closes the job as state with result.
func finish(t *testing.T, s store.Store, id string, n int, state warren.JobState, result []byte, failedIDs ...int64) {
	t.Helper()
	publishAll(t, s)
	failed := map[int64]bool{}
	for _, f := range failedIDs {
		failed[f] = true
	}
	outcomes := make([]store.Outcome, 0, n)
	for i := int64(1); i <= int64(n); i++ {
		o := store.Outcome{JobID: id, TaskID: i, State: warren.TaskCompleted, Attempts: 1, Worker: "w1",
			Result: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if failed[i] {
			o.State, o.Result, o.Error = warren.TaskFailed, nil, fmt.Sprintf("task %d broke", i)
		}
		outcomes = append(outcomes, o)
	}
	_, err := s.ApplyOutcomes(context.Background(), outcomes)
	require.NoError(t, err)
	job, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	closed, err := s.FinishJob(context.Background(), id, job.Version, state, result, "")
	require.NoError(t, err)
	require.True(t, closed)
}

// bearer returns the Authorization header pair for token.
func bearer(token string) []string {
	return []string{"Authorization", "Bearer " + token}
}
