package api

// The OpenAPI document against an implementation of OpenAPI (kin-openapi):
// the document a real server serves is valid OpenAPI 3.0, and that
// server's answers to a request of every kind validate against it.
// internal/api checks every response of its own tests with a checker on
// the standard library (openapidoc_test.go); this test is the reference
// that checker answers to, kept in this module so that kin-openapi is not
// a requirement of warren's.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store/sqlite"
	"github.com/warrenhq/warren/worker"
)

// The tokens of the test's server, one per scope.
const (
	readToken  = "read-token-1"
	writeToken = "write-token-2"
	adminToken = "admin-token-3"
)

// testBundle is a real server and a worker that echoes, and the document
// the server serves, loaded with kin-openapi.
type testBundle struct {
	url    string
	doc    *openapi3.T
	router routers.Router
	closed chan string // ids of the jobs the server closed
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	names, _ := amqptest.Topology(t, nil)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	tokens, err := server.ParseTokens(readToken + ":read," + writeToken + ":write," + adminToken + ":admin")
	require.NoError(t, err)
	b := &testBundle{closed: make(chan string, 16)}
	srv, err := server.New(server.Config{
		AMQPURL: amqptest.URL(), Store: st, Prefix: names.Prefix, Listen: "127.0.0.1:0", Tokens: tokens,
		RelayPollInterval: 20 * time.Millisecond, CloseScanInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
		Hooks:  server.Hooks{OnJobClosed: func(id string, _ warren.JobState) { b.closed <- id }},
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	b.url = srv.URL()

	w, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Concurrency: 2,
		ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, task worker.Task) (any, error) { return task.Payload, nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	resp, body := b.send(t, http.MethodGet, "/v1/openapi.json", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b.doc, err = openapi3.NewLoader().LoadFromData(body)
	require.NoError(t, err)
	require.NoError(t, b.doc.Validate(context.Background()), "the served document is valid OpenAPI 3.0")
	closeObjects(b.doc)
	b.router, err = legacy.NewRouter(b.doc)
	require.NoError(t, err)
	return b
}

// send sends a request with token (none if "") and a JSON body (none if
// "") and returns the answer, read whole.
func (b *testBundle) send(t *testing.T, method, path, token, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// check sends a request, requires the status want, and validates the
// answer against the document: the operation lists the status and the
// body has its schema, or, for a request the document has no operation
// for, a 404 or 405 with an error body. It returns the body.
func (b *testBundle) check(t *testing.T, want int, method, path, token, body string) []byte {
	t.Helper()
	resp, data := b.send(t, method, path, token, body)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, data)
	route, params, err := b.router.FindRoute(resp.Request)
	if err != nil {
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.StatusCode,
			"%s %s has no operation in the document", method, path)
		require.NoError(t, b.doc.Components.Schemas["Error"].Value.VisitJSON(jsonValue(t, data)), "body: %s", data)
		return data
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: resp.Request, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(data)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), input),
		"%s %s -> %d: %s", method, path, resp.StatusCode, data)
	return data
}

// TestOpenAPIAnswersOfARealServer sends a request of every kind the API
// answers (each route, each scope, the usual errors) to a real server and
// validates every answer with kin-openapi.
func TestOpenAPIAnswersOfARealServer(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Public routes, and a token's scopes.
	b.check(t, http.StatusOK, http.MethodGet, "/healthz", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/readyz", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/openapi.json", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/auth", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/auth", "", "")
	b.check(t, http.StatusUnauthorized, http.MethodGet, "/v1/auth", "not-a-token", "")
	b.check(t, http.StatusUnauthorized, http.MethodGet, "/v1/jobs", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/metrics", readToken, "")

	// A job that completes, with its result, tasks, timeline and deliveries.
	done := jsonValue(t, b.check(t, http.StatusAccepted, http.MethodPost, "/v1/jobs", writeToken,
		`{"type":"echo","reduce":"collect","metadata":{"team":"api"},"tasks":[{"n":1},{"n":2}]}`)).(map[string]any)["id"].(string)
	waitClosed(t, b, done)
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done, readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/result", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/tasks", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/timeline", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/deliveries", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs?limit=10", readToken, "")
	b.check(t, http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/cancel", adminToken, "")
	b.check(t, http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/redrive", adminToken, "")
	b.check(t, http.StatusNoContent, http.MethodDelete, "/v1/jobs/"+done, adminToken, "")
	b.check(t, http.StatusNotFound, http.MethodGet, "/v1/jobs/"+done, readToken, "")

	// Submissions refused, and the fleet.
	b.check(t, http.StatusForbidden, http.MethodPost, "/v1/jobs", readToken, `{"type":"echo","tasks":[{}]}`)
	b.check(t, http.StatusBadRequest, http.MethodPost, "/v1/jobs", writeToken, `{"type":`)
	b.check(t, http.StatusUnprocessableEntity, http.MethodPost, "/v1/jobs", writeToken, `{"type":"echo","tasks":[]}`)
	b.check(t, http.StatusBadRequest, http.MethodGet, "/v1/jobs?limit=x", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/workers", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/queues", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/deadletters", readToken, "")
	b.check(t, http.StatusOK, http.MethodPost, "/v1/deadletters/purge", adminToken, `{"all": true}`)

	// What the document has no operation for.
	b.check(t, http.StatusNotFound, http.MethodGet, "/v1/nothing", readToken, "")
	b.check(t, http.StatusMethodNotAllowed, http.MethodPut, "/v1/jobs", writeToken, "")
}

// jsonValue decodes a JSON body.
func jsonValue(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(data, &v), "body: %s", data)
	return v
}

// waitClosed waits until the server closed job id.
func waitClosed(t *testing.T, b *testBundle, id string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case closed := <-b.closed:
			if closed == id {
				return
			}
		case <-deadline:
			t.Fatalf("job %s did not close in 60 s", id)
		}
	}
}

// closeObjects sets additionalProperties: false on every object schema of
// doc that says nothing about additional properties, so that a response
// field the document does not describe fails validation.
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is(openapi3.TypeObject) && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			closed := false
			s.AdditionalProperties.Has = &closed
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				for _, mt := range resp.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}
