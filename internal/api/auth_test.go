package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tokens, err := api.ParseTokens(" abc123:read, def456:write ,root:admin,both:read+write,a:b:read")
	require.NoError(t, err)
	require.Equal(t, []api.Token{
		{Value: "abc123", Scopes: []api.Scope{api.ScopeRead}},
		{Value: "def456", Scopes: []api.Scope{api.ScopeWrite}},
		{Value: "root", Scopes: []api.Scope{api.ScopeAdmin}},
		{Value: "both", Scopes: []api.Scope{api.ScopeRead, api.ScopeWrite}},
		{Value: "a:b", Scopes: []api.Scope{api.ScopeRead}},
	}, tokens)

	tokens, err = api.ParseTokens("  ")
	require.NoError(t, err)
	require.Empty(t, tokens)

	for _, tc := range []struct{ in, want string }{
		{"secret", "entry 1: want token:scope"},
		{"ok:read,secret", "entry 2: want token:scope"},
		{":read", "entry 1: empty token value"},
		{"secret:", `entry 1: unknown scope ""`},
		{"secret:owner", `entry 1: unknown scope "owner"`},
		{"secret:read+", `entry 1: unknown scope ""`},
		{"ok:read,,x:read", "entry 2: want token:scope"},
		{"sec ret:read", "entry 1: the token value contains white space"},
		{"secret:read,secret:write", "entry 2: the same token is listed twice"},
	} {
		_, err := api.ParseTokens(tc.in)
		require.ErrorContains(t, err, tc.want, "input %q", tc.in)
		require.NotContains(t, err.Error(), "secret", "errors never repeat a token")
	}
}

func TestNewRejectsABadConfig(t *testing.T) {
	t.Parallel()
	_, err := api.New(api.Config{})
	require.ErrorContains(t, err, "Config.Store")

	s := openStore(t, sqliteStore, 0)
	_, err = api.New(api.Config{Store: s, MaxBodyBytes: -1})
	require.ErrorContains(t, err, "Config.MaxBodyBytes")
	_, err = api.New(api.Config{Store: s, Retention: time.Millisecond})
	require.ErrorContains(t, err, "Config.Retention must be at least 1s")
	_, err = api.New(api.Config{Store: s, Tokens: []api.Token{{Value: "t", Scopes: []api.Scope{"root"}}}})
	require.ErrorContains(t, err, "Config.Tokens[0]")
	_, err = api.New(api.Config{Store: s, Tokens: []api.Token{{Value: "t"}}})
	require.ErrorContains(t, err, "Config.Tokens[0]: the token has no scope")
}

// TestAuth sends every route no token, an unknown token and a token
// without the scope it needs, and checks the answers and that nothing was
// written.
func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "r0:read,w0:write,a0:admin,rw:read+write"})
	job := createJob(t, b.store, 2)

	type call struct {
		method, path, body string
		scope              api.Scope
	}
	submit := `{"type":"echo","tasks":[1]}`
	calls := []call{
		{http.MethodPost, "/v1/jobs", submit, api.ScopeWrite},
		{http.MethodGet, "/v1/jobs", "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID, "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/tasks", "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/tasks/1", "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/result", "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/events", "", api.ScopeRead},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/timeline", "", api.ScopeRead},
		{http.MethodPost, "/v1/jobs/" + job.ID + "/cancel", "", api.ScopeWrite},
		{http.MethodPost, "/v1/jobs/" + job.ID + "/redrive", "", api.ScopeWrite},
		{http.MethodDelete, "/v1/jobs/" + job.ID, "", api.ScopeWrite},
		{http.MethodGet, "/v1/jobs/" + job.ID + "/deliveries", "", api.ScopeRead},
		{http.MethodPost, "/v1/jobs/" + job.ID + "/pause", "", api.ScopeWrite},
		{http.MethodPost, "/v1/jobs/" + job.ID + "/resume", "", api.ScopeWrite},
		{http.MethodPost, "/v1/queues/q1/pause", "", api.ScopeWrite},
		{http.MethodPost, "/v1/queues/q1/resume", "", api.ScopeWrite},
		{http.MethodGet, "/metrics", "", api.ScopeRead},
	}
	for _, c := range calls {
		send := func(header ...string) response {
			if c.body != "" {
				header = append(header, "Content-Type", "application/json")
			}
			return b.do(t, c.method, c.path, strings.NewReader(c.body), header...)
		}
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			resp := send()
			requireError(t, resp, http.StatusUnauthorized, "unauthorized")
			require.True(t, strings.HasPrefix(resp.header.Get("WWW-Authenticate"), "Bearer"))

			for _, header := range [][]string{
				bearer("nope"),
				bearer("r0x"),
				bearer("r"),
				{"Authorization", "Basic cjA6"},
				{"Authorization", "Bearer"},
			} {
				resp = send(header...)
				requireError(t, resp, http.StatusUnauthorized, "unauthorized")
				require.True(t, strings.HasPrefix(resp.header.Get("WWW-Authenticate"), "Bearer"))
			}
			if c.scope == api.ScopeWrite {
				requireError(t, send(bearer("r0")...), http.StatusForbidden, "forbidden")
			}

			jobs := listAll(t, b)
			require.Len(t, jobs, 1, "the store is unchanged")
			require.Equal(t, "pending", jobs[0]["state"])
		})
	}

	// Public routes need no token.
	for _, path := range []string{"/healthz", "/readyz", "/v1/openapi.json"} {
		require.Equal(t, http.StatusOK, b.get(t, path).status, path)
	}
	// Every token reads; write and admin (and read+write) write.
	for _, tok := range []string{"r0", "w0", "a0", "rw"} {
		require.Equal(t, http.StatusOK, b.get(t, "/v1/jobs/"+job.ID, bearer(tok)...).status, tok)
		require.Equal(t, http.StatusOK, b.get(t, "/metrics", bearer(tok)...).status, tok)
	}
	for _, tok := range []string{"w0", "a0", "rw"} {
		resp := b.submit(t, submit, bearer(tok)...)
		require.Equal(t, http.StatusAccepted, resp.status, "%s: %s", tok, resp.body)
	}
	// The scheme is case-insensitive.
	require.Equal(t, http.StatusOK, b.get(t, "/v1/jobs", "Authorization", "bearer r0").status)
	resp := b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/cancel", nil, bearer("a0")...)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
}

// listAll returns the jobs the store holds, through the store.
func listAll(t *testing.T, b *testBundle) []map[string]any {
	t.Helper()
	jobs, _, err := b.store.ListJobs(t.Context(), store.ListJobsOpts{})
	require.NoError(t, err)
	out := make([]map[string]any, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, map[string]any{"id": j.ID, "state": string(j.State)})
	}
	return out
}
