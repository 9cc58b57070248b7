package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/ui"
	"github.com/warrenhq/warren/store"
)

func TestAuthInfoSaysWhatTheTokenMayDo(t *testing.T) {
	t.Parallel()
	open := setup(t, nil)
	require.Equal(t, map[string]any{"auth_required": false, "scopes": []any{"read", "write", "admin"}},
		open.get(t, "/v1/auth").json(t), "without tokens everything is allowed")

	b := setup(t, &options{tokens: "r0:read,w0:write,a0:admin,rw:read+write"})
	for _, tc := range []struct {
		header []string
		scopes []any
	}{
		{nil, []any{}},
		{bearer("r0"), []any{"read"}},
		{bearer("w0"), []any{"read", "write"}},
		{bearer("rw"), []any{"read", "write"}},
		{bearer("a0"), []any{"read", "write", "admin"}},
	} {
		resp := b.get(t, "/v1/auth", tc.header...)
		require.Equal(t, http.StatusOK, resp.status, "%v: %s", tc.header, resp.body)
		require.Equal(t, map[string]any{"auth_required": true, "scopes": tc.scopes}, resp.json(t), "%v", tc.header)
	}
	resp := b.get(t, "/v1/auth", bearer("nope")...)
	requireError(t, resp, http.StatusUnauthorized, "unauthorized")
	require.True(t, strings.HasPrefix(resp.header.Get("WWW-Authenticate"), "Bearer"))
}

func TestListJobsFiltersByType(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			var echo []string
			for _, typ := range []string{"echo", "sleep", "echo", "echo 2"} {
				job, _, err := b.store.CreateJob(t.Context(), store.NewJob{Type: typ}, payloads(1))
				require.NoError(t, err)
				if typ == "echo" {
					echo = append([]string{job.ID}, echo...)
				}
			}
			ids := func(path string) []string {
				var out []string
				for _, j := range b.get(t, path).json(t)["jobs"].([]any) {
					out = append(out, j.(map[string]any)["id"].(string))
				}
				return out
			}
			require.Equal(t, echo, ids("/v1/jobs?type=echo"))
			require.Len(t, ids("/v1/jobs?type="+url.QueryEscape("echo 2")), 1)
			require.Equal(t, echo[:1], ids("/v1/jobs?type=echo&state=pending&limit=1"))
			require.Empty(t, ids("/v1/jobs?type=ech"))

			page := b.get(t, "/v1/jobs?type=echo&limit=1").json(t)
			next := page["next_cursor"].(string)
			require.Equal(t, echo[1:], ids("/v1/jobs?type=echo&limit=1&cursor="+url.QueryEscape(next)))

			requireError(t, b.get(t, "/v1/jobs?type=%00"), http.StatusBadRequest, "invalid_parameter")
		})
	}
}

func TestJobTimelineCountsFinishedTasks(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			job := createJob(t, b.store, 4)
			publishAll(t, b.store)
			at := job.CreatedAt.Add(-time.Hour) // before the span: counted in its first bucket
			_, err := b.store.ApplyOutcomes(t.Context(), []store.Outcome{
				{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: []byte(`1`), FinishedAt: &at},
				{JobID: job.ID, TaskID: 2, State: warren.TaskFailed, Error: "boom", FinishedAt: &at},
				{JobID: job.ID, TaskID: 3, State: warren.TaskCompleted, Result: []byte(`3`)}, // now
			})
			require.NoError(t, err)

			v := b.get(t, "/v1/jobs/"+job.ID+"/timeline").json(t)
			require.Equal(t, float64(1), v["bucket_seconds"], "an open job of a few seconds: 1 s buckets")
			buckets := v["buckets"].([]any)
			require.NotEmpty(t, buckets)
			require.LessOrEqual(t, len(buckets), store.MaxTimelineBuckets)
			first, err := time.Parse(time.RFC3339, buckets[0].(map[string]any)["start"].(string))
			require.NoError(t, err)
			require.Equal(t, job.CreatedAt.UTC().Truncate(time.Second), first)
			var completed, failed float64
			for _, raw := range buckets {
				bk := raw.(map[string]any)
				completed += bk["completed"].(float64)
				failed += bk["failed"].(float64)
			}
			require.Equal(t, float64(2), completed)
			require.Equal(t, float64(1), failed)
			require.Equal(t, float64(1), buckets[0].(map[string]any)["failed"], "task 2 in the first bucket")

			requireError(t, b.get(t, "/v1/jobs/nope/timeline"), http.StatusNotFound, "not_found")
		})
	}
}

// noRedirect is a client of b's server that does not follow redirects.
func noRedirect(b *testBundle) *http.Client {
	c := *b.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func TestDashboardIsServedAtUI(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "r0:read"}) // the files are public
	c := noRedirect(b)
	get := func(path string, header ...string) response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		return send(t, c, req)
	}

	resp := get("/ui")
	require.Equal(t, http.StatusMovedPermanently, resp.status)
	require.Equal(t, "/ui/", resp.header.Get("Location"))

	index := get("/ui/")
	require.Equal(t, http.StatusOK, index.status)
	require.Equal(t, "text/html; charset=utf-8", index.header.Get("Content-Type"))
	require.Contains(t, string(index.body), `<script type="module" src="/ui/app.js">`)
	require.Equal(t, ui.ContentSecurityPolicy, index.header.Get("Content-Security-Policy"))
	require.NotContains(t, ui.ContentSecurityPolicy, "unsafe")
	require.Contains(t, ui.ContentSecurityPolicy, "frame-ancestors 'none'")
	require.Equal(t, "nosniff", index.header.Get("X-Content-Type-Options"))
	require.Equal(t, "no-referrer", index.header.Get("Referrer-Policy"))
	require.Equal(t, "DENY", index.header.Get("X-Frame-Options"))
	require.Equal(t, "no-cache", index.header.Get("Cache-Control"))
	require.NotEmpty(t, index.header.Get("ETag"))

	// The page's own routes serve the same page.
	for _, path := range []string{"/ui/jobs", "/ui/jobs/01M8NF96SCAVAGBJ22J3N17ZQZ", "/ui/deadletters", "/ui/queues"} {
		resp := get(path)
		require.Equal(t, http.StatusOK, resp.status, path)
		require.Equal(t, index.body, resp.body, path)
	}

	js := get("/ui/app.js")
	require.Equal(t, http.StatusOK, js.status)
	require.Equal(t, "text/javascript; charset=utf-8", js.header.Get("Content-Type"))
	require.Equal(t, ui.ContentSecurityPolicy, js.header.Get("Content-Security-Policy"))
	require.Equal(t, http.StatusNotModified, get("/ui/app.js", "If-None-Match", js.header.Get("ETag")).status, "revalidated cheaply")
	require.Equal(t, "text/css; charset=utf-8", get("/ui/style.css").header.Get("Content-Type"))

	missing := get("/ui/nope.js")
	require.Equal(t, http.StatusNotFound, missing.status, "an unknown file is not the page")
	require.Equal(t, http.StatusMethodNotAllowed, send(t, c, mustRequest(t, http.MethodPost, b.srv.URL+"/ui/")).status)
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	return req
}
