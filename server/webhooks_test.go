package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

const hookSecret = "e2e-hook-secret"

// hookRequest is one POST a receiver got.
type hookRequest struct {
	header http.Header
	body   []byte
}

// attemptsOf returns hooks that send every recorded webhook attempt to
// the channel returned.
func attemptsOf(cfg *server.Config) chan store.DeliveryAttempt {
	ch := make(chan store.DeliveryAttempt, 16)
	cfg.Hooks.OnWebhookAttempt = func(_ string, a store.DeliveryAttempt) { ch <- a }
	return ch
}

// waitFor returns the next value of ch, or fails the test after a minute.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// apiDo sends a request to the server's API and returns the status and
// body.
func apiDo(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// deliveriesOf returns GET /v1/jobs/{id}/deliveries.
func deliveriesOf(t *testing.T, srv *server.Server, id string) []map[string]any {
	t.Helper()
	status, body := apiDo(t, http.MethodGet, srv.URL()+"/v1/jobs/"+id+"/deliveries", "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NotContains(t, string(body), hookSecret)
	var v struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	require.NoError(t, json.Unmarshal(body, &v))
	return v.Deliveries
}

// A job with a webhook runs to completion, and the receiver gets one
// signed POST that names it.
func TestAClosedJobsWebhookIsDelivered(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.WebhookAllowPrivate = true // the receiver is on loopback
	attempts := attemptsOf(&cfg)
	got := make(chan hookRequest, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- hookRequest{header: r.Header.Clone(), body: body}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(receiver.Close)

	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: cfg.Prefix, Concurrency: 2})
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		var n int
		if err := json.Unmarshal(tk.Payload, &n); err != nil {
			return nil, worker.Permanent(err)
		}
		return 2 * n, nil
	})
	wctx, stopWorker := context.WithCancel(t.Context())
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); require.NoError(t, <-werr) })

	status, body := apiDo(t, http.MethodPost, srv.URL()+"/v1/jobs",
		`{"type":"double","reduce":"sum","webhook":{"url":"`+receiver.URL+`/hooks/warren","secret":"`+hookSecret+`"},"tasks":[1,2,3]}`)
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	var sub struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &sub))

	req := waitFor(t, got, "the webhook")
	mac := hmac.New(sha256.New, []byte(hookSecret))
	mac.Write(req.body)
	require.Equal(t, "sha256="+hex.EncodeToString(mac.Sum(nil)), req.header.Get("X-Warren-Signature"), "signed with the job's secret")
	require.Equal(t, "application/json", req.header.Get("Content-Type"))
	require.Equal(t, "job.closed", req.header.Get("X-Warren-Event"))
	require.True(t, strings.HasPrefix(req.header.Get("User-Agent"), "warren"), req.header.Get("User-Agent"))
	var hook struct {
		ID    string `json:"id"`
		Event string `json:"event"`
		Job   struct {
			ID             string `json:"id"`
			Type           string `json:"type"`
			State          string `json:"state"`
			ExpectedTasks  int    `json:"expected_tasks"`
			CompletedTasks int    `json:"completed_tasks"`
			FailedTasks    int    `json:"failed_tasks"`
			FinishedAt     string `json:"finished_at"`
			ResultURL      string `json:"result_url"`
		} `json:"job"`
	}
	require.NoError(t, json.Unmarshal(req.body, &hook))
	require.Equal(t, req.header.Get("X-Warren-Delivery"), hook.ID)
	require.Equal(t, "job.closed", hook.Event)
	require.Equal(t, sub.ID, hook.Job.ID)
	require.Equal(t, "double", hook.Job.Type)
	require.Equal(t, "completed", hook.Job.State)
	require.Equal(t, 3, hook.Job.ExpectedTasks)
	require.Equal(t, 3, hook.Job.CompletedTasks)
	require.Zero(t, hook.Job.FailedTasks)
	require.NotEmpty(t, hook.Job.FinishedAt)
	require.Equal(t, "/v1/jobs/"+sub.ID+"/result", hook.Job.ResultURL)
	status, result := apiDo(t, http.MethodGet, srv.URL()+hook.Job.ResultURL, "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `12`, string(result))

	require.Equal(t, store.DeliveryDelivered, waitFor(t, attempts, "the attempt's record").State)
	deliveries := deliveriesOf(t, srv, sub.ID)
	require.Len(t, deliveries, 1)
	require.Equal(t, hook.ID, deliveries[0]["id"])
	require.Equal(t, "delivered", deliveries[0]["state"])
	require.EqualValues(t, 1, deliveries[0]["attempts"])
	require.EqualValues(t, 200, deliveries[0]["last_status"])
	status, body = apiDo(t, http.MethodGet, srv.URL()+"/v1/jobs/"+sub.ID, "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), `"webhook":{"url":"`+receiver.URL+`/hooks/warren"}`)
	require.NotContains(t, string(body), hookSecret)
	status, metrics := apiDo(t, http.MethodGet, srv.URL()+"/metrics", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(metrics), `warren_webhook_deliveries_total{outcome="delivered"} 1`)
	require.Contains(t, string(metrics), "warren_webhook_deliveries_pending 0")
	select {
	case <-got:
		t.Fatal("a delivered webhook was sent again")
	default:
	}
}

// A delivery outlives its server: one stopped during an attempt leaves
// it to the next, which sends the same delivery.
func TestAWebhookDeliverySurvivesARestart(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.WebhookAllowPrivate = true
	got := make(chan hookRequest, 4)
	var answered atomic.Bool
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- hookRequest{header: r.Header.Clone(), body: body}
		if answered.CompareAndSwap(false, true) { // the first attempt never gets an answer
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	firstAttempts := attemptsOf(&cfg)
	one, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, one.Start(t.Context()))
	status, body := apiDo(t, http.MethodPost, one.URL()+"/v1/jobs",
		`{"type":"nobody-runs-this","webhook":{"url":"`+receiver.URL+`","secret":"`+hookSecret+`"},"tasks":[1,2]}`)
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	var sub struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &sub))
	status, body = apiDo(t, http.MethodPost, one.URL()+"/v1/jobs/"+sub.ID+"/cancel", "")
	require.Equal(t, http.StatusOK, status, "%s", body)

	before := waitFor(t, got, "the first attempt")
	require.NoError(t, one.Stop(), "the server stops during the attempt")
	handedBack := waitFor(t, firstAttempts, "the first attempt's record")
	require.Equal(t, store.DeliveryPending, handedBack.State)
	require.Contains(t, handedBack.Error, "interrupted")

	secondAttempts := attemptsOf(&cfg)
	two, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, two.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, two.Stop()) })
	after := waitFor(t, got, "the attempt of the next server")
	require.Equal(t, before.header.Get("X-Warren-Delivery"), after.header.Get("X-Warren-Delivery"), "the same delivery")
	require.Equal(t, string(before.body), string(after.body))
	require.Equal(t, before.header.Get("X-Warren-Signature"), after.header.Get("X-Warren-Signature"))
	var hook struct {
		Job struct{ State string } `json:"job"`
	}
	require.NoError(t, json.Unmarshal(after.body, &hook))
	require.Equal(t, "cancelled", hook.Job.State)

	require.Equal(t, store.DeliveryDelivered, waitFor(t, secondAttempts, "the second attempt's record").State)
	deliveries := deliveriesOf(t, two, sub.ID)
	require.Len(t, deliveries, 1)
	require.Equal(t, "delivered", deliveries[0]["state"])
	require.EqualValues(t, 2, deliveries[0]["attempts"])
	require.EqualValues(t, 204, deliveries[0]["last_status"])
}

// Without --webhook-allow-private a webhook to the server's own network
// is refused at submission.
func TestAPrivateWebhookIsRefusedByDefault(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	status, body := apiDo(t, http.MethodPost, srv.URL()+"/v1/jobs",
		`{"type":"t","webhook":{"url":"http://127.0.0.1:9/hook","secret":"s"},"tasks":[1]}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), "--webhook-allow-private")
}
