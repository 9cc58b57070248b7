package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentileMsIsNearestRank(t *testing.T) {
	t.Parallel()
	lats := make([]time.Duration, 100)
	for i := range lats {
		lats[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	for _, c := range []struct {
		p    float64
		want float64
	}{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {0, 1}} {
		if got := percentileMs(lats, c.p); got != c.want {
			t.Errorf("p%g of 1..100 ms = %g, want %g", c.p, got, c.want)
		}
	}
	if got := percentileMs([]time.Duration{3 * time.Millisecond}, 99); got != 3 {
		t.Errorf("p99 of one value = %g, want 3", got)
	}
	if got := percentileMs(nil, 50); got != 0 {
		t.Errorf("p50 of none = %g, want 0", got)
	}
}

// countingSystem counts its jobs and fails the one numbered failAt (from 1;
// 0 never); the jobs started after it wait for the pass to be cancelled.
type countingSystem struct {
	n      atomic.Int64
	failAt int64
}

var errTest = errors.New("test job failed")

func (s *countingSystem) oneJob(ctx context.Context) error {
	n := s.n.Add(1)
	switch {
	case s.failAt == 0 || n < s.failAt:
		return nil
	case n == s.failAt:
		return errTest
	default:
		<-ctx.Done()
		return ctx.Err()
	}
}

func TestSmallPassRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	sys := &countingSystem{}
	lats, _, err := smallPass(context.Background(), sys, 8, 400)
	if err != nil {
		t.Fatal(err)
	}
	if len(lats) != 400 || sys.n.Load() != 400 {
		t.Fatalf("%d latencies, %d jobs run, want 400 each", len(lats), sys.n.Load())
	}
	for i := 1; i < len(lats); i++ {
		if lats[i] < lats[i-1] {
			t.Fatalf("latencies not sorted at %d", i)
		}
	}
}

func TestSmallPassStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	sys := &countingSystem{failAt: 5}
	_, _, err := smallPass(context.Background(), sys, 4, 400)
	if !errors.Is(err, errTest) {
		t.Fatalf("err = %v, want the job's error", err)
	}
	// The other 3 clients may each have started one more job before the
	// pass was cancelled, and no client starts one after.
	if n := sys.n.Load(); n > 5+3 {
		t.Fatalf("%d jobs started, the 5th failing, with 4 clients: want at most 8", n)
	}
}
