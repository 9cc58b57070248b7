package api_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/deadletters"
)

// fakeDeadLetters stands in for the broker's dead-letter queue: it
// records the filters it is called with and answers from its fields.
type fakeDeadLetters struct {
	msgs   []deadletters.Message
	report deadletters.Report
	purged int
	err    error // returned by every call, with report and purged

	mu    sync.Mutex
	calls []string // "list", "replay", "purge", with the filter
}

func (f *fakeDeadLetters) record(op string, filter deadletters.Filter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := op + " " + filter.JobID + "/" + strconv.Itoa(filter.Limit)
	if filter.Pending {
		call += " pending"
	}
	if filter.Settled {
		call += " settled"
	}
	f.calls = append(f.calls, call)
}

func (f *fakeDeadLetters) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDeadLetters) List(_ context.Context, filter deadletters.Filter) ([]deadletters.Message, error) {
	f.record("list", filter)
	if f.err != nil {
		return nil, f.err
	}
	var out []deadletters.Message
	for _, m := range f.msgs {
		if (filter.JobID == "" || m.JobID == filter.JobID) && (!filter.Pending || m.Settled == "") {
			out = append(out, m)
		}
	}
	if filter.Limit > 0 && len(out) > filter.Limit {
		out = out[:filter.Limit]
	}
	return out, nil
}

func (f *fakeDeadLetters) Replay(_ context.Context, filter deadletters.Filter) (deadletters.Report, error) {
	f.record("replay", filter)
	return f.report, f.err
}

func (f *fakeDeadLetters) Purge(_ context.Context, filter deadletters.Filter) (int, error) {
	f.record("purge", filter)
	return f.purged, f.err
}

// withDeadLetters is options whose handler operates on dl.
func withDeadLetters(dl api.DeadLetters, opts options) *options {
	opts.onNew = func(_ *testing.T, cfg *api.Config) { cfg.DeadLetters = dl }
	return &opts
}

// postJSON POSTs body as JSON ("" for no body and no Content-Type).
func (b *testBundle) postJSON(t *testing.T, path, body string, header ...string) response {
	t.Helper()
	if body == "" {
		return b.do(t, http.MethodPost, path, nil, header...)
	}
	return b.do(t, http.MethodPost, path, strings.NewReader(body), append([]string{"Content-Type", "application/json"}, header...)...)
}

var deadAt = time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)

func TestListDeadLetters(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{msgs: []deadletters.Message{
		{JobID: "j1", TaskID: 1, MessageID: "j1:1", RoutingKey: "task.failed", Reason: "retries_exhausted", Error: "boom", Attempts: 4, Time: deadAt},
		{JobID: "j2", TaskID: 3, MessageID: "j2:3", RoutingKey: "task.failed", Reason: "delivery_limit", Error: "dead-lettered by the broker", Attempts: 1, Time: deadAt.In(time.FixedZone("x", 3600)),
			Settled: deadletters.SettledResent},
		{JobID: "", TaskID: 0, MessageID: "", RoutingKey: "task.failed", Reason: "malformed", Error: "not a task", Attempts: 1},
	}}
	b := setup(t, withDeadLetters(fake, options{}))

	resp := b.get(t, "/v1/deadletters")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.JSONEq(t, `{"deadletters":[
		{"job_id":"j1","task_id":1,"message_id":"j1:1","routing_key":"task.failed","reason":"retries_exhausted","error":"boom","attempts":4,"time":"2026-01-02T03:04:05.6Z",
		 "pending":true,"settled":null},
		{"job_id":"j2","task_id":3,"message_id":"j2:3","routing_key":"task.failed","reason":"delivery_limit","error":"dead-lettered by the broker","attempts":1,"time":"2026-01-02T03:04:05.6Z",
		 "pending":false,"settled":"resent"},
		{"job_id":"","task_id":0,"message_id":"","routing_key":"task.failed","reason":"malformed","error":"not a task","attempts":1,"time":null,
		 "pending":true,"settled":null}
	]}`, string(resp.body))

	resp = b.get(t, "/v1/deadletters?job_id=j2&limit=5")
	require.Equal(t, http.StatusOK, resp.status)
	require.Len(t, resp.json(t)["deadletters"], 1)
	resp = b.get(t, "/v1/deadletters?job_id=none")
	require.JSONEq(t, `{"deadletters":[]}`, string(resp.body))
	resp = b.get(t, "/v1/deadletters?pending=true")
	require.Equal(t, http.StatusOK, resp.status)
	require.Len(t, resp.json(t)["deadletters"], 2, "the settled one is left out")
	require.Equal(t, []string{"list /0", "list j2/5", "list none/0", "list /0 pending"}, fake.recorded())

	for _, query := range []string{"limit=0", "limit=-1", "limit=ten", "limit=1.5", "job_id=%00", "job_id=%FF", "pending=maybe"} {
		requireError(t, b.get(t, "/v1/deadletters?"+query), http.StatusBadRequest, "invalid_parameter")
	}
	require.Len(t, fake.recorded(), 4, "bad input never reaches the queue")
}

func TestReplayDeadLetters(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{report: deadletters.Report{Replayed: 2, Skipped: 1}}
	b := setup(t, withDeadLetters(fake, options{}))

	for _, body := range []string{"", "{}", " \n", `{"job_id":null,"limit":null}`} {
		resp := b.postJSON(t, "/v1/deadletters/replay", body)
		require.Equal(t, http.StatusOK, resp.status, "body %q: %s", body, resp.body)
		require.JSONEq(t, `{"replayed":2,"skipped":1}`, string(resp.body))
	}
	resp := b.postJSON(t, "/v1/deadletters/replay", `{"job_id":"j1","limit":5}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	resp = b.do(t, http.MethodPost, "/v1/deadletters/replay", strings.NewReader(`{"limit":1}`)) // no Content-Type: a browser's simple request
	requireError(t, resp, http.StatusUnsupportedMediaType, "unsupported_media_type")
	resp = b.do(t, http.MethodPost, "/v1/deadletters/replay", strings.NewReader(`{"job_id":"j2"}`), "Content-Type", "application/json; charset=utf-8")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.Equal(t, []string{"replay /0", "replay /0", "replay /0", "replay /0", "replay j1/5", "replay j2/0"}, fake.recorded())

	requireBadFilters(t, b, "/v1/deadletters/replay", fake, map[string]string{
		`{"limit":0}`:                    "validation_failed",
		`{"limit":-3}`:                   "validation_failed",
		`{"job_id":"a\u0001b"}`:          "validation_failed",
		`{"limit":"5"}`:                  "invalid_type",
		`{"limit":1.5}`:                  "invalid_type",
		`{"job_id":7}`:                   "invalid_type",
		`[{"job_id":"j"}]`:               "invalid_type",
		`"j1"`:                           "invalid_type",
		`{"job":"j1"}`:                   "unknown_field",
		`{"job_id":"j1"`:                 "invalid_json",
		`{"job_id":"j1"} {}`:             "invalid_json",
		`job_id=j1`:                      "invalid_json",
		`{"job_id":"` + big + `"}`:       "too_large",
		`{"limit":99999999999999999999}`: "invalid_type",
	})
}

// big makes a body over the filter's 64 KiB limit.
var big = strings.Repeat("x", 70_000)

// requireBadFilters posts each body and requires the error code given
// (with its status), then a body of another Content-Type; none reaches
// the queue.
func requireBadFilters(t *testing.T, b *testBundle, path string, fake *fakeDeadLetters, bodies map[string]string) {
	t.Helper()
	status := map[string]int{"validation_failed": http.StatusUnprocessableEntity, "too_large": http.StatusRequestEntityTooLarge}
	before := len(fake.recorded())
	for body, code := range bodies {
		resp := b.postJSON(t, path, body)
		want, ok := status[code]
		if !ok {
			want = http.StatusBadRequest
		}
		require.Equal(t, want, resp.status, "body %.60q: %s", body, resp.body)
		requireError(t, resp, want, code)
	}
	resp := b.do(t, http.MethodPost, path, strings.NewReader(`job_id=j1`), "Content-Type", "application/x-www-form-urlencoded")
	requireError(t, resp, http.StatusUnsupportedMediaType, "unsupported_media_type")
	require.Len(t, fake.recorded(), before, "bad input never reaches the queue")
}

func TestPurgeDeadLetters(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{purged: 4}
	b := setup(t, withDeadLetters(fake, options{}))

	resp := b.postJSON(t, "/v1/deadletters/purge", `{"all": true}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.JSONEq(t, `{"purged":4}`, string(resp.body))
	resp = b.postJSON(t, "/v1/deadletters/purge", `{"job_id":"j1"}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	resp = b.postJSON(t, "/v1/deadletters/purge", `{"settled":true}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	resp = b.postJSON(t, "/v1/deadletters/purge", `{"settled":true,"job_id":"j1"}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.Equal(t, []string{"purge /0", "purge j1/0", "purge /0 settled", "purge j1/0 settled"}, fake.recorded())

	requireBadFilters(t, b, "/v1/deadletters/purge", fake, map[string]string{
		`{"limit":1}`:                 "unknown_field",
		`{"all":"yes"}`:               "invalid_type",
		"":                            "validation_failed", // purging every dead letter is asked for, never a default
		`{}`:                          "validation_failed",
		`{"all":false}`:               "validation_failed",
		`{"all":true,"job_id":"j"}`:   "validation_failed",
		`{"all":true,"settled":true}`: "validation_failed",
		`{"settled":false}`:           "validation_failed",
		`{"settled":"yes"}`:           "invalid_type",
		`{"job_id":"\u0000"}`:         "validation_failed",
		`{"job_id":["j1"]}`:           "invalid_type",
		`{"job_id":"` + big + `"}`:    "too_large",
	})
}

func TestDeadLettersWithoutAQueueAre503(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	requireError(t, b.get(t, "/v1/deadletters"), http.StatusServiceUnavailable, "unavailable")
	requireError(t, b.postJSON(t, "/v1/deadletters/replay", ""), http.StatusServiceUnavailable, "unavailable")
	requireError(t, b.postJSON(t, "/v1/deadletters/purge", `{"job_id":"j"}`), http.StatusServiceUnavailable, "unavailable")
}

// A failing operation is a 503 when the broker (Ready) or the store is
// down, else a 500; neither repeats the error, and a replay or purge
// says how far it got.
func TestDeadLetterErrors(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{err: errSecret, report: deadletters.Report{Replayed: 1, Skipped: 2}, purged: 3}
	var brokerDown error
	opts := withDeadLetters(fake, options{ready: func(context.Context) error { return brokerDown }})
	b := setup(t, opts)

	call := func() []response {
		return []response{
			b.get(t, "/v1/deadletters"),
			b.postJSON(t, "/v1/deadletters/replay", `{"limit":5}`),
			b.postJSON(t, "/v1/deadletters/purge", `{"all":true}`),
		}
	}
	for _, resp := range call() {
		requireError(t, resp, http.StatusInternalServerError, "internal")
		require.NotContains(t, string(resp.body), "secret")
	}
	brokerDown = errors.New("broker: not connected")
	answers := call()
	for _, resp := range answers {
		requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
		require.NotContains(t, string(resp.body), "secret")
	}
	require.Contains(t, errorMessage(t, answers[1]), "after replaying 1 and skipping 2")
	require.Contains(t, errorMessage(t, answers[2]), "after purging 3")
}

func TestDeadLettersAuth(t *testing.T) {
	t.Parallel()
	fake := &fakeDeadLetters{}
	b := setup(t, withDeadLetters(fake, options{tokens: "r0:read,w0:write,a0:admin"}))

	for _, c := range []struct {
		method, path string
		scope        api.Scope
	}{
		{http.MethodGet, "/v1/deadletters", api.ScopeRead},
		{http.MethodPost, "/v1/deadletters/replay", api.ScopeAdmin},
		{http.MethodPost, "/v1/deadletters/purge", api.ScopeAdmin},
	} {
		resp := b.do(t, c.method, c.path, nil)
		requireError(t, resp, http.StatusUnauthorized, "unauthorized")
		requireError(t, b.do(t, c.method, c.path, nil, bearer("nope")...), http.StatusUnauthorized, "unauthorized")
		if c.scope == api.ScopeAdmin {
			for _, tok := range []string{"r0", "w0"} {
				requireError(t, b.do(t, c.method, c.path, nil, bearer(tok)...), http.StatusForbidden, "forbidden")
			}
		}
	}
	require.Empty(t, fake.recorded(), "nothing refused reaches the queue")

	require.Equal(t, http.StatusOK, b.get(t, "/v1/deadletters", bearer("r0")...).status)
	require.Equal(t, http.StatusOK, b.postJSON(t, "/v1/deadletters/replay", "", bearer("a0")...).status)
	require.Equal(t, http.StatusOK, b.postJSON(t, "/v1/deadletters/purge", `{"all":true}`, bearer("a0")...).status)
	require.Equal(t, []string{"list /0", "replay /0", "purge /0"}, fake.recorded())
}
