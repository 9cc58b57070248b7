package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/warrenhq/warren/internal/tracing"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnabled(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		vars map[string]string
		on   bool
		err  string
	}{
		"nothing set":          {vars: nil},
		"an endpoint":          {vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		"a traces endpoint":    {vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		"the otlp exporter":    {vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		"no exporter":          {vars: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		"the SDK disabled":     {vars: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		"the SDK not disabled": {vars: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		"http/protobuf":        {vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		"another exporter":     {vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		"grpc":                 {vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		"grpc for traces":      {vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		"grpc while disabled":  {vars: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
	} {
		on, err := tracing.Enabled(env(c.vars))
		if c.err != "" {
			require.ErrorContains(t, err, c.err, name)
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, c.on, on, name)
	}
}

// Off, Setup installs nothing: the global no-op provider.
func TestSetupOff(t *testing.T) {
	t.Parallel()
	tp, shutdown, err := tracing.Setup(context.Background(), env(nil), "warren-test", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, otel.GetTracerProvider(), tp)
	require.NoError(t, shutdown(context.Background()))
}

// On, spans go to the OTLP/HTTP endpoint of the OTEL_* variables, with the
// default service name, and the shutdown flushes them.
func TestSetupExportsToTheEndpoint(t *testing.T) {
	bodies := make(chan []byte, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil && r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			bodies <- body
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	// The exporter reads the real environment, hence no t.Parallel.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}
	tp, shutdown, err := tracing.Setup(context.Background(), env(vars), "warren-test", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, tp, otel.GetTracerProvider(), "installed as the global provider, for handlers' own spans")
	_, span := tp.Tracer("test").Start(context.Background(), "a-test-span")
	span.End()
	require.NoError(t, shutdown(context.Background()))

	select {
	case body := <-bodies:
		require.True(t, bytes.Contains(body, []byte("a-test-span")), "the span is exported")
		require.True(t, bytes.Contains(body, []byte("warren-test")), "with the default service name")
	default:
		t.Fatal("the shutdown returned without sending the span")
	}
}
