package worker

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// OnControlConsumer makes w report its control queue and that queue's
// channel each time Run starts consuming it, so that tests know when
// cancels are heard and can break the consumer.
func OnControlConsumer(w *Worker, f func(queue string, ch *amqp.Channel)) { w.testHookControl = f }

// SetReconnectBackoff replaces w's reconnect backoff with f, so that
// tests can hold a worker between a loss and its reconnect.
func SetReconnectBackoff(w *Worker, f func(attempt int) time.Duration) { w.testHookBackoff = f }

// OnResults makes w report each result message it publishes for single
// task messages, once confirmed or failed: how many tasks it answers and
// the publish's error.
func OnResults(w *Worker, f func(tasks int, err error)) { w.testHookResults = f }

// Prefetch is the prefetch w consumes its work queue with.
func Prefetch(w *Worker) int { return w.cfg.Prefetch }

// SetOutcomesTimeout sets how long w waits for each reply of the
// outcomes RPC, so that tests of a missing reply need not wait a minute.
func SetOutcomesTimeout(w *Worker, d time.Duration) { w.outcomesTimeout = d }
