package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/protocol"
)

// submission is one body of a submission test, with its content type.
type submission struct {
	name, contentType, body string
}

// submissions returns the same job as a streamed JSON body (tasks last), a
// buffered one (tasks first) and NDJSON, with the given task payloads.
func submissions(tasks ...string) []submission {
	return []submission{
		{"json, tasks streamed", "application/json", `{` + fullSpec + `,"tasks":[` + strings.Join(tasks, ",") + `]}`},
		{"json, tasks buffered", "application/json", `{"tasks":[` + strings.Join(tasks, ",") + `],"type":"echo"}`},
		{"ndjson", "application/x-ndjson", "{\"type\":\"echo\"}\n" + strings.Join(tasks, "\n") + "\n"},
	}
}

// A task payload over Config.MaxTaskBytes is refused with 413 naming the
// task (and, in NDJSON, its line), and nothing is written; one at the
// limit is accepted.
func TestSubmitRefusesATaskOverThePerTaskLimit(t *testing.T) {
	t.Parallel()
	const limit = 64
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind, onNew: func(_ *testing.T, cfg *api.Config) { cfg.MaxTaskBytes = limit }})
			atLimit := `"` + strings.Repeat("a", limit-2) + `"`
			over := `"` + strings.Repeat("b", limit-1) + `"`
			for _, sub := range submissions(`1`, atLimit, over, `4`) {
				t.Run(sub.name, func(t *testing.T) {
					for _, body := range []io.Reader{strings.NewReader(sub.body), io.MultiReader(strings.NewReader(sub.body))} { // with and without Content-Length
						resp := b.do(t, http.MethodPost, "/v1/jobs", body, "Content-Type", sub.contentType)
						requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
						want := "task 3 is 65 bytes, over the limit of 64 bytes per task"
						if sub.contentType == "application/x-ndjson" {
							want = "task 3 (line 4) is 65 bytes, over the limit of 64 bytes per task"
						}
						require.Contains(t, errorMessage(t, resp), want)
						requireNoJobs(t, b.store)
					}
				})
			}
			for _, sub := range submissions(`1`, atLimit, `3`) {
				resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
				require.Equal(t, http.StatusAccepted, resp.status, "%s: %s", sub.name, resp.body)
			}
		})
	}
}

// An NDJSON line far over the per-task limit is refused as soon as the
// limit is passed, without reading the line whole.
func TestSubmitCutsALongNDJSONLineAtTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.MaxTaskBytes = 1000 }})
	huge := `"` + strings.Repeat("x", 4<<20) + `"`
	resp := b.submitNDJSON(t, "{\"type\":\"echo\"}\n\n1\n"+huge+"\n3\n")
	requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
	require.Contains(t, errorMessage(t, resp), "task 2 (line 4) is larger than the limit of 1000 bytes per task")
	requireNoJobs(t, b.store)
}

// The default per-task limit is 1 MiB.
func TestSubmitDefaultPerTaskLimitIsOneMiB(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1<<20, api.DefaultMaxTaskBytes)
	b := setup(t, nil)
	atLimit := `"` + strings.Repeat("a", api.DefaultMaxTaskBytes-2) + `"`
	b.mustSubmit(t, `{"type":"echo","tasks":[`+atLimit+`]}`)
	over := `"` + strings.Repeat("b", api.DefaultMaxTaskBytes-1) + `"`
	resp := b.submit(t, `{"type":"echo","tasks":[1,`+over+`]}`)
	requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
	require.Contains(t, errorMessage(t, resp), "task 2 is 1048577 bytes")
}

// nestedArray returns a JSON array nested depth levels deep.
func nestedArray(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// nestedObject returns a JSON object nested depth levels deep.
func nestedObject(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat("}", depth-1)
}

// A payload nested deeper than the wire protocol carries
// (protocol.MaxPayloadDepth) is refused at submit, naming the task,
// instead of being accepted and then dead-lettered by the worker as
// malformed; one at the limit is accepted.
func TestSubmitRefusesAPayloadNestedDeeperThanTheProtocolCarries(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			for _, deep := range []string{
				nestedArray(protocol.MaxPayloadDepth + 1),
				nestedObject(protocol.MaxPayloadDepth + 1),
				`{"ok":[1,2,{"s":"]]]"}],"deep":` + nestedArray(protocol.MaxPayloadDepth) + `}`,
			} {
				for _, sub := range submissions(`1`, deep) {
					t.Run(sub.name, func(t *testing.T) {
						resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
						requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
						require.Contains(t, errorMessage(t, resp), "task 2")
						require.Contains(t, errorMessage(t, resp), "nested 62 levels deep: payloads may nest arrays and objects at most 61 levels")
						requireNoJobs(t, b.store)
					})
				}
			}
			for _, sub := range submissions(nestedArray(protocol.MaxPayloadDepth), nestedObject(protocol.MaxPayloadDepth), `"[[[[[["`) {
				resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
				require.Equal(t, http.StatusAccepted, resp.status, "%s: %s", sub.name, resp.body)
			}
		})
	}
}

// The payload of the report: nested 10,000 levels, it was accepted
// through NDJSON and a streamed JSON body (and then dead-lettered by the
// worker). It is refused at submit.
func TestSubmitRefusesAPayloadNestedTenThousandLevels(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	deep := nestedArray(10000)
	for _, sub := range submissions(deep)[:1] { // streamed JSON
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
		requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
		require.Contains(t, errorMessage(t, resp), "task 1 is nested 10000 levels deep")
	}
	resp := b.submitNDJSON(t, "{\"type\":\"echo\"}\n"+deep+"\n")
	requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
	require.Contains(t, errorMessage(t, resp), "task 1 (line 2) is nested 10000 levels deep")
	requireNoJobs(t, b.store)
}

// A submission of more tasks than Config.MaxJobTasks is refused with 413,
// and nothing is written; one at the limit is accepted.
func TestSubmitRefusesAJobOverThePerJobLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.MaxJobTasks = 3 }})
	for _, sub := range submissions(`1`, `2`, `3`, `4`) {
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
		requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
		require.Contains(t, errorMessage(t, resp), "the job has more than 3 tasks, over the limit of 3 tasks per job", sub.name)
		requireNoJobs(t, b.store)
	}
	for _, sub := range submissions(`1`, `2`, `3`) {
		resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(sub.body), "Content-Type", sub.contentType)
		require.Equal(t, http.StatusAccepted, resp.status, "%s: %s", sub.name, resp.body)
	}
}

// A follow-up job is held to the per-job limit too: the store makes it
// from the previous job's result, so the limit travels with its spec.
func TestAFollowUpCarriesThePerJobLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.MaxJobTasks = 3 }})
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1],"then":{"type":"echo","then":{"type":"echo"}}}`)
	finish(t, b.store, id, 1, warren.JobCompleted, []byte(`[1, 2, 3, 4]`))
	job, err := b.store.GetJob(t.Context(), id)
	require.NoError(t, err)
	next, err := b.store.GetJob(t.Context(), job.NextJob)
	require.NoError(t, err)
	require.Equal(t, warren.JobFailed, next.State)
	require.Contains(t, next.Error, "has more than 3 elements, the most tasks a job may have")
}
