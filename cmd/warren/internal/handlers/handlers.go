// Package handlers holds the built-in task handlers that `warren worker`
// serves and `warren demo` runs: echo, wordcount, sleep and flaky.
package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/warrenhq/warren/worker"
)

// Builtins are the built-in handlers, by task type.
var Builtins = map[string]worker.HandlerFunc{
	"echo":      Echo,
	"wordcount": Wordcount,
	"sleep":     Sleep,
	"flaky":     Flaky,
}

// Echo returns its payload unchanged.
func Echo(_ context.Context, t worker.Task) (any, error) {
	return t.Payload, nil
}

// Wordcount counts the words of {"text": "..."}: a word is a maximal run of
// Unicode letters and digits, lowercased.
func Wordcount(_ context.Context, t worker.Task) (any, error) {
	var in struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(t.Payload, &in); err != nil || in.Text == nil {
		return nil, worker.Permanent(errors.New(`wordcount: payload must be {"text": "..."}`))
	}
	return countWords(*in.Text), nil
}

func countWords(text string) map[string]int64 {
	counts := map[string]int64{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		counts[strings.ToLower(w)]++
	}
	return counts
}

// Sleep sleeps {"ms": N} milliseconds (cut short by shutdown).
func Sleep(ctx context.Context, t worker.Task) (any, error) {
	var in struct {
		MS *int64 `json:"ms"`
	}
	if err := json.Unmarshal(t.Payload, &in); err != nil || in.MS == nil || *in.MS < 0 {
		return nil, worker.Permanent(errors.New(`sleep: payload must be {"ms": N} with N >= 0`))
	}
	if err := pause(ctx, time.Duration(*in.MS)*time.Millisecond); err != nil {
		return nil, err
	}
	return map[string]int64{"slept_ms": *in.MS}, nil
}

// flakyPayload drives the Flaky handler, for demos and tests.
type flakyPayload struct {
	Value     json.RawMessage `json:"value"`
	FailTimes int             `json:"fail_times"`
	Permanent bool            `json:"permanent"`
	Panic     bool            `json:"panic"`
	FailUntil *time.Time      `json:"fail_until"`
	SleepMS   int64           `json:"sleep_ms"`
}

// Flaky sleeps sleep_ms, then fails transiently on the first fail_times
// attempts, permanently if permanent, panics if panic, fails transiently
// while now < fail_until, and otherwise returns value.
func Flaky(ctx context.Context, t worker.Task) (any, error) {
	var in flakyPayload
	if err := json.Unmarshal(t.Payload, &in); err != nil {
		return nil, worker.Permanent(fmt.Errorf("flaky: bad payload: %v", err))
	}
	if err := pause(ctx, time.Duration(in.SleepMS)*time.Millisecond); err != nil {
		return nil, err
	}
	switch {
	case t.Attempt <= in.FailTimes:
		return nil, fmt.Errorf("flaky: planned transient failure on attempt %d of %d", t.Attempt, in.FailTimes)
	case in.Permanent:
		return nil, worker.Permanent(errors.New("flaky: planned permanent failure"))
	case in.Panic:
		panic("flaky: planned panic")
	case in.FailUntil != nil && time.Now().Before(*in.FailUntil):
		return nil, fmt.Errorf("flaky: failing until %s", in.FailUntil.Format(time.RFC3339))
	}
	if len(in.Value) == 0 {
		return json.RawMessage("null"), nil
	}
	return in.Value, nil
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
