package webhooks_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/webhooks"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

const secret = "it's a secret"

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server that answers each request with the
// next of its statuses (the last repeating) and records what it got.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []received
	arrived  chan struct{} // one value per request, as it arrives
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{statuses: statuses, arrived: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: body})
		status := r.statuses[min(len(r.got), len(r.statuses))-1]
		r.mu.Unlock()
		r.arrived <- struct{}{}
		if status == http.StatusFound {
			http.Redirect(w, req, "/elsewhere", status)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, strings.Repeat("x", 10<<10)) // more than is read
	}))
	t.Cleanup(r.Close)
	return r
}

// requests returns what the receiver got so far.
func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// testBundle is a store on a settable clock with one closed job whose
// webhook goes to url.
type testBundle struct {
	store    store.Store
	job      warren.Job
	clock    *clock
	registry *prometheus.Registry
	metrics  *webhooks.Metrics
}

func setup(t *testing.T, url string) *testBundle {
	t.Helper()
	c := &clock{now: time.Now().UTC().Truncate(time.Microsecond)}
	s, err := sqlite.OpenWith(t.Context(), filepath.Join(t.TempDir(), "warren.db"), sqlite.Options{Clock: c.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	job, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t", Webhook: &store.Webhook{URL: url, Secret: secret}},
		func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
	require.NoError(t, err)
	job, err = s.CancelJob(t.Context(), job.ID)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := webhooks.NewMetrics(reg, s)
	require.NoError(t, err)
	require.Equal(t, c.Now(), *job.FinishedAt, "the job closed at the store's clock")
	return &testBundle{store: s, job: job, clock: c, registry: reg, metrics: m}
}

// deliverer returns a deliverer on the bundle's store and clock, without
// jitter, allowed to reach the test's receivers on loopback.
func (b *testBundle) deliverer(t *testing.T, cfg webhooks.Config) *webhooks.Deliverer {
	t.Helper()
	cfg.Store, cfg.Metrics, cfg.Logger = b.store, b.metrics, slog.New(slog.DiscardHandler)
	if !cfg.AllowPrivate {
		cfg.AllowPrivate = true
	}
	d, err := webhooks.New(cfg)
	require.NoError(t, err)
	return d
}

// delivery returns the job's one delivery.
func (b *testBundle) delivery(t *testing.T) store.Delivery {
	t.Helper()
	list, err := b.store.ListDeliveries(t.Context(), b.job.ID)
	require.NoError(t, err)
	require.Len(t, list, 1)
	return list[0]
}

// runOnce runs one round and returns how many deliveries it claimed.
func runOnce(t *testing.T, d *webhooks.Deliverer) int {
	t.Helper()
	n, err := d.RunOnce(t.Context())
	require.NoError(t, err)
	return n
}

// count returns warren_webhook_deliveries_total{outcome}.
func (b *testBundle) count(t *testing.T, outcome string) float64 {
	t.Helper()
	return gathered(t, b.registry, "warren_webhook_deliveries_total", outcome)
}

// pending returns warren_webhook_deliveries_pending.
func (b *testBundle) pending(t *testing.T) float64 {
	t.Helper()
	return gathered(t, b.registry, "warren_webhook_deliveries_pending", "")
}

// gathered returns the value of metric name in reg, of its series whose
// first label is label ("" for a metric without labels).
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && m.GetLabel()[0].GetValue() != label {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

func TestADeliveryIsSignedAndDescribesTheJob(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusNoContent)
	b := setup(t, r.URL+"/hook?team=a")
	d := b.deliverer(t, webhooks.Config{UserAgent: "warren/test"})
	require.Equal(t, 1, runOnce(t, d))

	got := r.requests()
	require.Len(t, got, 1)
	want := b.delivery(t)
	h := got[0].header
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "warren/test", h.Get("User-Agent"))
	require.Equal(t, want.ID, h.Get("X-Warren-Delivery"))
	require.Equal(t, "job.closed", h.Get("X-Warren-Event"))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(got[0].body)
	require.Equal(t, "sha256="+hex.EncodeToString(mac.Sum(nil)), h.Get("X-Warren-Signature"), "HMAC-SHA256 of the body with the secret")
	require.Equal(t, webhooks.Sign(secret, got[0].body), h.Get("X-Warren-Signature"))

	var body map[string]any
	require.NoError(t, json.Unmarshal(got[0].body, &body))
	require.Equal(t, want.ID, body["id"])
	require.Equal(t, "job.closed", body["event"])
	job := body["job"].(map[string]any)
	require.Equal(t, b.job.ID, job["id"])
	require.Equal(t, "t", job["type"])
	require.Equal(t, "cancelled", job["state"])
	require.EqualValues(t, 1, job["expected_tasks"])
	require.EqualValues(t, 0, job["completed_tasks"])
	require.EqualValues(t, 0, job["failed_tasks"])
	require.Equal(t, store.CancelledError, job["error"])
	require.Equal(t, b.job.FinishedAt.UTC().Format(time.RFC3339Nano), job["finished_at"])
	require.NotContains(t, string(got[0].body), secret)

	require.Equal(t, store.DeliveryDelivered, want.State)
	require.Equal(t, 1, want.Attempts)
	require.Equal(t, http.StatusNoContent, want.LastStatus)
	require.NotNil(t, want.DeliveredAt)
	require.Equal(t, 1.0, b.count(t, "delivered"))
	require.Zero(t, runOnce(t, d), "a delivered one is done")
	require.Equal(t, 0.0, b.pending(t))
}

// A 500 is retried after the schedule's wait, with the same delivery id
// and the same bytes, and the first 2xx ends it.
func TestRetriesWithTheSameDeliveryUntilA2xx(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusInternalServerError, http.StatusOK)
	b := setup(t, r.URL)
	d := b.deliverer(t, webhooks.Config{})
	start := b.clock.Now()
	require.Equal(t, 1, runOnce(t, d))
	first := b.delivery(t)
	require.Equal(t, store.DeliveryPending, first.State)
	require.Equal(t, 500, first.LastStatus)
	require.Contains(t, first.LastError, "the receiver answered 500 Internal Server Error: xxx")
	require.Less(t, len(first.LastError), 300, "a few bytes of the answer")
	require.Equal(t, start.Add(10*time.Second), first.NextAttemptAt.UTC(), "the first retry is 10 s later")
	require.Equal(t, 1.0, b.count(t, "retried"))
	require.Equal(t, 1.0, b.pending(t))

	b.clock.Set(start.Add(9 * time.Second))
	require.Zero(t, runOnce(t, d), "not due yet")
	b.clock.Set(start.Add(10 * time.Second))
	require.Equal(t, 1, runOnce(t, d))
	b.clock.Set(start.Add(time.Hour))
	require.Zero(t, runOnce(t, d))

	got := r.requests()
	require.Len(t, got, 2, "stops at the first 2xx")
	require.Equal(t, got[0].header.Get("X-Warren-Delivery"), got[1].header.Get("X-Warren-Delivery"))
	require.Equal(t, string(got[0].body), string(got[1].body), "the body is byte-identical")
	require.Equal(t, got[0].header.Get("X-Warren-Signature"), got[1].header.Get("X-Warren-Signature"))
	last := b.delivery(t)
	require.Equal(t, store.DeliveryDelivered, last.State)
	require.Equal(t, 2, last.Attempts)
	require.Equal(t, 200, last.LastStatus)
	require.Empty(t, last.LastError)
	require.Equal(t, 1.0, b.count(t, "delivered"))
}

// A delivery that keeps failing is given up a day after it was made.
func TestGivesUpADayLater(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusFound) // a redirect is not followed: a failure
	b := setup(t, r.URL)
	var attempts []webhooks.Attempt
	d := b.deliverer(t, webhooks.Config{OnAttempt: func(a webhooks.Attempt) { attempts = append(attempts, a) }})
	created := b.clock.Now()
	for {
		require.Equal(t, 1, runOnce(t, d))
		last := attempts[len(attempts)-1].Result
		if last.State == store.DeliveryFailed {
			break
		}
		require.Equal(t, store.DeliveryPending, last.State)
		b.clock.Set(last.NextAttemptAt)
	}
	require.Len(t, attempts, 30, "29 retries over a day")
	require.Equal(t, created.Add(24*time.Hour), b.clock.Now())
	failed := b.delivery(t)
	require.Equal(t, store.DeliveryFailed, failed.State)
	require.Equal(t, http.StatusFound, failed.LastStatus)
	require.Contains(t, failed.LastError, "302 Found (redirects are not followed)")
	require.Nil(t, failed.NextAttemptAt)
	require.Len(t, r.requests(), 30, "the redirect's target was never asked")
	require.Equal(t, 1.0, b.count(t, "failed"))
	require.Equal(t, 29.0, b.count(t, "retried"))
	b.clock.Set(created.Add(48 * time.Hour))
	require.Zero(t, runOnce(t, d))
}

func TestAnAttemptTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	b := setup(t, slow.URL)
	d := b.deliverer(t, webhooks.Config{Timeout: 200 * time.Millisecond})
	start := time.Now()
	require.Equal(t, 1, runOnce(t, d))
	require.Less(t, time.Since(start), 5*time.Second)
	got := b.delivery(t)
	require.Equal(t, store.DeliveryPending, got.State)
	require.Zero(t, got.LastStatus)
	require.Contains(t, got.LastError, "no answer within the attempt's timeout")
	require.NotContains(t, got.LastError, slow.URL, "the error does not repeat the URL")
}

// Without AllowPrivate the dialer refuses a loopback address, whatever
// the URL passed at submission (DNS rebinding).
func TestTheDialerRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusOK)
	b := setup(t, r.URL)
	d, err := webhooks.New(webhooks.Config{Store: b.store, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.Equal(t, 1, runOnce(t, d))
	got := b.delivery(t)
	require.Equal(t, store.DeliveryPending, got.State)
	require.Contains(t, got.LastError, "refusing to connect to 127.0.0.1")
	require.Contains(t, got.LastError, webhooks.ErrForbiddenAddress.Error())
	require.Empty(t, r.requests(), "nothing reached the receiver")
}

// Run delivers when woken, and a stop during an attempt hands the
// delivery back, due at once, for the next server.
func TestRunHandsBackTheAttemptItStopsDuring(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 10)
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so that the server notices the client leave
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(hold.Close)
	b := setup(t, hold.URL)
	recorded := make(chan webhooks.Attempt, 1)
	d := b.deliverer(t, webhooks.Config{PollInterval: time.Hour, OnAttempt: func(a webhooks.Attempt) { recorded <- a }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not deliver at once")
	}
	cancel()
	require.NoError(t, <-done)
	a := <-recorded
	require.True(t, a.Recorded)
	got := b.delivery(t)
	require.Equal(t, store.DeliveryPending, got.State)
	require.Equal(t, 1, got.Attempts)
	require.Contains(t, got.LastError, "interrupted")
	require.Equal(t, b.clock.Now(), got.NextAttemptAt.UTC(), "due at once")
	require.Equal(t, 1.0, b.count(t, "retried"))
}

func TestRunWakesOnAClose(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusOK)
	b := setup(t, r.URL)
	d := b.deliverer(t, webhooks.Config{PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-r.arrived // the first delivery, at start

	job, _, err := b.store.CreateJob(t.Context(), store.NewJob{Type: "t", Webhook: &store.Webhook{URL: r.URL, Secret: secret}},
		func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
	require.NoError(t, err)
	job, err = b.store.CancelJob(t.Context(), job.ID)
	require.NoError(t, err)
	b.clock.Set(*job.FinishedAt)
	d.Wake()
	select {
	case <-r.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not deliver the new job's webhook")
	}
	cancel()
	require.NoError(t, <-done)
	require.Len(t, r.requests(), 2)
}

func TestNewNamesTheFieldThatIsWrong(t *testing.T) {
	t.Parallel()
	_, err := webhooks.New(webhooks.Config{})
	require.ErrorContains(t, err, "Config.Store is required")
	b := setup(t, "http://example.com/")
	_, err = webhooks.New(webhooks.Config{Store: b.store, Schedule: webhooks.Schedule{Jitter: 1}})
	require.ErrorContains(t, err, "Config.Schedule.Jitter")
	_, err = webhooks.New(webhooks.Config{Store: b.store, Schedule: webhooks.Schedule{Delays: []time.Duration{0}}})
	require.ErrorContains(t, err, "Config.Schedule.Delays[0]")
	_, err = webhooks.New(webhooks.Config{Store: b.store, Timeout: -1})
	require.ErrorContains(t, err, "Config.Timeout")
}

// A receiver that does not answer holds only its own slot: the other
// deliveries go out meanwhile, one after another through the free slot.
func TestASlowReceiverHoldsOnlyItsOwnSlot(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	b := setup(t, slow.URL) // the first delivery due: to the slow receiver
	fast := newReceiver(t, http.StatusOK)
	for range 3 {
		job, _, err := b.store.CreateJob(t.Context(), store.NewJob{Type: "t", Webhook: &store.Webhook{URL: fast.URL, Secret: secret}},
			func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
		require.NoError(t, err)
		job, err = b.store.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		b.clock.Set(*job.FinishedAt)
	}
	d := b.deliverer(t, webhooks.Config{PollInterval: time.Hour, Concurrency: 2})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow receiver's delivery was not attempted")
	}
	for i := range 3 {
		select {
		case <-fast.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d of 3 to the fast receiver waited for the slow one", i+1)
		}
	}
	cancel()
	require.NoError(t, <-done)
}

// A receiver that does not answer holds at most MaxPerHost slots, however
// many of its deliveries are due first: the others are handed back, not
// attempted, and the deliveries to other receivers go out (issue 24,
// item 7: before, four deliveries to one stalled receiver held all four
// slots).
func TestASlowReceiverHoldsAtMostMaxPerHostSlots(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	b := setup(t, slow.URL)
	closeJob := func(url string) warren.Job {
		job, _, err := b.store.CreateJob(t.Context(), store.NewJob{Type: "t", Webhook: &store.Webhook{URL: url, Secret: secret}},
			func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
		require.NoError(t, err)
		job, err = b.store.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		b.clock.Set(*job.FinishedAt)
		return job
	}
	slowJobs := []warren.Job{b.job}
	for range 3 {
		slowJobs = append(slowJobs, closeJob(slow.URL))
	}
	fast := newReceiver(t, http.StatusOK)
	for range 3 {
		closeJob(fast.URL)
	}
	d := b.deliverer(t, webhooks.Config{PollInterval: time.Hour, Concurrency: 4, MaxPerHost: 2, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for i := range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d of 2 to the slow receiver was not attempted", i+1)
		}
	}
	for i := range 3 {
		select {
		case <-fast.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d of 3 to the fast receiver waited for the slow one", i+1)
		}
	}
	select {
	case <-arrived:
		t.Fatal("a third delivery to the slow receiver was attempted")
	default:
	}
	var handedBack int
	for _, job := range slowJobs {
		ds, err := b.store.ListDeliveries(t.Context(), job.ID)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		if ds[0].Attempts == 0 {
			// Handed back: no attempt spent, no error of its own.
			handedBack++
			require.Equal(t, store.DeliveryPending, ds[0].State)
			require.Empty(t, ds[0].LastError)
			require.True(t, ds[0].NextAttemptAt.After(b.clock.Now().Add(29*time.Second)), "due again in about Timeout: %s", ds[0].NextAttemptAt)
		}
	}
	require.Equal(t, 2, handedBack, "the two over the slow receiver's share are handed back")
	cancel()
	require.NoError(t, <-done)
}
