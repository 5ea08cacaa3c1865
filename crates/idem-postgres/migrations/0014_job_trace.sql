-- 0014_job_trace: the producer's trace context (a W3C traceparent), kept with the job so
-- each attempt's span can link to the span that enqueued it. NULL when the producer had
-- none (no OpenTelemetry context, or the `otel` feature off).
ALTER TABLE idem_job ADD COLUMN trace_parent TEXT;
