package api_test

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

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
//
// The checker is openapidoc_test.go, on the standard library; that the
// document is valid OpenAPI, and a real server's answers valid against it
// by an implementation of OpenAPI, is internal/tests/api.

//go:embed openapi.json
var openAPIDocument []byte

// spec is the loaded document (openapidoc_test.go). Loaded once; only
// read after.
var spec = sync.OnceValues(func() (*openapiDoc, error) { return loadOpenAPI(openAPIDocument) })

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
	tmpl, op := sp.route(req.Method, req.URL.Path)
	if op == nil {
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.status,
			"%s %s has no operation in the document", req.Method, req.URL.Path)
		var v any
		require.NoError(t, json.Unmarshal(resp.body, &v))
		require.NoError(t, sp.validate(&schema{Ref: "#/components/schemas/Error"}, v, "body"), "body: %s", resp.body)
		return
	}
	observe(req.Method+" "+tmpl, resp.status)
	require.NoError(t, sp.validateResponse(op, resp.status, resp.header, resp.body),
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
	for key, op := range sp.ops {
		for status := range op.Responses {
			code, _ := strconv.Atoi(status)
			if !observed.statuses[key][code] {
				missing = append(missing, key+" "+status)
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
	for key, op := range sp.ops {
		public := op.Security != nil && len(*op.Security) == 0
		require.NotEqual(t, public, op.Scope != "", "%s: a public operation has security [] and no x-required-scope; any other has one", key)
		documented[key] = op.Scope
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
