package queuereaper_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/queuereaper"
	"github.com/warrenhq/warren/protocol"
)

// fakeBroker is the queues a reaper sees, and what it did to them.
type fakeBroker struct {
	mu        sync.Mutex
	open      []string
	depth     map[string]broker.QueueDepth // absent: the queue does not exist
	calls     []string
	forgotten []string
	// busyAtDelete makes a delete find the queue in use.
	busyAtDelete bool
}

func (f *fakeBroker) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeBroker) setOpen(qs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open = qs
}

func (f *fakeBroker) setDepth(q string, d broker.QueueDepth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.depth[q] = d
}

func (f *fakeBroker) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

type testBundle struct {
	broker *fakeBroker
	now    time.Time
	reaper *queuereaper.Reaper
	seen   map[string]broker.QueueDepth
}

func setup(t *testing.T, idle time.Duration) *testBundle {
	t.Helper()
	b := &testBundle{broker: &fakeBroker{depth: map[string]broker.QueueDepth{}}, now: time.Unix(1_000_000, 0),
		seen: map[string]broker.QueueDepth{}}
	f := b.broker
	r, err := queuereaper.New(queuereaper.Config{
		Idle: idle,
		Now:  func() time.Time { return b.now },
		Open: func(context.Context) ([]string, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return slices.Clone(f.open), nil
		},
		Depth: func(q string) (broker.QueueDepth, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			d, ok := f.depth[q]
			if !ok {
				return broker.QueueDepth{}, &amqp.Error{Code: amqp.NotFound}
			}
			return d, nil
		},
		Unbind:  func(q string) error { f.record("unbind " + q); return nil },
		Declare: func(q string) error { f.record("declare " + q); return nil },
		Delete: func(q string) (bool, int, error) {
			f.record("delete " + q)
			f.mu.Lock()
			defer f.mu.Unlock()
			if d := f.depth[q]; d.Ready > 0 || d.Consumers > 0 || f.busyAtDelete {
				return false, 0, nil
			}
			delete(f.depth, q)
			return true, 0, nil
		},
		Forget:  func(q string) { f.mu.Lock(); f.forgotten = append(f.forgotten, q); f.mu.Unlock() },
		Observe: func(q string, d broker.QueueDepth, _ time.Time) { b.seen[q] = d },
	})
	require.NoError(t, err)
	b.reaper = r
	return b
}

func (b *testBundle) sweep(t *testing.T, after time.Duration) []string {
	t.Helper()
	b.now = b.now.Add(after)
	require.NoError(t, b.reaper.Sweep(context.Background()))
	return b.broker.takeCalls()
}

// A queue whose jobs closed is unbound once idle for Idle, deleted a
// sweep later, and the relay told to declare it again before its next
// publish.
func TestReaperDeletesAQueueIdleForIdleInTwoSweeps(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	b.broker.setOpen("gpu", protocol.DefaultQueue)
	b.broker.setDepth("gpu", broker.QueueDepth{})
	b.broker.setDepth(protocol.DefaultQueue, broker.QueueDepth{})
	require.Empty(t, b.sweep(t, 0), "an open job's queue is in use")
	require.Empty(t, b.sweep(t, 2*time.Hour), "an open job's queue is in use, however long it holds nothing")

	b.broker.setOpen() // the job closed
	require.Empty(t, b.sweep(t, 59*time.Minute), "idle for less than Idle")
	require.Equal(t, []string{"unbind gpu"}, b.sweep(t, time.Minute), "idle for Idle: unbound first")
	require.Equal(t, []string{"delete gpu"}, b.sweep(t, 15*time.Second), "still idle a sweep later: deleted")
	require.Equal(t, []string{"gpu", "gpu"}, b.broker.forgotten, "at the unbind and the delete")
	require.Empty(t, b.sweep(t, 2*time.Hour), "a deleted queue is forgotten; the default queue is never touched")
}

// A queue that a job, a message or a consumer used after it was unbound
// is bound back and its idle time starts again.
func TestReaperBindsBackAQueueUsedAfterItWasUnbound(t *testing.T) {
	t.Parallel()
	for name, use := range map[string]func(b *testBundle){
		"open job": func(b *testBundle) { b.broker.setOpen("gpu") },
		"message":  func(b *testBundle) { b.broker.setDepth("gpu", broker.QueueDepth{Ready: 1}) },
		"consumer": func(b *testBundle) { b.broker.setDepth("gpu", broker.QueueDepth{Consumers: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute)
			b.reaper.Note("gpu")
			b.broker.setDepth("gpu", broker.QueueDepth{})
			require.Equal(t, []string{"unbind gpu"}, b.sweep(t, time.Minute))
			use(b)
			require.Equal(t, []string{"declare gpu"}, b.sweep(t, 15*time.Second), "used after the unbind: bound back, not deleted")
			b.broker.setOpen()
			b.broker.setDepth("gpu", broker.QueueDepth{})
			require.Empty(t, b.sweep(t, 59*time.Second), "its idle time starts again")
			require.Equal(t, []string{"unbind gpu"}, b.sweep(t, time.Second))
		})
	}
}

// A queue that the delete finds in use (a consumer came between the
// sweeps' reads) is bound back.
func TestReaperBindsBackAQueueTheDeleteFindsInUse(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.reaper.Note("gpu")
	b.broker.setDepth("gpu", broker.QueueDepth{})
	require.Equal(t, []string{"unbind gpu"}, b.sweep(t, time.Minute))
	b.broker.mu.Lock()
	b.broker.busyAtDelete = true
	b.broker.mu.Unlock()
	require.Equal(t, []string{"delete gpu", "declare gpu"}, b.sweep(t, 15*time.Second))
	_, exists := b.broker.depth["gpu"]
	require.True(t, exists, "not deleted")
	require.Equal(t, []string{"gpu", "gpu"}, b.broker.forgotten, "the relay declares it again before its next publish")
}

// A queue the local relay declared again after the unbind (its publish
// was returned) is bound: the reaper unbinds it again before deleting it.
func TestReaperUnbindsAgainAQueueTheRelayDeclared(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.reaper.Note("gpu")
	b.broker.setDepth("gpu", broker.QueueDepth{})
	require.Equal(t, []string{"unbind gpu"}, b.sweep(t, time.Minute))
	b.now = b.now.Add(time.Second)
	b.reaper.Note("gpu") // the relay declared it again and published
	require.Empty(t, b.sweep(t, 14*time.Second), "in use 14s ago")
	require.Equal(t, []string{"unbind gpu"}, b.sweep(t, 46*time.Second), "idle again: unbound again, not deleted at once")
	require.Equal(t, []string{"delete gpu"}, b.sweep(t, 15*time.Second))
}

// Idle 0 never deletes, and still reads the queues for Observe.
func TestReaperWithoutIdleOnlyObserves(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.broker.setOpen("gpu", protocol.DefaultQueue)
	b.broker.setDepth("gpu", broker.QueueDepth{Ready: 3})
	b.broker.setDepth(protocol.DefaultQueue, broker.QueueDepth{Consumers: 2})
	require.Empty(t, b.sweep(t, 0))
	require.Equal(t, broker.QueueDepth{Consumers: 2}, b.seen[protocol.DefaultQueue], "the default queue is read while open")
	b.broker.setOpen()
	require.Empty(t, b.sweep(t, 1000*time.Hour))
	require.Equal(t, broker.QueueDepth{Ready: 3}, b.seen["gpu"])
}

// A queue that does not exist (never declared, or deleted by another
// server) is forgotten once no open job names it.
func TestReaperForgetsAQueueThatDoesNotExist(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.reaper.Note("gone")
	require.Empty(t, b.sweep(t, 0))
	b.broker.setDepth("gone", broker.QueueDepth{})
	require.Empty(t, b.sweep(t, time.Hour), "forgotten at the first sweep: never unbound")
}
