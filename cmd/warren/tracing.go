package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/tracing"
)

// tracingFlushTimeout bounds how long a stopping command waits for its
// last spans to reach the collector.
const tracingFlushTimeout = 5 * time.Second

// startTracing installs tracing as the OTEL_* variables ask
// (docs/operations.md, "Tracing"), for the service named service unless
// OTEL_SERVICE_NAME names another, and returns the tracer provider to give
// the server or worker and the function that flushes its spans at the end.
func startTracing(ctx context.Context, env *environment, service string) (trace.TracerProvider, func(), error) {
	tp, shutdown, err := tracing.Setup(ctx, env.getenv, service, env.logger)
	if err != nil {
		return nil, nil, err
	}
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			env.logger.Warn("tracing: flushing the last spans failed", "error", err)
		}
	}, nil
}
