// Package handlers holds the built-in task handlers that `warren worker`
// serves and `warren demo` runs: echo, wordcount, sleep, flaky and tree,
// and the built-in reducer top_words.
package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
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
	"tree":      Tree,
}

// Reducers are the built-in reducers (reduce tasks), by task type.
var Reducers = map[string]worker.ReducerFunc{
	"top_words": TopWords,
}

// TopWordsResult is what TopWords returns: the most frequent words, most
// frequent first (ties in word order), and how many wordcount tasks
// failed.
type TopWordsResult struct {
	Top         []WordCount `json:"top"`
	FailedTasks int64       `json:"failed_tasks"`
}

// WordCount is one word and its count.
type WordCount struct {
	Word  string `json:"word"`
	Count int64  `json:"count"`
}

// TopWords is the fan-in of a wordcount job as a reduce task: it merges
// the counts of every completed task, read in task id order page by page,
// and returns the {"n": N} (default 10) most frequent words. The same
// reducer in Python is examples/python-worker's top_words.
func TopWords(_ context.Context, job worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
	in := struct {
		N int `json:"n"`
	}{N: 10}
	if len(job.Payload) > 0 && string(job.Payload) != "null" {
		if err := json.Unmarshal(job.Payload, &in); err != nil || in.N < 1 {
			return nil, worker.Permanent(errors.New(`top_words: payload must be {"n": N} with N >= 1`))
		}
	}
	counts := map[string]int64{}
	var out TopWordsResult
	for o, err := range outcomes {
		if err != nil {
			return nil, err
		}
		if !o.Completed() {
			out.FailedTasks++
			continue
		}
		var c map[string]int64
		if err := json.Unmarshal(o.Result, &c); err != nil {
			return nil, worker.Permanent(fmt.Errorf("top_words: task %d's result is not word counts: %w", o.TaskID, err))
		}
		for w, n := range c {
			counts[w] += n
		}
	}
	out.Top = make([]WordCount, 0, len(counts))
	for w, n := range counts {
		out.Top = append(out.Top, WordCount{w, n})
	}
	slices.SortFunc(out.Top, func(a, b WordCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Word, b.Word))
	})
	out.Top = out.Top[:min(in.N, len(out.Top))]
	return out, nil
}

// Echo returns its payload unchanged.
func Echo(_ context.Context, t worker.Task) (any, error) {
	return t.Payload, nil
}

// TreeNode is the payload of a tree task: a node at Depth of a tree of
// Levels levels below its root, each node above the last level spawning
// Fanout children.
type TreeNode struct {
	Depth  int `json:"depth"`
	Fanout int `json:"fanout"`
	Levels int `json:"levels"`
}

// Tree spawns the children of the node its payload names (TreeNode) and
// returns its depth: a job of one root task {"fanout": F, "levels": L}
// grows to the whole tree, 1 + F + F^2 + ... + F^L tasks.
func Tree(_ context.Context, t worker.Task) (any, error) {
	var n TreeNode
	if err := json.Unmarshal(t.Payload, &n); err != nil || n.Depth < 0 || n.Fanout < 0 || n.Levels < 0 {
		return nil, worker.Permanent(errors.New(`tree: payload must be {"depth": D, "fanout": F, "levels": L}, each >= 0`))
	}
	if n.Depth < n.Levels && n.Fanout > 0 {
		children := make([]any, n.Fanout)
		for i := range children {
			children[i] = TreeNode{Depth: n.Depth + 1, Fanout: n.Fanout, Levels: n.Levels}
		}
		if err := t.Spawn(children...); err != nil {
			return nil, worker.Permanent(err)
		}
	}
	return n.Depth, nil
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
