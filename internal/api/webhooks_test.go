package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
)

// webhookSecret is the secret of the tests' webhooks, which no answer
// may show.
const webhookSecret = "wh-s3cret-value"

// fakeLookup resolves a few names as a DNS server would.
func fakeLookup(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "hooks.example.com":
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	case "localhost":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "internal.example.com":
		return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.1.2.3")}, nil
	}
	return nil, errors.New("no such host")
}

// withLookup sets fakeLookup, and allowPrivate, on the handler.
func withLookup(allowPrivate bool) func(t *testing.T, cfg *api.Config) {
	return func(_ *testing.T, cfg *api.Config) {
		cfg.WebhookLookup, cfg.WebhookAllowPrivate = fakeLookup, allowPrivate
	}
}

func TestSubmitRefusesABadWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: withLookup(false)})
	spec := func(webhook string) string { return `{"type":"echo","webhook":` + webhook + `,"tasks":[1]}` }
	for _, tc := range []struct {
		webhook, code, msg string
	}{
		{`{"url":"https://hooks.example.com/w"}`, "invalid_parameter", "webhook.secret is required"},
		{`{"url":"https://hooks.example.com/w","secret":""}`, "invalid_parameter", "webhook.secret is required"},
		{`{"url":"https://hooks.example.com/w","secret":"` + strings.Repeat("s", 1025) + `"}`, "invalid_parameter", "webhook.secret must be 1 to 1024 bytes"},
		{`{"secret":"s"}`, "invalid_parameter", "webhook.url is required"},
		{`{"url":"ftp://hooks.example.com/w","secret":"s"}`, "invalid_parameter", "webhook.url must be an absolute http:// or https:// URL"},
		{`{"url":"/relative","secret":"s"}`, "invalid_parameter", "webhook.url must be an absolute http:// or https:// URL"},
		{`{"url":"https://user:pw@hooks.example.com/","secret":"s"}`, "invalid_parameter", "webhook.url must not carry a user or password"},
		{`{"url":"https://` + strings.Repeat("a", 2048) + `.com/","secret":"s"}`, "invalid_parameter", "webhook.url must be at most 2048 bytes"},
		{`{"url":"http://127.0.0.1:8080/hook","secret":"s"}`, "invalid_parameter", "--webhook-allow-private"},
		{`{"url":"http://[fd00::1]/hook","secret":"s"}`, "invalid_parameter", `fd00::1`},
		{`{"url":"http://169.254.169.254/latest/meta-data","secret":"s"}`, "invalid_parameter", "webhook.url"},
		{`{"url":"http://100.64.0.9/","secret":"s"}`, "invalid_parameter", "webhook.url"},
		{`{"url":"http://localhost:8080/hook","secret":"s"}`, "invalid_parameter", "resolves to 127.0.0.1, a loopback"},
		{`{"url":"https://internal.example.com/","secret":"s"}`, "invalid_parameter", "resolves to 10.1.2.3"},
		{`{"url":"https://nowhere.example.com/","secret":"s"}`, "invalid_parameter", "does not resolve"},
		{`{"url":5,"secret":"s"}`, "invalid_type", "webhook.url must be a string"},
		{`{"url":"https://hooks.example.com/","secret":"s","headers":{}}`, "unknown_field", "unknown field webhook.headers"},
		{`"https://hooks.example.com/"`, "invalid_type", "webhook must be an object"},
	} {
		for _, resp := range []response{b.submit(t, spec(tc.webhook)), b.submitNDJSON(t, `{"type":"echo","webhook":`+tc.webhook+"}\n1\n")} {
			requireError(t, resp, http.StatusBadRequest, tc.code)
			require.Contains(t, string(resp.body), tc.msg, tc.webhook)
		}
	}
	require.Empty(t, listAll(t, b), "nothing is written")

	id := b.mustSubmit(t, spec(`{"url":"https://hooks.example.com/w?team=a","secret":"s"}`))
	require.Equal(t, map[string]any{"url": "https://hooks.example.com/w?team=a"}, b.get(t, "/v1/jobs/"+id).json(t)["webhook"])
	id = b.mustSubmit(t, spec(`null`))
	require.Nil(t, b.get(t, "/v1/jobs/"+id).json(t)["webhook"], "null is no webhook")
}

// --webhook-allow-private lets a job's webhook go to its own network.
func TestSubmitAllowsPrivateWebhooksWhenConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{onNew: withLookup(true)})
	for _, url := range []string{"http://127.0.0.1:8080/hook", "http://localhost/hook", "http://10.0.0.5/", "http://receiver.internal/"} {
		id := b.mustSubmit(t, `{"type":"echo","webhook":{"url":"`+url+`","secret":"s"},"tasks":[1]}`)
		require.Equal(t, url, b.get(t, "/v1/jobs/"+id).json(t)["webhook"].(map[string]any)["url"])
	}
	requireError(t, b.submit(t, `{"type":"echo","webhook":{"url":"gopher://x/","secret":"s"},"tasks":[1]}`),
		http.StatusBadRequest, "invalid_parameter")
}

// The secret is kept for signing and never shown: not by the job, its
// list, its cancel, nor its deliveries.
func TestWebhookSecretIsNeverShownAndDeliveriesAre(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind, onNew: withLookup(false)})
			spec := `{"type":"echo","webhook":{"url":"https://hooks.example.com/w","secret":"` + webhookSecret + `"},"tasks":[1,2]}`
			submitted := b.submit(t, spec, "Idempotency-Key", "wh-1")
			require.Equal(t, http.StatusAccepted, submitted.status, "body: %s", submitted.body)
			id := submitted.json(t)["id"].(string)

			empty := b.get(t, "/v1/jobs/"+id+"/deliveries")
			require.Equal(t, http.StatusOK, empty.status)
			require.JSONEq(t, `{"deliveries":[]}`, string(empty.body), "none while the job is open")

			cancelled := b.do(t, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil)
			require.Equal(t, http.StatusOK, cancelled.status)
			list := b.get(t, "/v1/jobs/"+id+"/deliveries")
			require.Equal(t, http.StatusOK, list.status)
			deliveries := list.json(t)["deliveries"].([]any)
			require.Len(t, deliveries, 1)
			d := deliveries[0].(map[string]any)
			require.Equal(t, "job.closed", d["event"])
			require.Equal(t, "pending", d["state"])
			require.EqualValues(t, 0, d["attempts"])
			require.Nil(t, d["last_status"])
			require.Equal(t, "", d["last_error"])
			require.NotNil(t, d["next_attempt_at"])
			require.Nil(t, d["delivered_at"])
			job, err := b.store.GetJob(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, job.FinishedAt.UTC().Format(time.RFC3339Nano), d["created_at"])

			claimed, err := b.store.ClaimDeliveries(t.Context(), store.DeliveryClaim{Now: time.Now(), Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			ok, err := b.store.RecordDeliveryAttempt(t.Context(), store.DeliveryAttempt{ID: claimed[0].ID, Attempt: 1,
				State: store.DeliveryDelivered, Status: 204, At: time.Now()})
			require.NoError(t, err)
			require.True(t, ok)
			d = b.get(t, "/v1/jobs/"+id+"/deliveries").json(t)["deliveries"].([]any)[0].(map[string]any)
			require.Equal(t, "delivered", d["state"])
			require.EqualValues(t, 1, d["attempts"])
			require.EqualValues(t, 204, d["last_status"])
			require.Nil(t, d["next_attempt_at"])
			require.NotNil(t, d["delivered_at"])

			replay := b.submit(t, spec, "Idempotency-Key", "wh-1")
			require.Equal(t, http.StatusAccepted, replay.status, "an idempotent replay still works")
			require.Equal(t, id, replay.json(t)["id"])
			other := strings.Replace(spec, webhookSecret, "another-secret", 1)
			requireError(t, b.submit(t, other, "Idempotency-Key", "wh-1"), http.StatusUnprocessableEntity, "idempotency_key_reused")

			for _, resp := range []response{submitted, empty, cancelled, list, replay, b.get(t, "/v1/jobs/"+id), b.get(t, "/v1/jobs"),
				b.get(t, "/v1/jobs/"+id+"/deliveries")} {
				require.NotContains(t, string(resp.body), webhookSecret)
			}
		})
	}
}

func TestListDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	requireError(t, b.get(t, "/v1/jobs/nope/deliveries"), http.StatusNotFound, "not_found")
	job := createJob(t, b.store, 1)
	_, err := b.store.CancelJob(t.Context(), job.ID)
	require.NoError(t, err)
	resp := b.get(t, "/v1/jobs/"+job.ID+"/deliveries")
	require.Equal(t, http.StatusOK, resp.status)
	require.JSONEq(t, `{"deliveries":[]}`, string(resp.body), "a job without a webhook has none")
}
