package worker

import (
	"slices"
	"time"
)

// Handler returns the handler registered for taskType, the one the
// worker runs for tasks of that type: h when it was registered with
// Handle, batch when with HandleBatch, the other one nil. ok is false,
// and both are nil, when taskType has no handler; the worker then
// dead-letters its tasks with protocol.ReasonUnknownType. It lets tests
// run the handlers a program really registers (see worker/workertest).
func (w *Worker) Handler(taskType string) (h HandlerFunc, batch BatchHandlerFunc, ok bool) {
	hs, ok := w.handler(taskType)
	return hs.one, hs.batch, ok
}

// RetryTiers returns the delays of w's retry tiers, Config.RetryTiers or
// by default protocol.DefaultRetryTiers: a failed run's nth retry waits
// the nth, every retry past the last waits the last. The slice is a
// copy.
func (w *Worker) RetryTiers() []time.Duration {
	return slices.Clone(w.cfg.RetryTiers)
}

// MaxResultBytes returns the largest result, in bytes of JSON, that w
// publishes for one task (Config.MaxResultBytes): a larger one fails the
// task with protocol.ReasonResultTooLarge.
func (w *Worker) MaxResultBytes() int { return w.cfg.MaxResultBytes }
