package outcome

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

// errPermanent stands for an error a worker marks permanent.
var errPermanent = errors.New("permanent")

func TestDecideFailure(t *testing.T) {
	t.Parallel()
	transient := errors.New("flaky")
	permanent := fmt.Errorf("wrapped: %w", errPermanent)
	tiers := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
	for _, c := range []struct {
		err                 error
		attempt, maxRetries int
		want                Action
		delay               time.Duration
	}{
		{transient, 1, 3, Retry, time.Second},
		{transient, 2, 3, Retry, 5 * time.Second},
		{transient, 3, 3, Retry, 30 * time.Second},
		{transient, 5, 9, Retry, 30 * time.Second}, // past the last tier: the last
		{transient, 4, 3, DeadLetter, 0},
		{transient, 1, 0, DeadLetter, 0},
		{permanent, 1, 3, Fail, 0},
		{permanent, 9, 3, Fail, 0},
	} {
		action, delay := Decide(errors.Is(c.err, errPermanent), c.attempt, c.maxRetries, tiers)
		require.Equal(t, c.want, action, "%v attempt %d of 1+%d", c.err, c.attempt, c.maxRetries)
		require.Equal(t, c.delay, delay, "%v attempt %d of 1+%d", c.err, c.attempt, c.maxRetries)
	}
}

func TestEncodeResult(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, `null`},
		{json.RawMessage(nil), `null`},
		{json.RawMessage(`{"a": [1, 2]}`), `{"a": [1, 2]}`},
		{[]byte(` [1, 2] `), ` [1, 2] `},
		{[]byte(`not json`), `"bm90IGpzb24="`},
		{map[string]int{"n": 1}, `{"n":1}`},
		{(*struct{})(nil), `null`},
		{"text", `"text"`},
	} {
		got, err := EncodeResult(c.in)
		require.NoError(t, err, "%#v", c.in)
		require.Equal(t, c.want, string(got), "%#v", c.in)
	}
	for _, bad := range []any{json.RawMessage(`{`), make(chan int), func() {}} {
		_, err := EncodeResult(bad)
		require.Error(t, err, "%#v", bad)
	}
}

func TestOfSettlesEveryKindOfRun(t *testing.T) {
	t.Parallel()
	isPermanent := func(err error) bool { return errors.Is(err, errPermanent) }
	tiers := []time.Duration{time.Second, 5 * time.Second}

	d := Of(Run{Value: map[string]int{"n": 2}}, isPermanent, 1, 3, tiers)
	require.Equal(t, Complete, d.Action)
	require.JSONEq(t, `{"n":2}`, string(d.Result))

	d = Of(Run{Value: make(chan int)}, isPermanent, 1, 3, tiers)
	require.Equal(t, Fail, d.Action, "a result that cannot be encoded is a permanent failure")
	require.Equal(t, protocol.ReasonPermanent, d.Reason)
	require.Error(t, d.Err)

	d = Of(Run{Err: errors.New("flaky")}, isPermanent, 2, 3, tiers)
	require.Equal(t, Retry, d.Action)
	require.Equal(t, 5*time.Second, d.Delay)

	d = Of(Run{Err: errors.New("flaky")}, isPermanent, 4, 3, tiers)
	require.Equal(t, DeadLetter, d.Action)
	require.Equal(t, protocol.ReasonRetriesExhausted, d.Reason)

	d = Of(Run{Err: fmt.Errorf("bad: %w", errPermanent)}, isPermanent, 1, 3, tiers)
	require.Equal(t, Fail, d.Action)
	require.Equal(t, protocol.ReasonPermanent, d.Reason)
}

// A run that ends at or after its deadline is a transient failure with
// the timeout's error, whatever its handler returned: a result, a
// transient or a permanent error. It is retried like any transient
// failure, then dead-lettered. Within the limit, or without one, the
// handler's return decides.
func TestOfAnOverrunIsATransientTimeout(t *testing.T) {
	t.Parallel()
	isPermanent := func(err error) bool { return errors.Is(err, errPermanent) }
	tiers := []time.Duration{time.Second, 5 * time.Second}
	const limit = 5 * time.Second
	for _, r := range []Run{
		{Value: "too late"},
		{Err: errors.New("flaky")},
		{Err: context.DeadlineExceeded},
		{Err: fmt.Errorf("bad: %w", errPermanent)},
		{Value: make(chan int)},
	} {
		for _, elapsed := range []time.Duration{limit, limit + time.Nanosecond, time.Hour} {
			r.Timeout, r.Elapsed = limit, elapsed
			d := Of(r, isPermanent, 1, 3, tiers)
			require.Equal(t, Retry, d.Action, "%+v", r)
			require.Equal(t, time.Second, d.Delay)
			require.EqualError(t, d.Err, "worker: task timeout of 5s exceeded")
			require.ErrorIs(t, d.Err, context.DeadlineExceeded)

			d = Of(r, isPermanent, 4, 3, tiers)
			require.Equal(t, DeadLetter, d.Action, "%+v: the last attempt", r)
			require.Equal(t, protocol.ReasonTimeout, d.Reason)
			require.EqualError(t, d.Err, "worker: task timeout of 5s exceeded")
		}
	}

	within := Run{Value: 1, Timeout: limit, Elapsed: limit - time.Nanosecond}
	require.False(t, within.Overran())
	require.Equal(t, Complete, Of(within, isPermanent, 1, 3, tiers).Action)
	noLimit := Run{Value: 1, Elapsed: 24 * time.Hour}
	require.False(t, noLimit.Overran(), "no limit: a run may take as long as it takes")
	require.Equal(t, Complete, Of(noLimit, isPermanent, 1, 3, tiers).Action)
	permanent := Run{Err: errPermanent, Timeout: limit, Elapsed: time.Second}
	require.Equal(t, Fail, Of(permanent, isPermanent, 1, 3, tiers).Action, "a permanent error within the limit")
}

// A call's context has the deadline start + timeout, and says why it
// ended; without a limit it is the parent.
func TestContextHasTheTaskDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := Context(context.Background(), start, 20*time.Millisecond)
	defer cancel()
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, start.Add(20*time.Millisecond), deadline)
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	require.EqualError(t, context.Cause(ctx), "worker: task timeout of 20ms exceeded")
	require.True(t, Run{Timeout: 20 * time.Millisecond, Elapsed: time.Since(start)}.Overran(),
		"a handler that returns when its context is done has overrun")

	parent := context.Background()
	ctx, cancel = Context(parent, start, 0)
	defer cancel()
	require.Equal(t, parent, ctx)
}

// A result over the run's limit fails the task for good, with its own
// reason; one at the limit, or any result without a limit, completes.
func TestOfAResultOverTheLimitFailsForGood(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{time.Second}
	isPermanent := func(error) bool { return false }
	over := Of(Run{Value: "abcd", MaxResult: 5}, isPermanent, 1, 3, tiers) // "abcd" is 6 bytes of JSON
	require.Equal(t, Fail, over.Action)
	require.Equal(t, protocol.ReasonResultTooLarge, over.Reason)
	require.EqualError(t, over.Err, ResultTooLarge(6, 5).Error())
	require.Contains(t, over.Err.Error(), "the result is 6 bytes of JSON, over this worker's limit of 5")

	at := Of(Run{Value: "abc", MaxResult: 5}, isPermanent, 1, 3, tiers)
	require.Equal(t, Complete, at.Action)
	require.JSONEq(t, `"abc"`, string(at.Result))
	require.Equal(t, Complete, Of(Run{Value: "abcd"}, isPermanent, 1, 3, tiers).Action, "0 is no limit")
}
