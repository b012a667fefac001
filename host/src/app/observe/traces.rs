//! OpenTelemetry spans, one per attempt at a record, exported over OTLP/HTTP
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set. A W3C `traceparent` header on the record makes the span a child of
//! the producer's trace. Without an endpoint nothing is built and the consume
//! path does no tracing work at all.
//!
//! Attributes follow OpenTelemetry's messaging conventions
//! (<https://opentelemetry.io/docs/specs/semconv/messaging/kafka/>).

use std::time::SystemTime;

use anyhow::Context as _;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span, SpanKind, Status, Tracer, TracerProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::inbox::{Header, Message, Outcome};

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOLS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// The span exporter, and what every span of this host carries.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    group: String,
}

/// When and with which handler version a record's attempt started.
pub struct Attempt<'a> {
    pub started: SystemTime,
    pub plugin: &'a str,
}

impl Traces {
    /// The exporter the standard `OTEL_*` variables describe, or `None` when
    /// no endpoint is set. Only OTLP over HTTP is built in (`http/protobuf`,
    /// the default, or `http/json`); asking for gRPC is an error saying so.
    pub fn from_env(group: &str) -> anyhow::Result<Option<Self>> {
        let set = |name| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        let disabled =
            std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        if disabled || (!set(ENDPOINT) && !set(TRACES_ENDPOINT)) {
            return Ok(None);
        }
        // Protobuf unless asked otherwise (with JSON built in too, the
        // exporter's own default would be JSON).
        let protocol = match PROTOCOLS
            .iter()
            .find_map(|name| Some((name, std::env::var(name).ok()?)))
        {
            None => Protocol::HttpBinary,
            Some((_, protocol)) if protocol == "http/protobuf" => Protocol::HttpBinary,
            Some((_, protocol)) if protocol == "http/json" => Protocol::HttpJson,
            Some((name, protocol)) => anyhow::bail!(
                "{name}={protocol}: inbox-host exports traces over OTLP/HTTP only; \
                 set it to http/protobuf (or http/json) and point {ENDPOINT} at the \
                 collector's HTTP port (usually 4318)"
            ),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .context("building the OTLP span exporter from OTEL_EXPORTER_OTLP_*")?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        let tracer = provider.tracer("inbox-host");
        Ok(Some(Self {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
            group: group.to_string(),
        }))
    }

    /// Ends the span of one attempt at `message`, now, with what became of it.
    pub fn attempt(&self, message: &Message, attempt: &Attempt<'_>, outcome: &Outcome) {
        let parent = self.propagator.extract(&HeaderExtractor(&message.headers));
        let mut attributes = vec![
            KeyValue::new("messaging.system", "kafka"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.destination.name", message.topic.clone()),
            KeyValue::new(
                "messaging.destination.partition.id",
                message.partition.to_string(),
            ),
            KeyValue::new("messaging.kafka.offset", message.offset),
            KeyValue::new("messaging.consumer.group.name", self.group.clone()),
        ];
        if !attempt.plugin.is_empty() {
            attributes.push(KeyValue::new(
                "inbox_host.plugin.digest",
                attempt.plugin.to_string(),
            ));
        }
        if !message.message_id.is_empty() {
            attributes.push(KeyValue::new(
                "messaging.message.id",
                message.message_id.clone(),
            ));
        }
        let error = match outcome {
            Outcome::Failed(e) => Some((e.kind.as_str(), e.to_string())),
            Outcome::SetAside(why) => Some(("set_aside", why.clone())),
            _ => None,
        };
        attributes.push(KeyValue::new("inbox_host.outcome", outcome.label()));
        if let Some((kind, _)) = &error {
            attributes.push(KeyValue::new("error.type", *kind));
        }
        let mut span = self
            .tracer
            .span_builder(format!("process {}", message.topic))
            .with_kind(SpanKind::Consumer)
            .with_start_time(attempt.started)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        if let Some((_, description)) = error {
            span.set_status(Status::error(description));
        }
        span.end();
    }

    /// Exports what is still buffered (waits for the collector, at most its timeout).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "could not export the last spans");
        }
    }
}

/// `service.name` is `inbox-host` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name("inbox-host").build()
    }
}

/// Reads trace context from a record's headers (UTF-8 values only; a header
/// the propagator cannot read leaves the span a root, never fails the record).
struct HeaderExtractor<'a>(&'a [Header]);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(key))
            .and_then(|h| std::str::from_utf8(h.value.as_deref()?).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|h| h.key.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt;

    use super::*;

    fn header(key: &str, value: &[u8]) -> Header {
        Header {
            key: key.into(),
            value: Some(value.to_vec()),
        }
    }

    #[test]
    fn a_traceparent_header_becomes_the_remote_parent_and_a_bad_one_is_ignored() {
        let propagator = TraceContextPropagator::new();
        let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let good = [
            header("message_id", b"m-1"),
            header(
                "traceparent",
                format!("00-{trace_id}-00f067aa0ba902b7-01").as_bytes(),
            ),
        ];
        let cx = propagator.extract(&HeaderExtractor(&good));
        let span = cx.span();
        let parent = span.span_context();
        assert!(parent.is_remote() && parent.is_sampled());
        assert_eq!(parent.trace_id().to_string(), trace_id);

        for bad in [&b"garbage"[..], b"00-zz-00f067aa0ba902b7-01", b"\xff\x00"] {
            let cx = propagator.extract(&HeaderExtractor(&[header("traceparent", bad)]));
            assert!(!cx.span().span_context().is_valid(), "{bad:?}");
        }
    }
}
