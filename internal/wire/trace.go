package wire

import (
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/protocol"
)

// Trace is the W3C trace context a delivery's headers carry (traceparent
// and tracestate, docs/protocol.md): the span that published it, as a
// remote span context. It is invalid when the headers carry none, or
// carry something that is not valid trace context: such a message is
// processed outside any trace, never refused.
func Trace(d amqp.Delivery) trace.SpanContext {
	return spans.Extract(headerCarrier(d.Headers))
}

// SetTrace puts the trace context of sc in msg's headers, in place of any
// it had, so that the message's consumer continues sc's trace. An invalid
// sc leaves the headers as they are.
func SetTrace(msg *amqp.Publishing, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	if msg.Headers == nil {
		msg.Headers = amqp.Table{}
	}
	delete(msg.Headers, protocol.HeaderTraceState)
	spans.Inject(sc, headerCarrier(msg.Headers))
}

// headerCarrier adapts AMQP headers to OpenTelemetry's TextMapCarrier:
// string headers only.
type headerCarrier amqp.Table

func (c headerCarrier) Get(key string) string { return headerString(amqp.Table(c), key) }

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
