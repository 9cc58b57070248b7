package api_test

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
)

// The OpenAPI document is kept true three ways:
//
//   - TestOpenAPIDocumentHasEveryRoute: the document has an operation for
//     every route the handler serves, and no other, with the same scope;
//   - conform, run on every response any test receives: the operation lists
//     the status, and the body validates against the documented schema, in
//     which every object is closed (a field the document does not name is
//     an error);
//   - TestMain, after a full run: every status the document lists for an
//     operation was produced by some test.

//go:embed openapi.json
var openAPIDocument []byte

// spec is the loaded document, with every object schema closed, and a
// router over it. Loaded once; only read after.
var spec = sync.OnceValues(func() (*openapiSpec, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPIDocument)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	closeObjects(doc)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &openapiSpec{doc: doc, router: router}, nil
})

type openapiSpec struct {
	doc    *openapi3.T
	router routers.Router
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

// observed records, per operation ("GET /v1/jobs/{id}"), the statuses the
// tests produced.
var observed = struct {
	sync.Mutex
	statuses map[string]map[int]bool
}{statuses: map[string]map[int]bool{}}

func observe(op string, status int) {
	observed.Lock()
	defer observed.Unlock()
	if observed.statuses[op] == nil {
		observed.statuses[op] = map[int]bool{}
	}
	observed.statuses[op][status] = true
}

// conform checks a response against the document: a request the document
// has an operation for must get a status the operation lists, with a body
// of the documented schema; any other must be a 404 or 405 with an error
// body, except the dashboard's files under /ui/, which the document leaves
// out.
func conform(t *testing.T, req *http.Request, resp response) {
	t.Helper()
	if req.URL.Path == "/ui" || strings.HasPrefix(req.URL.Path, "/ui/") {
		return // the dashboard's static files are not API operations (dashboard_test.go)
	}
	sp, err := spec()
	require.NoError(t, err)
	route, params, err := sp.router.FindRoute(req)
	if err != nil {
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.status,
			"%s %s has no operation in the document", req.Method, req.URL.Path)
		var v any
		require.NoError(t, json.Unmarshal(resp.body, &v))
		require.NoError(t, sp.doc.Components.Schemas["Error"].Value.VisitJSON(v), "body: %s", resp.body)
		return
	}
	observe(route.Method+" "+route.Path, resp.status)
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.status,
		Header:                 resp.header,
		Body:                   io.NopCloser(bytes.NewReader(resp.body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), input),
		"%s %s -> %d: %s", req.Method, req.URL, resp.status, resp.body)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && fullRun() {
		if missing := unobserved(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the OpenAPI document lists responses no test produced:\n\t%s\n", strings.Join(missing, "\n\t"))
			code = 1
		}
	}
	os.Exit(code)
}

// fullRun reports whether every test ran (no -run, -skip or -short).
func fullRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}

// unobserved lists the documented responses no test produced.
func unobserved() []string {
	sp, err := spec()
	if err != nil {
		return []string{err.Error()}
	}
	observed.Lock()
	defer observed.Unlock()
	var missing []string
	for path, item := range sp.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				code, _ := strconv.Atoi(status)
				if !observed.statuses[method+" "+path][code] {
					missing = append(missing, fmt.Sprintf("%s %s %s", method, path, status))
				}
			}
		}
	}
	slices.Sort(missing)
	return missing
}

func TestOpenAPIDocumentHasEveryRoute(t *testing.T) {
	t.Parallel()
	sp, err := spec()
	require.NoError(t, err)

	documented := map[string]string{} // "METHOD /path" -> x-required-scope
	for path, item := range sp.doc.Paths.Map() {
		for method, op := range item.Operations() {
			scope, _ := op.Extensions["x-required-scope"].(string)
			public := op.Security != nil && len(*op.Security) == 0
			require.NotEqual(t, public, scope != "", "%s %s: a public operation has security [] and no x-required-scope; any other has one", method, path)
			documented[method+" "+path] = scope
		}
	}
	served := map[string]string{}
	for pattern, scope := range api.Routes() {
		served[pattern] = string(scope)
	}
	require.Equal(t, served, documented, "routes served (with their scopes) vs operations documented")
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "r:read"})
	resp := b.get(t, "/v1/openapi.json") // public: no token
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, "application/json", resp.header.Get("Content-Type"))
	require.Equal(t, openAPIDocument, resp.body)
}
