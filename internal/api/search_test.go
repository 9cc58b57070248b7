package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestListJobsSearches(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			gpu := b.mustSubmit(t, `{"type":"thumbnail","queue":"gpu","metadata":{"customer":"Acme Corp"},"tasks":[{}]}`)
			plain := b.mustSubmit(t, `{"type":"echo","metadata":{"customer":"Globex"},"tasks":[{},{}]}`)
			publishAll(t, b.store)
			_, err := b.store.ApplyOutcomes(t.Context(), []store.Outcome{
				{JobID: plain, TaskID: 2, State: warren.TaskFailed, Error: "KeyError: 'width'"},
			})
			require.NoError(t, err)
			ids := func(query string) []string {
				resp := b.get(t, "/v1/jobs?"+query)
				require.Equal(t, http.StatusOK, resp.status, "%s: %s", query, resp.body)
				return jobIDs(resp.json(t)["jobs"])
			}

			require.Equal(t, []string{gpu}, ids("q=acme"), "a metadata value")
			require.Equal(t, []string{plain}, ids("q="+url.QueryEscape("'width'")), "a task's error")
			require.Equal(t, []string{gpu}, ids("q=thumb&queue=gpu"))
			require.Empty(t, ids("q=thumb&queue=default"))
			require.Equal(t, []string{plain}, ids("queue=default"))
			require.Equal(t, []string{plain}, ids("q="+plain[:20]+"&state=running"), "an id prefix, with a state")
			require.Equal(t, []string{gpu}, ids("q=corp&limit=1"))

			job, err := b.store.GetJob(t.Context(), plain)
			require.NoError(t, err)
			at := job.CreatedAt.UTC().Format(time.RFC3339Nano)
			require.Contains(t, ids("created_after="+url.QueryEscape(at)), plain, "created_after is inclusive")
			require.NotContains(t, ids("created_before="+url.QueryEscape(at)), plain, "created_before is not")
			require.Empty(t, ids("created_after="+url.QueryEscape(job.CreatedAt.Add(time.Hour).UTC().Format(time.RFC3339))))
			plus := job.CreatedAt.Add(-time.Hour).In(time.FixedZone("", 3600)).Format(time.RFC3339Nano)
			require.Contains(t, plus, "+01:00")
			require.Contains(t, ids("created_after="+url.QueryEscape(plus)), plain, "an offset")
			require.Contains(t, ids("created_after="+plus), plain, "an offset whose + arrived as a space")

			for _, query := range []string{
				"q=ab", "q=%00abc", "q=" + strings.Repeat("x", store.MaxSearchBytes+1), "q=%ff%fe%fd",
				"queue=%01", "created_after=yesterday", "created_before=2026-13-01T00:00:00Z",
				"created_after=2026-12-02", "q=abc&limit=0",
			} {
				requireError(t, b.get(t, "/v1/jobs?"+query), http.StatusBadRequest, "invalid_parameter")
			}
			resp := b.get(t, "/v1/jobs?q=ab")
			require.Contains(t, string(resp.body), "at least 3 characters")
		})
	}
}
