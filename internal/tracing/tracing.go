// Package tracing installs OpenTelemetry tracing in the warren command
// from the standard OTEL_* environment variables: an SDK tracer provider
// that sends spans in batches to an OTLP collector over HTTP. It is the
// one package that links the SDK and the exporter; the server and worker
// packages use only the API (server.Config.TracerProvider,
// worker.Config.TracerProvider), so that a program embedding them chooses
// its own.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the environment (getenv) asks for traces:
// OTEL_SDK_DISABLED is not "true", and OTEL_TRACES_EXPORTER is "otlp", or
// it is unset and an OTLP endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). The error names a variable whose
// value warren cannot honour.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: warren exports traces with otlp only (or none)", exporter)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := strings.TrimSpace(getenv(name)); p {
		case "", "http/protobuf":
		default:
			return false, fmt.Errorf("%s=%q: warren sends OTLP over HTTP (http/protobuf): unset it, and point the endpoint at the collector's HTTP port (4318)", name, p)
		}
	}
	return true, nil
}

// Setup installs tracing as the environment (getenv) asks (Enabled): an
// SDK tracer provider with a batch span processor and the OTLP/HTTP
// exporter, which reads the OTEL_EXPORTER_OTLP_* variables itself, and a
// resource whose service.name is OTEL_SERVICE_NAME, or service when it is
// unset (OTEL_RESOURCE_ATTRIBUTES adds attributes). It becomes the global
// tracer provider, for handlers' own spans, with the W3C trace context
// and baggage propagators. Errors of the exporter are logged to log.
//
// When the environment asks for no traces it returns
// otel.GetTracerProvider(), whose spans are no-ops. shutdown flushes the
// spans not yet sent; call it once, when the program stops.
func Setup(ctx context.Context, getenv func(string) string, service string, log *slog.Logger) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noShutdown := func(context.Context) error { return nil }
	on, err := Enabled(getenv)
	if err != nil || !on {
		return otel.GetTracerProvider(), noShutdown, err
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noShutdown, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, over the default above
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, noShutdown, fmt.Errorf("tracing: the resource (OTEL_RESOURCE_ATTRIBUTES?): %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", "error", err)
	}))
	log.Info("tracing on: spans go to the OTLP collector the OTEL_EXPORTER_OTLP_* variables name",
		"service", serviceName(res, service))
	return provider, provider.Shutdown, nil
}

// serviceName is res's service.name, else fallback.
func serviceName(res *resource.Resource, fallback string) string {
	if v, ok := res.Set().Value("service.name"); ok {
		return v.AsString()
	}
	return fallback
}
