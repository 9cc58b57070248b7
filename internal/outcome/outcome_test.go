package outcome

import (
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

	d := Of(map[string]int{"n": 2}, nil, isPermanent, 1, 3, tiers)
	require.Equal(t, Complete, d.Action)
	require.JSONEq(t, `{"n":2}`, string(d.Result))

	d = Of(make(chan int), nil, isPermanent, 1, 3, tiers)
	require.Equal(t, Fail, d.Action, "a result that cannot be encoded is a permanent failure")
	require.Equal(t, protocol.ReasonPermanent, d.Reason)
	require.Error(t, d.Err)

	d = Of(nil, errors.New("flaky"), isPermanent, 2, 3, tiers)
	require.Equal(t, Retry, d.Action)
	require.Equal(t, 5*time.Second, d.Delay)

	d = Of(nil, errors.New("flaky"), isPermanent, 4, 3, tiers)
	require.Equal(t, DeadLetter, d.Action)
	require.Equal(t, protocol.ReasonRetriesExhausted, d.Reason)

	d = Of(nil, fmt.Errorf("bad: %w", errPermanent), isPermanent, 1, 3, tiers)
	require.Equal(t, Fail, d.Action)
	require.Equal(t, protocol.ReasonPermanent, d.Reason)
}
