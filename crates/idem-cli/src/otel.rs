//! `--features otel`: the process's spans (each job attempt's `idem.job`, linked to the
//! span that enqueued the job) exported over OTLP, HTTP/protobuf, to the collector that
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! names; `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as usual. Spans at `info`
//! and above, unless `IDEM_OTEL_LOG` filters otherwise (`info,sqlx=debug` adds the
//! statements). Without the feature, or with neither variable set, nothing is exported.
//!
//! What must stay true: the exporter is flushed when the process ends ([`Guard`]), and a
//! collector that cannot be set up never stops the command (a warning, then no export).

#[cfg(feature = "otel")]
use opentelemetry::trace::TracerProvider;
#[cfg(feature = "otel")]
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Flushes and shuts the exporter down when dropped (outside the async runtime).
pub struct Guard {
    #[cfg(feature = "otel")]
    provider: Option<SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: OpenTelemetry spans may be lost: {e}");
        }
    }
}

/// The export layer, when built with `otel` and a collector is configured.
#[cfg(not(feature = "otel"))]
pub fn layer<S>() -> (Option<Box<dyn Layer<S> + Send + Sync>>, Guard)
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    (None, Guard {})
}

/// The export layer, when built with `otel` and a collector is configured.
#[cfg(feature = "otel")]
pub fn layer<S>() -> (Option<Box<dyn Layer<S> + Send + Sync>>, Guard)
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let off = || (None, Guard { provider: None });
    let vars = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ];
    if !vars.iter().any(|v| std::env::var_os(v).is_some()) {
        return off();
    }
    // reqwest is built without a TLS provider of its own (an https collector needs one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export is off: {e}");
            return off();
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    let filter = tracing_subscriber::EnvFilter::try_from_env("IDEM_OTEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("idem"))
        .with_filter(filter);
    let guard = Guard {
        provider: Some(provider),
    };
    (Some(Box::new(layer)), guard)
}
