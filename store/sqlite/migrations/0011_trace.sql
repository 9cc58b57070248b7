-- The W3C trace context (traceparent, tracestate) of the span that
-- submitted the job; '' when it was submitted outside any trace.
ALTER TABLE jobs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN trace_state TEXT NOT NULL DEFAULT '';
