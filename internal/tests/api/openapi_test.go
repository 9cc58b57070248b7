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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
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

// setup starts a server with the tokens of readToken, writeToken and
// adminToken, or, with noTokens, a server without tokens (a default one:
// loopback only, no token checked).
func setup(t *testing.T, noTokens bool) *testBundle {
	t.Helper()
	names, _ := amqptest.Topology(t, nil)
	amqptest.DeleteWorkQueuesAtEnd(t, names, []string{"nobody"}) // a job of the test waits on it
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var tokens []server.Token
	if !noTokens {
		tokens, err = server.ParseTokens(readToken + ":read," + writeToken + ":write," + adminToken + ":admin")
		require.NoError(t, err)
	}
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
// exchange against the document: a request the server accepted (2xx) is
// valid for its operation (parameters, body, security), and the answer
// has a status the operation lists and a body of its schema; a request
// the document has no operation for gets a 404 or 405 with an error
// body. It returns the body.
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
	if resp.StatusCode < 300 {
		require.NoError(t, b.validateRequest(t, method, path, token, body),
			"the server accepted %s %s, which the document refuses", method, path)
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
	b := setup(t, false)

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
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/tasks/1", readToken, "")
	b.check(t, http.StatusNotFound, http.MethodGet, "/v1/jobs/"+done+"/tasks/9", readToken, "")
	b.check(t, http.StatusBadRequest, http.MethodGet, "/v1/jobs/"+done+"/tasks/x", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/timeline", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/deliveries", readToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs?limit=10", readToken, "")
	// A job paused and resumed while it waits: no worker consumes its
	// queue, so it stays open.
	held := jsonValue(t, b.check(t, http.StatusAccepted, http.MethodPost, "/v1/jobs", writeToken,
		`{"type":"echo","queue":"nobody","tasks":[{"n":1}]}`)).(map[string]any)["id"].(string)
	b.check(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+held+"/pause", writeToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+held, readToken, "")
	b.check(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+held+"/resume", writeToken, "")
	b.check(t, http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/cancel", adminToken, "")
	b.check(t, http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/redrive", adminToken, "")
	b.check(t, http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/pause", adminToken, "")
	b.check(t, http.StatusOK, http.MethodPost, "/v1/queues/reports/pause", writeToken, "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/queues", readToken, "")
	b.check(t, http.StatusOK, http.MethodPost, "/v1/queues/reports/resume", writeToken, "")
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

// validateRequest validates a request as send would make it against the
// document, with kin-openapi's request validator: its operation's
// parameters, its body against the request body's schema, and its
// security, a scheme being met when the request carries a bearer token.
func (b *testBundle) validateRequest(t *testing.T, method, path, token, body string) error {
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
	route, params, err := b.router.FindRoute(req)
	require.NoError(t, err, "%s %s has no operation in the document", method, path)
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearerPresent},
	})
}

// bearerPresent is the document's bearerAuth as a client sees it: met when
// the request carries a bearer token (the server, not the document, knows
// which tokens it accepts).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return errors.New("no bearer token")
	}
	return nil
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

// TestOpenAPIDocumentForGenericTools checks what generic tools (validating
// proxies, client generators) read in the document: no schema is
// nullable without a type (which makes some validators accept anything:
// submissions, tasks and results went unchecked), any JSON value is
// AnyValue, every operation may be called without a token (a default
// server has none), and no schema a request body reaches has a
// `default` (generators make such a property required, so a generated
// client would have to send every defaulted field).
func TestOpenAPIDocumentForGenericTools(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../api/openapi.json")
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(data)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))

	var problems []string
	eachSchema(doc, func(where string, s *openapi3.Schema, _ bool) {
		if s.Nullable && s.Type == nil {
			problems = append(problems, where+": nullable without a type")
		}
	})
	require.Empty(t, problems)

	require.Contains(t, doc.Security, openapi3.SecurityRequirement{}, "security allows a request without a token")
	require.Contains(t, doc.Security, openapi3.SecurityRequirement{"bearerAuth": []string{}})

	eachSchema(doc, func(where string, s *openapi3.Schema, inRequest bool) {
		if inRequest && s.Default != nil {
			problems = append(problems, fmt.Sprintf("%s: default %v in a request body's schema", where, s.Default))
		}
	})
	require.Empty(t, problems)

	// AnyValue takes every JSON value, and only one of its branches does.
	anyValue := doc.Components.Schemas["AnyValue"].Value
	for _, v := range []string{`null`, `1`, `1.5`, `"s"`, `true`, `{"a":[null,{}]}`, `[1,"a",null,[{}]]`} {
		require.NoError(t, anyValue.VisitJSON(jsonValue(t, []byte(v))), "AnyValue takes %s", v)
	}
}

// eachSchema calls f on every schema of doc, once per place it is reached
// from (a component, a request body, a response), with where it is and
// whether a request body reaches it.
func eachSchema(doc *openapi3.T, f func(where string, s *openapi3.Schema, inRequest bool)) {
	var walk func(where string, ref *openapi3.SchemaRef, inRequest bool, seen map[*openapi3.Schema]bool)
	walk = func(where string, ref *openapi3.SchemaRef, inRequest bool, seen map[*openapi3.Schema]bool) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		seen[ref.Value] = true
		s := ref.Value
		f(where, s, inRequest)
		for name, p := range s.Properties {
			walk(where+"/properties/"+name, p, inRequest, seen)
		}
		walk(where+"/items", s.Items, inRequest, seen)
		walk(where+"/additionalProperties", s.AdditionalProperties.Schema, inRequest, seen)
		for i, o := range s.OneOf {
			walk(fmt.Sprintf("%s/oneOf/%d", where, i), o, inRequest, seen)
		}
		for i, o := range s.AnyOf {
			walk(fmt.Sprintf("%s/anyOf/%d", where, i), o, inRequest, seen)
		}
		for i, o := range s.AllOf {
			walk(fmt.Sprintf("%s/allOf/%d", where, i), o, inRequest, seen)
		}
	}
	for name, s := range doc.Components.Schemas {
		walk("#/components/schemas/"+name, s, false, map[*openapi3.Schema]bool{})
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			at := method + " " + path
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for mt, c := range op.RequestBody.Value.Content {
					walk(at+" request "+mt, c.Schema, true, map[*openapi3.Schema]bool{})
				}
			}
			for code, resp := range op.Responses.Map() {
				for mt, c := range resp.Value.Content {
					walk(at+" "+code+" "+mt, c.Schema, false, map[*openapi3.Schema]bool{})
				}
			}
		}
	}
}

// TestOpenAPIRequestsOfARealServer validates requests with kin-openapi's
// request validator: what the server takes, the document takes (tasks of
// every JSON type, null included; a submission with only type and tasks;
// no token on a server without tokens), and what the server refuses for
// its shape, the document refuses too.
func TestOpenAPIRequestsOfARealServer(t *testing.T) {
	t.Parallel()
	b := setup(t, true)

	// A default server: no token anywhere, and the document agrees.
	b.check(t, http.StatusOK, http.MethodGet, "/v1/auth", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs", "", "")
	id := jsonValue(t, b.check(t, http.StatusAccepted, http.MethodPost, "/v1/jobs", "",
		`{"type":"echo","tasks":[null,1,2.5,"s",true,{"a":{"b":[1]}},[1,[2]]]}`)).(map[string]any)["id"].(string)
	waitClosed(t, b, id)
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id+"/tasks", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id+"/result", "", "")
	b.check(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id, "", "")
	b.check(t, http.StatusAccepted, http.MethodPost, "/v1/jobs", "",
		`{"type":"echo","reduce":{"task":"echo","payload":null},"max_retries":0,"priority":20,"queue":"default","tasks":[{}]}`)
	b.check(t, http.StatusOK, http.MethodPost, "/v1/deadletters/replay", "", `{"job_id":"`+id+`","limit":1}`)
	b.check(t, http.StatusOK, http.MethodPost, "/v1/deadletters/purge", "", `{"job_id":"`+id+`"}`)

	// Shapes the server refuses, which the document refuses as well, so a
	// validating proxy or a generated client stops them first.
	for _, body := range []string{
		`{"type":"echo","tasks":"x"}`,
		`{"type":"echo","tasks":[]}`,
		`{"tasks":[1]}`,
		`{"type":"echo","tasks":[1],"max_retries":-1}`,
		`{"type":"echo","tasks":[1],"priority":0}`,
		`{"type":"echo","tasks":[1],"queue":"Not A Queue"}`,
		`{"type":"echo","tasks":[1],"reduce":{"payload":1}}`,
		`{"type":"echo","tasks":[1],"unknown":1}`,
	} {
		resp, data := b.send(t, http.MethodPost, "/v1/jobs", "", body)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnprocessableEntity}, resp.StatusCode, "%s: %s", body, data)
		require.Error(t, b.validateRequest(t, http.MethodPost, "/v1/jobs", "", body), "the document takes %s", body)
	}
	require.Error(t, b.validateRequest(t, http.MethodPost, "/v1/deadletters/replay", "", `{"limit":0}`))
}

// TestOpenAPIFilterTooLargeNamesTheLimit sends a dead-letter replay and a
// purge over their body limit: each answer is the documented 413, and the
// limit its message names is the one the document gives.
func TestOpenAPIFilterTooLargeNamesTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	documented := b.doc.Components.Responses["FilterTooLarge"].Value.Description
	limit := regexp.MustCompile(`\((\d+) bytes\)`).FindStringSubmatch(*documented)
	require.NotNil(t, limit, "the 413 of a filter names its limit in bytes: %s", *documented)
	big := `{"job_id":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, path := range []string{"/v1/deadletters/replay", "/v1/deadletters/purge"} {
		var answer struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(b.check(t, http.StatusRequestEntityTooLarge, http.MethodPost, path, adminToken, big), &answer))
		require.Equal(t, "too_large", answer.Error.Code)
		require.Contains(t, answer.Error.Message, "limit of "+limit[1]+" bytes", path)
	}
}
