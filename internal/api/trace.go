package api

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/spans"
)

// tracedRoutes are the routes whose requests get a server span: those
// that start a job's trace. Reads, probes and scrapes are not traced.
var tracedRoutes = map[string]bool{"POST /v1/jobs": true}

// traced wraps h, the handler of route pattern, in a server span named
// after the route, which continues the W3C trace context of the request's
// traceparent and tracestate headers when it has one (a malformed one is
// ignored) and starts a trace otherwise.
func (s *server) traced(pattern string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := spans.FromHeaders(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
		if !span.IsRecording() {
			h.ServeHTTP(w, r)
			return
		}
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", methodPath(pattern)),
			attribute.String("url.path", r.URL.Path), attribute.String("user_agent.original", r.UserAgent()))
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
		if rec.status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(rec.status))
		}
	})
}

// methodPath is the path of a "METHOD /path" pattern.
func methodPath(pattern string) string {
	_, path, _ := strings.Cut(pattern, " ")
	return path
}

// statusRecorder remembers the status a handler answered with. Unwrap
// keeps http.ResponseController working through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
