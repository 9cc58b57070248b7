package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	w, err := New(Config{})
	require.NoError(t, err)
	require.Equal(t, broker.DefaultURL, w.cfg.AMQPURL)
	require.Equal(t, DefaultConcurrency, w.cfg.Concurrency)
	require.Equal(t, 2*DefaultConcurrency, w.cfg.Prefetch)
	require.Equal(t, DefaultShutdownTimeout, w.cfg.ShutdownTimeout)
	require.Equal(t, DefaultReconnectBackoffMax, w.cfg.ReconnectBackoffMax)
	require.Contains(t, w.cfg.Name, ":")
	require.NotNil(t, w.cfg.Logger)
	require.Equal(t, protocol.NamesFor(""), w.names)
	require.Equal(t, protocol.DefaultRetryTiers, w.cfg.RetryTiers)

	w, err = New(Config{Concurrency: 3, Prefix: "p."})
	require.NoError(t, err)
	require.Equal(t, 6, w.cfg.Prefetch)
	require.Equal(t, "p.tasks.q", w.names.TasksQueue)

	tiers := []time.Duration{time.Second}
	w, err = New(Config{RetryTiers: tiers})
	require.NoError(t, err)
	tiers[0] = time.Hour
	require.Equal(t, []time.Duration{time.Second}, w.cfg.RetryTiers, "New keeps its own copy")
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func TestCancelSetEvictsTheOldestBeyondItsLimit(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c := newCancelSet(3, time.Hour, clock.Now)
	for _, id := range []string{"a", "b", "c"} {
		c.add(id)
		clock.now = clock.now.Add(time.Second)
	}
	require.True(t, c.has("a"))
	c.add("a") // cancelled again: now the newest
	c.add("d") // evicts b, the oldest
	require.False(t, c.has("b"))
	for _, id := range []string{"a", "c", "d"} {
		require.True(t, c.has(id), id)
	}
	require.Equal(t, 3, c.len())
	require.False(t, c.has("never"))
}

func TestCancelSetForgetsExpiredJobs(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c := newCancelSet(100, time.Hour, clock.Now)
	c.add("old")
	clock.now = clock.now.Add(59 * time.Minute)
	c.add("young")
	require.True(t, c.has("old"))
	clock.now = clock.now.Add(time.Minute)
	require.False(t, c.has("old"), "an hour old")
	require.True(t, c.has("young"))
	c.add("new") // drops what has expired
	require.Equal(t, 2, c.len())
}

func TestCancelSetDefaultBounds(t *testing.T) {
	t.Parallel()
	w, err := New(Config{})
	require.NoError(t, err)
	require.Equal(t, 100_000, w.cancelled.limit)
	require.Equal(t, 24*time.Hour, w.cancelled.ttl)
}

func TestPublishBackoffIsBounded(t *testing.T) {
	t.Parallel()
	require.Equal(t, minPublishBackoff, publishBackoff(1))
	require.Equal(t, 2*minPublishBackoff, publishBackoff(2))
	for n := int64(1); n < 100; n++ {
		d := publishBackoff(n)
		require.GreaterOrEqual(t, d, 200*time.Millisecond)
		require.LessOrEqual(t, d, time.Second)
	}
}

// The reconnect backoff doubles from 100 ms up to its bound, each wait
// within +-20% of its nominal value.
func TestReconnectBackoffDoublesUpToItsBoundWithJitter(t *testing.T) {
	t.Parallel()
	limit := time.Second
	for n, nominal := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 50: time.Second,
	} {
		for range 100 {
			d := reconnectBackoff(n, limit)
			require.GreaterOrEqual(t, d, nominal*8/10, "attempt %d", n)
			require.LessOrEqual(t, d, nominal*12/10, "attempt %d", n)
		}
	}
}

func TestFatalSetUpErrors(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]bool{
		amqp.PreconditionFailed: true, amqp.AccessRefused: true, amqp.NotAllowed: true,
		amqp.ConnectionForced: false, amqp.NotFound: false, amqp.ChannelError: false,
	} {
		err := fmt.Errorf("worker: %w", &amqp.Error{Code: code, Reason: "x"})
		require.Equal(t, want, fatal(err), "code %d", code)
	}
	require.False(t, fatal(errors.New("cannot connect to RabbitMQ")))
}

// A bounce waits the nth tier, none past the third, and no tier that
// ends after the clear end when a shorter one does not; the first at
// least.
func TestUnservedDelay(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}
	var got []time.Duration
	for _, n := range []int{1, 2, 3, 9} {
		got = append(got, unservedDelay(tiers, n, time.Hour))
	}
	require.Equal(t, []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 30 * time.Second}, got)
	require.Equal(t, 5*time.Second, unservedDelay(tiers, 3, 29*time.Second))
	require.Equal(t, time.Second, unservedDelay(tiers, 3, 4*time.Second))
	require.Equal(t, time.Second, unservedDelay(tiers, 3, -time.Second))
}
