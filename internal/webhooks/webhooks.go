// Package webhooks delivers the webhooks of closed jobs: the deliverer
// claims due deliveries from the store's outbox of deliveries
// (store.Store.ClaimDeliveries), POSTs each one's body, signed with its
// job's secret, and records how the attempt ended; a delivery is retried
// with backoff (Schedule) until a receiver answers 2xx, or given up a day
// after it was made.
//
// The store writes a delivery in the transaction that closes its job, so
// a close is never without its delivery, and a delivery survives a
// restart: the next server, or another one on the same PostgreSQL store,
// takes it. A delivery is sent at least once: a receiver may see one
// again (after a crash between its answer and the record), and tells it by
// its X-Warren-Delivery id, the same on every attempt.
package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenhq/warren/store"
)

// The headers of every delivery.
const (
	// HeaderDelivery carries the delivery's id, the same on every attempt.
	HeaderDelivery = "X-Warren-Delivery"
	// HeaderEvent carries the event, store.EventJobClosed.
	HeaderEvent = "X-Warren-Event"
	// HeaderSignature carries "sha256=" and the hex HMAC-SHA256 of the
	// body with the job's secret (Sign).
	HeaderSignature = "X-Warren-Signature"
)

// Defaults for Config.
const (
	// DefaultTimeout bounds each attempt: connecting, sending, and the
	// answer's status and headers.
	DefaultTimeout = 10 * time.Second
	// DefaultPollInterval is how often the deliverer looks for due
	// deliveries when nothing woke it: those of jobs other servers closed,
	// and retries.
	DefaultPollInterval = 5 * time.Second
	// DefaultConcurrency is how many deliveries are attempted at once.
	DefaultConcurrency = 16
	// DefaultMaxPerHost is how many of them may go to one receiver (one
	// host and port) at once.
	DefaultMaxPerHost = 4
	// DefaultConnectTimeout bounds connecting to a receiver: a receiver
	// that does not accept its connection within it is not there.
	DefaultConnectTimeout = 3 * time.Second
)

// maxAnswerBytes is how much of an answer's body is read: a receiver's
// answer says nothing warren needs beyond its status.
const maxAnswerBytes = 4 << 10

// maxErrorAnswer is how much of a failed answer's body goes into the
// delivery's last_error.
const maxErrorAnswer = 200

// recordTimeout bounds recording an attempt once the deliverer stops.
const recordTimeout = 5 * time.Second

// Sign returns the X-Warren-Signature of body with secret:
// "sha256=" and the hex HMAC-SHA256 of the body's bytes.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Config configures a Deliverer.
type Config struct {
	// Store holds the deliveries. Required.
	Store store.Store
	// AllowPrivate lets deliveries connect to loopback, private and other
	// non-public addresses (Forbidden); by default every dial to one is
	// refused, and the attempt fails.
	AllowPrivate bool
	// Timeout bounds each attempt; 0 means DefaultTimeout. A delivery is
	// leased to its attempt for twice Timeout plus 10 s: should the
	// server die meanwhile, another takes it after that.
	Timeout time.Duration
	// PollInterval is the time between looks at the store when nothing
	// woke the deliverer (Wake); 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Concurrency is how many deliveries are attempted at once; 0 means
	// DefaultConcurrency.
	Concurrency int
	// MaxPerHost is how many of them may go to one receiver (the URL's
	// host and port) at once; 0 means DefaultMaxPerHost, and it is at
	// most Concurrency. A slow receiver then holds only its own share of
	// the slots: a delivery claimed for a receiver that has MaxPerHost
	// attempts in flight is not attempted but handed back, due again in
	// about Timeout, without spending one of its attempts.
	MaxPerHost int
	// ConnectTimeout bounds connecting to a receiver, within Timeout; 0
	// means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Schedule decides the retries.
	Schedule Schedule
	// UserAgent is sent with every delivery; "" means "warren/" and the
	// version warren was built at, if known.
	UserAgent string
	// Rand returns a random number in [0, 1) for the jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// Metrics, when not nil, counts the attempts (NewMetrics).
	Metrics *Metrics
	// OnAttempt, when set, is called after each attempt was recorded
	// (or its record ignored: recorded false). It must not block.
	OnAttempt func(a Attempt)
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Attempt is what an attempt did, for Config.OnAttempt.
type Attempt struct {
	Delivery store.ClaimedDelivery
	// Result is the store record of how it ended.
	Result store.DeliveryAttempt
	// Recorded is false when the store ignored the record (the lease
	// passed and another claim took the delivery).
	Recorded bool
}

// Deliverer delivers webhooks. Make one with New, then Run it.
type Deliverer struct {
	cfg    Config
	lease  time.Duration
	client *http.Client
	wake   chan struct{}
	log    *slog.Logger

	mu sync.Mutex
	// soon is when the earliest retry this deliverer scheduled is due, on
	// the process's clock (a timer's), zero for none.
	soon time.Time
	// hosts counts the attempts in flight by receiver (hostKey).
	hosts map[string]int
}

// New returns a deliverer, or an error naming the Config field that is
// wrong.
func New(cfg Config) (*Deliverer, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("webhooks: Config.Store is required")
	case cfg.Timeout < 0 || cfg.PollInterval < 0 || cfg.Concurrency < 0:
		return nil, errors.New("webhooks: Config.Timeout, PollInterval and Concurrency must be >= 0")
	case cfg.MaxPerHost < 0 || cfg.ConnectTimeout < 0:
		return nil, errors.New("webhooks: Config.MaxPerHost and ConnectTimeout must be >= 0")
	case cfg.Schedule.Jitter < 0 || cfg.Schedule.Jitter >= 1:
		return nil, fmt.Errorf("webhooks: Config.Schedule.Jitter must be in [0, 1), got %v", cfg.Schedule.Jitter)
	}
	for i, d := range cfg.Schedule.Delays {
		if d <= 0 {
			return nil, fmt.Errorf("webhooks: Config.Schedule.Delays[%d] must be > 0, got %s", i, d)
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxPerHost == 0 {
		cfg.MaxPerHost = DefaultMaxPerHost
	}
	cfg.MaxPerHost = min(cfg.MaxPerHost, cfg.Concurrency)
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.ConnectTimeout = min(cfg.ConnectTimeout, cfg.Timeout)
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent()
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client := &http.Client{
		Transport: newTransport(cfg.ConnectTimeout, cfg.Timeout, cfg.AllowPrivate),
		Timeout:   cfg.Timeout,
		// A redirect is not followed: it would leave the address checked,
		// and a receiver that moved says so by failing.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Deliverer{cfg: cfg, lease: 2*cfg.Timeout + 10*time.Second, client: client, wake: make(chan struct{}, 1), log: cfg.Logger,
		hosts: make(map[string]int)}, nil
}

// newTransport returns the transport of the deliveries: no proxy (the
// address rule could not hold through one), and a dialer that refuses
// forbidden addresses unless allowPrivate; connecting takes at most
// connect, the TLS handshake and the answer's headers timeout each.
func newTransport(connect, timeout time.Duration, allowPrivate bool) *http.Transport {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = dialControl
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
	}
}

// userAgent is "warren/" and the version of the warren module this binary
// was built with, or "warren" when it is not known.
func userAgent() string {
	const module = "github.com/warrenhq/warren"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "warren"
	}
	version := ""
	if info.Main.Path == module {
		version = info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			version = dep.Version
		}
	}
	if version == "" || version == "(devel)" {
		return "warren"
	}
	return "warren/" + strings.TrimPrefix(version, "v")
}

// Wake makes a running deliverer look for due deliveries now (a job
// closed in this process). It never blocks.
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx is done, then returns nil once the attempts in
// flight are recorded: an attempt cut short by the stop is recorded as
// due at once, for the next server (or this one, restarted) to make
// again. Up to Concurrency attempts run at once, each slot taking the
// next due delivery as soon as it is free, so a slow receiver holds only
// its own slots. It looks for due deliveries at once, whenever woken,
// when a slot frees, when a retry it scheduled is due, and every
// PollInterval.
func (d *Deliverer) Run(ctx context.Context) error {
	poll := time.NewTicker(d.cfg.PollInterval)
	defer poll.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	var (
		wg       sync.WaitGroup
		inFlight atomic.Int64
		freed    = make(chan struct{}, 1)
	)
	defer wg.Wait()
	for {
		if free := d.cfg.Concurrency - int(inFlight.Load()); free > 0 && ctx.Err() == nil {
			claimed, err := d.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("webhooks: cannot claim deliveries; trying again at the next poll", "error", err)
			}
			for _, c := range claimed {
				host := hostKey(c.URL)
				if !d.takeHost(host) {
					d.handBack(ctx, c)
					continue
				}
				inFlight.Add(1)
				wg.Go(func() {
					defer func() {
						d.releaseHost(host)
						inFlight.Add(-1)
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					d.attempt(ctx, c)
				})
			}
			if len(claimed) == free {
				continue // every slot busy; there may be more due when one frees
			}
		}
		retry.Reset(d.untilSoon())
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		case <-d.wake:
		case <-retry.C:
		case <-freed:
		}
	}
}

// untilSoon returns the time until the earliest retry this deliverer
// scheduled (at least a millisecond), or an hour when it scheduled none;
// it forgets that retry.
func (d *Deliverer) untilSoon() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.soon.IsZero() {
		return time.Hour
	}
	wait := max(time.Until(d.soon), time.Millisecond)
	d.soon = time.Time{}
	return wait
}

// scheduled notes a retry due in wait.
func (d *Deliverer) scheduled(wait time.Duration) {
	at := time.Now().Add(wait)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.soon.IsZero() || at.Before(d.soon) {
		d.soon = at
	}
}

// RunOnce claims up to Concurrency due deliveries, attempts them at once,
// and returns how many it claimed once every attempt is recorded.
func (d *Deliverer) RunOnce(ctx context.Context) (int, error) {
	claimed, err := d.claim(ctx, d.cfg.Concurrency)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, c := range claimed {
		host := hostKey(c.URL)
		if !d.takeHost(host) {
			d.handBack(ctx, c)
			continue
		}
		wg.Go(func() {
			defer d.releaseHost(host)
			d.attempt(ctx, c)
		})
	}
	wg.Wait()
	return len(claimed), nil
}

// takeHost takes one of host's MaxPerHost slots, if one is free.
func (d *Deliverer) takeHost(host string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts[host] >= d.cfg.MaxPerHost {
		return false
	}
	d.hosts[host]++
	return true
}

// releaseHost gives back a slot takeHost took.
func (d *Deliverer) releaseHost(host string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts[host]--; d.hosts[host] <= 0 {
		delete(d.hosts, host)
	}
}

// handBack gives back c, claimed for a receiver whose slots are all busy,
// not attempted (its attempts as they were before the claim, its last
// error kept) and due again in about Timeout (jittered by half, so that a
// backlog to one receiver comes back spread out).
func (d *Deliverer) handBack(ctx context.Context, c store.ClaimedDelivery) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	at, err := d.cfg.Store.Now(rctx)
	if err == nil {
		wait := time.Duration(float64(d.cfg.Timeout) * (0.5 + d.cfg.Rand()))
		_, err = d.cfg.Store.RecordDeliveryAttempt(rctx, store.DeliveryAttempt{ID: c.ID, Attempt: c.Attempts, State: store.DeliveryPending,
			At: at, NextAttemptAt: at.Add(wait), NotAttempted: true})
		d.scheduled(wait)
	}
	if err != nil {
		d.log.Warn("webhooks: cannot hand back a delivery; it is tried again when its lease ends",
			"job_id", c.JobID, "delivery_id", c.ID, "host", hostOf(c.URL), "error", err)
	}
}

// hostKey is the receiver of a webhook URL, for MaxPerHost: its host and
// port, as the URL gives them, in lower case.
func hostKey(raw string) string {
	return strings.ToLower(hostOf(raw))
}

// claim claims up to limit deliveries due by the store's clock
// (store.Store.Now, which wrote their NextAttemptAt), leased for an
// attempt.
func (d *Deliverer) claim(ctx context.Context, limit int) ([]store.ClaimedDelivery, error) {
	now, err := d.cfg.Store.Now(ctx)
	if err != nil {
		return nil, err
	}
	return d.cfg.Store.ClaimDeliveries(ctx, store.DeliveryClaim{Now: now, Lease: d.lease, Limit: limit})
}

// attempt POSTs c and records how it ended, at the store's clock.
func (d *Deliverer) attempt(ctx context.Context, c store.ClaimedDelivery) {
	status, err := d.post(ctx, c)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	log := d.log.With("job_id", c.JobID, "delivery_id", c.ID, "attempt", c.Attempts, "host", hostOf(c.URL))
	at, nerr := d.cfg.Store.Now(rctx)
	if nerr != nil {
		log.Warn("webhooks: cannot record an attempt; the delivery is tried again when its lease ends", "error", nerr)
		return
	}
	a := store.DeliveryAttempt{ID: c.ID, Attempt: c.Attempts, Status: status, At: at}
	outcome := "retried"
	switch {
	case err == nil:
		a.State, outcome = store.DeliveryDelivered, "delivered"
	case ctx.Err() != nil && status == 0:
		// The server stops: the attempt is handed back, due at once.
		a.State, a.NextAttemptAt, a.Error = store.DeliveryPending, at, "interrupted: the server stopped during the attempt"
	default:
		a.Error = err.Error()
		if next, ok := d.cfg.Schedule.Next(c.CreatedAt, c.Attempts, at, d.cfg.Rand()); ok {
			a.State, a.NextAttemptAt = store.DeliveryPending, next
		} else {
			a.State, outcome = store.DeliveryFailed, "failed"
		}
	}
	recorded, rerr := d.cfg.Store.RecordDeliveryAttempt(rctx, a)
	cancel()
	if status != 0 {
		log = log.With("status", status)
	}
	switch {
	case rerr != nil:
		// The lease ends and the delivery is taken again: at least once.
		log.Warn("webhooks: cannot record an attempt; the delivery is tried again when its lease ends", "error", rerr)
		return
	case !recorded:
		log.Warn("webhooks: an attempt outlasted its lease; another one took the delivery")
	case a.State == store.DeliveryDelivered:
		log.Info("webhooks: delivered")
	case a.State == store.DeliveryFailed:
		log.Error("webhooks: giving up a delivery: its last attempt failed", "error", a.Error)
	default:
		d.scheduled(a.NextAttemptAt.Sub(at))
		log.Warn("webhooks: delivery failed; trying again later", "error", a.Error, "next_attempt_at", a.NextAttemptAt)
	}
	if recorded {
		d.cfg.Metrics.attempted(outcome)
	}
	if d.cfg.OnAttempt != nil {
		d.cfg.OnAttempt(Attempt{Delivery: c, Result: a, Recorded: recorded})
	}
}

// post sends c once and returns the answer's status (0 for none) and nil
// for a 2xx, else why the attempt failed.
func (d *Deliverer) post(ctx context.Context, c store.ClaimedDelivery) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	req.Header.Set(HeaderDelivery, c.ID)
	req.Header.Set(HeaderEvent, c.Event)
	req.Header.Set(HeaderSignature, Sign(c.Secret, c.Body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, attemptError(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, nil
	}
	msg := fmt.Sprintf("the receiver answered %s", resp.Status)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		msg += " (redirects are not followed)"
	}
	if text := strings.TrimSpace(string(answer)); text != "" {
		if len(text) > maxErrorAnswer {
			text = text[:maxErrorAnswer] + "..."
		}
		msg += ": " + text
	}
	return resp.StatusCode, errors.New(msg)
}

// attemptError words a failed request without the URL, which the
// delivery's job shows already.
func attemptError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the attempt's timeout: %w", err)
	}
	return err
}

// hostOf returns the host of a webhook URL, for logs: the rest of it may
// carry a token.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// Metrics are the deliverer's Prometheus metrics.
type Metrics struct {
	deliveries *prometheus.CounterVec
}

// NewMetrics registers the deliverer's metrics with reg:
// warren_webhook_deliveries_total{outcome="delivered|retried|failed"},
// counting attempts by how they ended, and
// warren_webhook_deliveries_pending, read from st at each scrape.
func NewMetrics(reg prometheus.Registerer, st store.Store) (*Metrics, error) {
	m := &Metrics{deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_webhook_deliveries_total",
		Help: "Webhook delivery attempts by how they ended: delivered (a 2xx), retried (another attempt is due later) or failed (given up a day after the job closed).",
	}, []string{"outcome"})}
	for _, o := range []string{"delivered", "retried", "failed"} {
		m.deliveries.WithLabelValues(o)
	}
	if err := reg.Register(m.deliveries); err != nil {
		return nil, err
	}
	if err := reg.Register(&pendingCollector{store: st, desc: prometheus.NewDesc("warren_webhook_deliveries_pending",
		"Webhook deliveries not delivered nor given up yet (the outbox of deliveries).", nil, nil)}); err != nil {
		return nil, err
	}
	return m, nil
}

// attempted counts an attempt that ended with outcome; a nil m counts
// nothing.
func (m *Metrics) attempted(outcome string) {
	if m != nil {
		m.deliveries.WithLabelValues(outcome).Inc()
	}
}

// pendingCollector reads the pending deliveries at each scrape.
type pendingCollector struct {
	store store.Store
	desc  *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.store.PendingDeliveries(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
