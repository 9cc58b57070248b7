package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// fullSpec is every job field but tasks, so that a "tasks" after it
// streams.
const fullSpec = `"type":"echo","reduce":"sum","max_retries":5,"tolerated_failures":2,` +
	`"tolerated_failure_percent":12.5,"fail_fast":true,"task_timeout":900,"batch_size":16,"priority":30,"max_concurrency":7,"queue":"gpu","retention":86400,"metadata":{"owner":"ops"},` +
	`"webhook":{"url":"https://93.184.215.14/hooks/warren","secret":"` + fullSpecSecret + `"},"then":null`

// fullSpecSecret is fullSpec's webhook secret, which no answer shows.
const fullSpecSecret = "fullspec-s3cret"

func TestSubmitJSON(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			for name, body := range map[string]string{
				"tasks last (streamed)":    `{` + fullSpec + `,"tasks":[{"n": 1}, [2], "three", 4, null, true]}`,
				"tasks first (buffered)":   `{"tasks":[{"n": 1}, [2], "three", 4, null, true],` + fullSpec + `}`,
				"tasks between (buffered)": `{"type":"echo","reduce":"sum","max_retries":5,"tasks":[{"n": 1}, [2], "three", 4, null, true],"tolerated_failures":2,"tolerated_failure_percent":12.5,"fail_fast":true,"task_timeout":900,"batch_size":16,"priority":30,"max_concurrency":7,"queue":"gpu","retention":86400,"metadata":{"owner":"ops"},"webhook":{"url":"https://93.184.215.14/hooks/warren","secret":"` + fullSpecSecret + `"}}`,
			} {
				t.Run(name, func(t *testing.T) {
					resp := b.submit(t, body)
					require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
					v := resp.json(t)
					id := v["id"].(string)
					require.Equal(t, "/v1/jobs/"+id, resp.header.Get("Location"))
					require.Equal(t, map[string]any{"id": id, "state": "pending", "status_url": "/v1/jobs/" + id}, v)
					require.Contains(t, b.onSubmitCalls(), id)

					job, err := b.store.GetJob(context.Background(), id)
					require.NoError(t, err)
					require.Equal(t, "echo", job.Type)
					require.Equal(t, int64(6), job.ExpectedTasks)
					require.Equal(t, warren.Policy{Reduce: "sum", MaxRetries: 5, ToleratedFailures: 2, ToleratedFailurePercent: 12.5,
						FailFast: true, TaskTimeout: 900 * time.Second, BatchSize: 16, Priority: 30, MaxConcurrency: 7, Queue: "gpu", Retention: 24 * time.Hour}, job.Policy)
					require.JSONEq(t, `{"owner":"ops"}`, string(job.Metadata))
					require.Equal(t, "https://93.184.215.14/hooks/warren", job.WebhookURL)
					require.Equal(t, []string{`{"n": 1}`, `[2]`, `"three"`, `4`, `null`, `true`},
						payloadsOf(t, b.store, id), "payloads are stored byte for byte, in order")
				})
			}
		})
	}
}

func TestSubmitDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`)
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, warren.Policy{Reduce: "collect", MaxRetries: warren.DefaultMaxRetries}, job.Policy, "no batch_size: warren chooses")
	require.Nil(t, job.Metadata)

	// null is the same as absent; an explicit 0 is not.
	id = b.mustSubmit(t, `{"type":"echo","tasks":[1],"reduce":null,"max_retries":null,"metadata":null}`)
	job, err = b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, warren.Policy{Reduce: "collect", MaxRetries: warren.DefaultMaxRetries}, job.Policy, "no batch_size: warren chooses")
	require.Nil(t, job.Metadata)
	id = b.mustSubmit(t, `{"type":"echo","tasks":[1],"max_retries":0}`)
	job, err = b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, 0, job.Policy.MaxRetries)
}

func TestSubmitIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			key := []string{"Idempotency-Key", "order-42"}
			first := b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`, key...)
			again := b.mustSubmit(t, `{"type":"echo","tasks":[1,2,3]}`, key...)
			require.Equal(t, first, again)
			// The same key with another body is not a replay (Stripe's
			// rule): refused, and nothing is written.
			ndjson := b.submitNDJSON(t, "{\"type\":\"other\"}\n7\n", key...)
			requireError(t, ndjson, http.StatusUnprocessableEntity, "idempotency_key_reused")
			requireError(t, b.submit(t, `{"type":"echo","tasks":[1,2,4]}`, key...), http.StatusUnprocessableEntity, "idempotency_key_reused")
			other := b.mustSubmit(t, `{"type":"echo","tasks":[1]}`, "Idempotency-Key", "order-43")
			require.NotEqual(t, first, other)

			jobs, _, err := b.store.ListJobs(context.Background(), store.ListJobsOpts{})
			require.NoError(t, err)
			require.Len(t, jobs, 2)
			require.Equal(t, int64(3), jobs[1].ExpectedTasks, "the first job keeps its tasks")
			require.Equal(t, []string{first, other}, b.onSubmitCalls(), "OnSubmit runs for created jobs only")
		})
	}
}

func TestSubmitNDJSON(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			var body strings.Builder
			body.WriteString(`{"type":"wordcount","reduce":"merge","metadata":{"corpus":"x"}}` + "\n\n")
			want := make([]string, 0, 1000)
			for i := 1; i <= 1000; i++ {
				p := fmt.Sprintf(`{"text":"line %d"}`, i)
				want = append(want, p)
				body.WriteString(p + "\r\n")
				if i%100 == 0 {
					body.WriteString("   \n") // blank lines are skipped
				}
			}
			resp := b.submitNDJSON(t, strings.TrimSuffix(body.String(), "\r\n")) // the last line has no newline
			require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
			id := resp.json(t)["id"].(string)
			require.Equal(t, "/v1/jobs/"+id, resp.header.Get("Location"))

			job, err := b.store.GetJob(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, "wordcount", job.Type)
			require.Equal(t, int64(1000), job.ExpectedTasks)
			require.Equal(t, "merge", job.Policy.Reduce)
			require.Equal(t, warren.DefaultMaxRetries, job.Policy.MaxRetries)
			require.Equal(t, want, payloadsOf(t, b.store, id))
		})
	}
}

func TestSubmitNDJSONMalformedLineLeavesNoJob(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			var body strings.Builder
			body.WriteString(`{"type":"echo"}` + "\n")
			for i := 1; i <= 1000; i++ {
				if i == 600 {
					body.WriteString(`{"i": 600` + "\n") // line 601 of the body
					continue
				}
				fmt.Fprintf(&body, `{"i":%d}`+"\n", i)
			}
			resp := b.submitNDJSON(t, body.String())
			requireError(t, resp, http.StatusBadRequest, "invalid_json")
			require.Contains(t, errorMessage(t, resp), "line 601")
			requireNoJobs(t, b.store)
			require.Empty(t, b.onSubmitCalls())
		})
	}
}

// TestSubmitBadInput sends bodies that must each be refused with a 4xx and
// leave the store as it was.
func TestSubmitBadInput(t *testing.T) {
	t.Parallel()
	type badInput struct {
		name        string
		contentType string
		body        string
		header      []string
		status      int
		code        string
	}
	const j, nd = "application/json", "application/x-ndjson"
	tooLongType := strings.Repeat("t", 256)
	cases := []badInput{
		// Malformed JSON.
		{"empty body", j, ``, nil, 400, "invalid_json"},
		{"truncated", j, `{"type":"echo","tasks":[1,2`, nil, 400, "invalid_json"},
		{"syntax error", j, `{"type":"echo" "tasks":[1]}`, nil, 400, "invalid_json"},
		{"bad task element", j, `{"type":"echo","tasks":[1,{"a":}]}`, nil, 400, "invalid_json"},
		{"bad task element (streamed)", j, `{` + fullSpec + `,"tasks":[1,2,{"a":}]}`, nil, 400, "invalid_json"},
		{"truncated (streamed)", j, `{` + fullSpec + `,"tasks":[1,2`, nil, 400, "invalid_json"},
		{"trailing data", j, `{"type":"echo","tasks":[1]} x`, nil, 400, "invalid_json"},
		{"second object", j, `{"type":"echo","tasks":[1]}{}`, nil, 400, "invalid_json"},
		{"trailing data (streamed)", j, `{` + fullSpec + `,"tasks":[1]} x`, nil, 400, "invalid_json"},
		{"duplicate field", j, `{"type":"echo","type":"echo","tasks":[1]}`, nil, 400, "invalid_json"},
		{"duplicate field after streamed tasks", j, `{` + fullSpec + `,"tasks":[1],"type":"x"}`, nil, 400, "invalid_json"},
		// Wrong types.
		{"not an object", j, `[1,2]`, nil, 400, "invalid_type"},
		{"type is a number", j, `{"type":5,"tasks":[1]}`, nil, 400, "invalid_type"},
		{"max_retries is a string", j, `{"type":"echo","tasks":[1],"max_retries":"3"}`, nil, 400, "invalid_type"},
		{"max_retries is a fraction", j, `{"type":"echo","tasks":[1],"max_retries":1.5}`, nil, 400, "invalid_type"},
		{"max_retries overflows", j, `{"type":"echo","tasks":[1],"max_retries":1e30}`, nil, 400, "invalid_type"},
		{"tolerated_failures is a bool", j, `{"type":"echo","tasks":[1],"tolerated_failures":true}`, nil, 400, "invalid_type"},
		{"tolerated_failure_percent is a string", j, `{"type":"echo","tasks":[1],"tolerated_failure_percent":"5%"}`, nil, 400, "invalid_type"},
		{"fail_fast is a string", j, `{"type":"echo","tasks":[1],"fail_fast":"yes"}`, nil, 400, "invalid_type"},
		{"task_timeout is a boolean", j, `{"type":"echo","tasks":[1],"task_timeout":true}`, nil, 400, "invalid_type"},
		{"task_timeout is not a duration", j, `{"type":"echo","tasks":[1],"task_timeout":"1 hour"}`, nil, 400, "invalid_type"},
		{"task_timeout duration under a second", j, `{"type":"echo","tasks":[1],"task_timeout":"500ms"}`, nil, 422, "validation_failed"},
		{"retention is not a duration", j, `{"type":"echo","tasks":[1],"retention":"7d"}`, nil, 400, "invalid_type"},
		{"retention is negative", j, `{"type":"echo","tasks":[1],"retention":"-1h"}`, nil, 422, "validation_failed"},
		{"task_timeout under a second", j, `{"type":"echo","tasks":[1],"task_timeout":0.5}`, nil, 422, "validation_failed"},
		{"task_timeout over a week", j, `{"type":"echo","tasks":[1],"task_timeout":1e9}`, nil, 422, "validation_failed"},
		{"batch_size is a string", j, `{"type":"echo","tasks":[1],"batch_size":"8"}`, nil, 400, "invalid_type"},
		{"batch_size is not an integer", j, `{"type":"echo","tasks":[1],"batch_size":2.5}`, nil, 400, "invalid_type"},
		{"batch_size 0", j, `{"type":"echo","tasks":[1],"batch_size":0}`, nil, 422, "validation_failed"},
		{"priority 0", j, `{"type":"echo","tasks":[1],"priority":0}`, nil, 422, "validation_failed"},
		{"priority 101", j, `{"type":"echo","tasks":[1],"priority":101}`, nil, 422, "validation_failed"},
		{"priority is a string", j, `{"type":"echo","tasks":[1],"priority":"high"}`, nil, 400, "invalid_type"},
		{"max_concurrency 0", j, `{"type":"echo","tasks":[1],"max_concurrency":0}`, nil, 422, "validation_failed"},
		{"negative max_concurrency", j, `{"type":"echo","tasks":[1],"max_concurrency":-3}`, nil, 422, "validation_failed"},
		{"max_concurrency over 10000", j, `{"type":"echo","tasks":[1],"max_concurrency":10001}`, nil, 422, "validation_failed"},
		{"max_concurrency is a string", j, `{"type":"echo","tasks":[1],"max_concurrency":"3"}`, nil, 400, "invalid_type"},
		{"queue with a dot", j, `{"type":"echo","tasks":[1],"queue":"a.b"}`, nil, 422, "validation_failed"},
		{"queue is a number", j, `{"type":"echo","tasks":[1],"queue":7}`, nil, 400, "invalid_type"},
		{"batch_size over 1000", j, `{"type":"echo","tasks":[1],"batch_size":1001}`, nil, 422, "validation_failed"},
		{"retention is a string", j, `{"type":"echo","tasks":[1],"retention":"7d"}`, nil, 400, "invalid_type"},
		{"retention under a second", j, `{"type":"echo","tasks":[1],"retention":0.5}`, nil, 422, "validation_failed"},
		{"retention 0", j, `{"type":"echo","tasks":[1],"retention":0}`, nil, 422, "validation_failed"},
		{"negative retention", j, `{"type":"echo","tasks":[1],"retention":-1}`, nil, 422, "validation_failed"},
		{"retention over 100 years", j, `{"type":"echo","tasks":[1],"retention":3153600001}`, nil, 422, "validation_failed"},
		{"retention overflows", j, `{"type":"echo","tasks":[1],"retention":1e300}`, nil, 422, "validation_failed"},
		{"reduce is an array", j, `{"type":"echo","tasks":[1],"reduce":["sum"]}`, nil, 400, "invalid_type"},
		{"reduce task without a task", j, `{"type":"echo","tasks":[1],"reduce":{}}`, nil, 422, "validation_failed"},
		{"reduce task with an unknown field", j, `{"type":"echo","tasks":[1],"reduce":{"task":"t","type":"x"}}`, nil, 400, "invalid_type"},
		{"reduce task type not a string", j, `{"type":"echo","tasks":[1],"reduce":{"task":7}}`, nil, 400, "invalid_type"},
		{"reduce task on a bad queue", j, `{"type":"echo","tasks":[1],"reduce":{"task":"t","queue":"No Queue"}}`, nil, 422, "validation_failed"},
		{"reduce task payload too deep", j, `{"type":"echo","tasks":[1],"reduce":{"task":"t","payload":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`, nil, 422, "validation_failed"},
		{"metadata is an array", j, `{"type":"echo","tasks":[1],"metadata":[1]}`, nil, 400, "invalid_type"},
		{"metadata is a string", j, `{"type":"echo","tasks":[1],"metadata":"x"}`, nil, 400, "invalid_type"},
		{"metadata 10,000 deep", j, `{"type":"echo","tasks":[1],"metadata":` + strings.Repeat(`{"a":`, 10_000) + `1` + strings.Repeat(`}`, 10_000) + `}`, nil, 422, "validation_failed"},
		{"metadata over 64 KiB", j, `{"type":"echo","tasks":[1],"metadata":{"a":"` + strings.Repeat("x", 64<<10) + `"}}`, nil, 413, "too_large"},
		{"tasks is an object", j, `{"type":"echo","tasks":{"a":1}}`, nil, 400, "invalid_type"},
		{"tasks is a string (streamed)", j, `{` + fullSpec + `,"tasks":"abc"}`, nil, 400, "invalid_type"},
		// Unknown fields.
		{"unknown field", j, `{"type":"echo","tasks":[1],"colour":1}`, nil, 400, "unknown_field"},
		{"unknown field after streamed tasks", j, `{` + fullSpec + `,"tasks":[1,2],"colour":1}`, nil, 400, "unknown_field"},
		{"misspelled field", j, `{"type":"echo","task":[1]}`, nil, 400, "unknown_field"},
		// Semantic problems.
		{"missing tasks", j, `{"type":"echo"}`, nil, 422, "validation_failed"},
		{"null tasks", j, `{"type":"echo","tasks":null}`, nil, 422, "validation_failed"},
		{"null tasks (streamed)", j, `{` + fullSpec + `,"tasks":null}`, nil, 422, "validation_failed"},
		{"empty tasks", j, `{"type":"echo","tasks":[ ]}`, nil, 422, "validation_failed"},
		{"empty tasks (streamed)", j, `{` + fullSpec + `,"tasks":[]}`, nil, 422, "validation_failed"},
		{"missing type", j, `{"tasks":[1]}`, nil, 422, "validation_failed"},
		{"empty type", j, `{"type":"","tasks":[1]}`, nil, 422, "validation_failed"},
		{"type too long", j, `{"type":"` + tooLongType + `","tasks":[1]}`, nil, 422, "validation_failed"},
		{"type with NUL", j, `{"type":"a\u0000b","tasks":[1]}`, nil, 422, "validation_failed"},
		{"type with a newline", j, `{"type":"a\nb","tasks":[1]}`, nil, 422, "validation_failed"},
		{"unknown reducer", j, `{"type":"echo","tasks":[1],"reduce":"median"}`, nil, 422, "validation_failed"},
		{"max_retries over 32 bits", j, `{"type":"echo","tasks":[1],"max_retries":3000000000}`, nil, 422, "validation_failed"},
		{"negative max_retries", j, `{"type":"echo","tasks":[1],"max_retries":-1}`, nil, 422, "validation_failed"},
		{"negative tolerated_failures", j, `{"type":"echo","tasks":[1],"tolerated_failures":-2}`, nil, 422, "validation_failed"},
		{"percent over 100", j, `{"type":"echo","tasks":[1],"tolerated_failure_percent":100.5}`, nil, 422, "validation_failed"},
		{"negative percent", j, `{"type":"echo","tasks":[1],"tolerated_failure_percent":-1}`, nil, 422, "validation_failed"},
		// Headers.
		{"idempotency key not UTF-8", j, `{"type":"echo","tasks":[1]}`, []string{"Idempotency-Key", "k\xff"}, 400, "invalid_parameter"},
		{"idempotency key too long", j, `{"type":"echo","tasks":[1]}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "invalid_parameter"},
		{"no content type", "", `{"type":"echo","tasks":[1]}`, nil, 415, "unsupported_media_type"},
		{"text/plain", "text/plain", `{"type":"echo","tasks":[1]}`, nil, 415, "unsupported_media_type"},
		{"form", "application/x-www-form-urlencoded", `type=echo`, nil, 415, "unsupported_media_type"},
		// NDJSON.
		{"ndjson: empty body", nd, "\n\n", nil, 400, "invalid_json"},
		{"ndjson: spec is not JSON", nd, "type=echo\n1\n", nil, 400, "invalid_json"},
		{"ndjson: spec is an array", nd, "[1]\n1\n", nil, 400, "invalid_type"},
		{"ndjson: spec with tasks", nd, `{"type":"echo","tasks":[1]}` + "\n1\n", nil, 400, "unknown_field"},
		{"ndjson: spec with an unknown field", nd, `{"type":"echo","colour":"q"}` + "\n1\n", nil, 400, "unknown_field"},
		{"ndjson: two values on a line", nd, `{"type":"echo"}` + "\n1 2\n", nil, 400, "invalid_json"},
		{"ndjson: spec wrong type", nd, `{"type":"echo","max_retries":"x"}` + "\n1\n", nil, 400, "invalid_type"},
		{"ndjson: no tasks", nd, `{"type":"echo"}` + "\n\n  \n", nil, 422, "validation_failed"},
		{"ndjson: unknown reducer", nd, `{"type":"echo","reduce":"avg"}` + "\n1\n", nil, 422, "validation_failed"},
		{"ndjson: negative counts", nd, `{"type":"echo","tolerated_failures":-1}` + "\n1\n", nil, 422, "validation_failed"},
	}
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					header := tc.header
					if tc.contentType != "" {
						header = append([]string{"Content-Type", tc.contentType}, header...)
					}
					resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(tc.body), header...)
					requireError(t, resp, tc.status, tc.code)
					requireNoJobs(t, b.store)
				})
			}
			require.Empty(t, b.onSubmitCalls())
		})
	}
}

// A job may name a reducer of Config.Reducers, and only those: a
// registry of the embedding program's own replaces the built-ins' one.
func TestSubmitCustomReducer(t *testing.T) {
	t.Parallel()
	reducers := reduce.NewRegistry()
	require.NoError(t, reducers.Register("median", func() reduce.Reducer { return nil }))
	custom := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.Reducers = reducers }})
	builtins := setup(t, nil)

	id := custom.mustSubmit(t, `{"type":"echo","tasks":[1],"reduce":"median"}`)
	job, err := custom.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "median", job.Policy.Reduce)
	resp := custom.submitNDJSON(t, `{"type":"echo","reduce":"avg"}`+"\n1\n")
	requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
	require.Contains(t, errorMessage(t, resp), `unknown reducer "avg" (known: collect, concat, median, merge, none, sum; or an object {"task": TYPE} for a reduce task run by a worker)`)

	resp = builtins.submit(t, `{"type":"echo","tasks":[1],"reduce":"median"}`)
	requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
	require.Contains(t, errorMessage(t, resp), `unknown reducer "median" (known: collect, concat, merge, none, sum; or an object {"task": TYPE} for a reduce task run by a worker)`)
	requireNoJobs(t, builtins.store)
}

func TestSubmitTooLarge(t *testing.T) {
	t.Parallel()
	const limit = 256
	b := setup(t, &options{maxBody: limit})
	tasks := strings.TrimSuffix(strings.Repeat(`{"pad":"xxxxxxxxxx"},`, 40), ",")
	bodies := map[string]string{
		"json, tasks streamed": `{` + fullSpec + `,"tasks":[` + tasks + `]}`,
		"json, tasks buffered": `{"type":"echo","tasks":[` + tasks + `]}`,
		"ndjson":               "{\"type\":\"echo\"}\n" + strings.ReplaceAll(tasks, "},", "}\n"),
		"json, padding after":  `{"type":"echo","tasks":[1]}` + strings.Repeat(" ", 2*limit),
	}
	for name, body := range bodies {
		contentType := "application/json"
		if strings.HasPrefix(name, "ndjson") {
			contentType = "application/x-ndjson"
		}
		t.Run(name+", with Content-Length", func(t *testing.T) {
			resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(body), "Content-Type", contentType)
			requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
			requireNoJobs(t, b.store)
		})
		t.Run(name+", chunked", func(t *testing.T) {
			// A reader of unknown length: the limit is found while the
			// tasks are being written, and the job is rolled back.
			resp := b.do(t, http.MethodPost, "/v1/jobs", io.MultiReader(strings.NewReader(body)), "Content-Type", contentType)
			requireError(t, resp, http.StatusRequestEntityTooLarge, "too_large")
			requireNoJobs(t, b.store)
		})
	}
	// Just under the limit is fine.
	id := b.mustSubmit(t, `{"type":"echo","tasks":[`+strings.Repeat("1,", 100)+`1]}`)
	require.NotEmpty(t, id)
}

// A job's reduce may be a reduce task, an object: stored as the policy's
// ReduceTask, shown back with its queue filled in, its reduce_state once
// it starts, and the task 0 it becomes in the task list.
func TestSubmitReduceTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type":"echo","tasks":[1,2],"queue":"maps","reduce":{"task":"total","payload":{"top":3}}}`)
	ctx := context.Background()
	job, err := b.store.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "", job.Policy.Reduce)
	require.Equal(t, "total", job.Policy.ReduceTask.Type)
	require.JSONEq(t, `{"top":3}`, string(job.Policy.ReduceTask.Payload))
	var got map[string]json.RawMessage
	resp := b.get(t, "/v1/jobs/"+id)
	require.Equal(t, http.StatusOK, resp.status)
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.JSONEq(t, `{"task":"total","queue":"maps","payload":{"top":3}}`, string(got["reduce"]), "the reduce queue defaults to the job's")
	require.NotContains(t, got, "reduce_state", "absent before the reduce task starts")

	other := b.mustSubmit(t, `{"type":"echo","tasks":[1],"reduce":{"task":"total","queue":"reducers"}}`)
	resp = b.get(t, "/v1/jobs/"+other)
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.JSONEq(t, `{"task":"total","queue":"reducers","payload":null}`, string(got["reduce"]))

	// Once the map tasks are done, the reduce task starts: the job shows
	// it reducing, and its tasks list it as task 0.
	publishAll(t, b.store)
	_, err = b.store.ApplyOutcomes(ctx, []store.Outcome{{JobID: id, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`)},
		{JobID: id, TaskID: 2, State: warren.TaskCompleted, Result: json.RawMessage(`2`)}})
	require.NoError(t, err)
	job, err = b.store.GetJob(ctx, id)
	require.NoError(t, err)
	started, err := b.store.StartReduce(ctx, id, job.Version)
	require.NoError(t, err)
	require.True(t, started)
	resp = b.get(t, "/v1/jobs/"+id)
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.JSONEq(t, `"running"`, string(got["reduce_state"]))
	require.JSONEq(t, `"running"`, string(got["state"]))
	resp = b.get(t, "/v1/jobs/"+id+"/tasks")
	require.Equal(t, http.StatusOK, resp.status)
	var page struct {
		Tasks []struct {
			TaskID int64  `json:"task_id"`
			State  string `json:"state"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &page))
	require.Len(t, page.Tasks, 3)
	require.Equal(t, int64(0), page.Tasks[0].TaskID, "the reduce task is task 0")
	require.Equal(t, "pending", page.Tasks[0].State)
}
