//! Trace context from Kafka headers, exported over OTLP to a receiver the test
//! starts, as a collector would see it.

use std::time::Duration;

use inbox_host_tests::otlp::{attribute, OtlpReceiver};
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};

const LONG: Duration = Duration::from_secs(120);
const TRACE_OK: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_BAD: &str = "0af7651916cd43dd8448eb211c80319c";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

fn traced(span: &Span, trace_id: &str) -> bool {
    hex(&span.trace_id) == trace_id
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_with_traceparent_is_handled_in_a_span_of_that_trace_exported_over_otlp() {
    let receiver = OtlpReceiver::start().await;
    let stage = Stage::new(1).await;
    let traceparent = |trace: &str| format!("00-{trace}-{PRODUCER_SPAN}-01").into_bytes();
    let mut ok = stage.order("traced-ok", 10);
    ok.headers
        .push(("traceparent".into(), traceparent(TRACE_OK)));
    let mut bad = stage.record("traced-bad", Some(0), "not json");
    bad.headers
        .push(("traceparent".into(), traceparent(TRACE_BAD)));
    let plain = stage.order("untraced", 20);
    let placed = stage.produce(vec![ok, bad, plain]).await;
    let offset = |n: usize| placed[n].1.to_string();

    let mut host = stage.spawn_host_with_env(
        &plugin("billing"),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    );
    wait_until("the traced record's span at the receiver", LONG, || async {
        receiver.spans().iter().any(|s| traced(s, TRACE_OK))
    })
    .await;
    wait_until("all three records done", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;
    assert!(host.stop(), "{}", host.log());
    // Spans still buffered at exit are exported before the process ends.
    let spans = receiver.spans();

    let ok = spans.iter().find(|s| traced(s, TRACE_OK)).expect("span");
    assert_eq!(
        hex(&ok.parent_span_id),
        PRODUCER_SPAN,
        "child of the producer's span"
    );
    assert_eq!(ok.kind, SpanKind::Consumer as i32);
    assert_eq!(ok.name, format!("process {}", stage.topic));
    let digest = inbox_host::plugin::digest_of(&std::fs::read(plugin("billing")).expect("billing"));
    for (key, value) in [
        ("messaging.system", "kafka"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", stage.topic.as_str()),
        ("messaging.destination.partition.id", "0"),
        ("messaging.kafka.offset", offset(0).as_str()),
        ("messaging.message.id", "traced-ok"),
        ("messaging.consumer.group.name", stage.group.as_str()),
        ("inbox_host.plugin.digest", digest.as_str()),
        ("inbox_host.outcome", "processed"),
    ] {
        assert_eq!(
            attribute(ok, key).as_deref(),
            Some(value),
            "{key} in {ok:?}"
        );
    }
    assert_ne!(
        ok.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );

    // Each attempt at the failing record is a span of its trace, in error;
    // the last one says it was set aside.
    let bad: Vec<&Span> = spans.iter().filter(|s| traced(s, TRACE_BAD)).collect();
    assert_eq!(
        bad.len(),
        3,
        "three attempts (the default for a fatal failure): {bad:?}"
    );
    for span in &bad {
        assert_eq!(
            span.status.as_ref().map(|s| s.code),
            Some(StatusCode::Error as i32)
        );
        assert_eq!(attribute(span, "messaging.kafka.offset"), Some(offset(1)));
    }
    let outcomes: Vec<_> = bad
        .iter()
        .filter_map(|s| attribute(s, "inbox_host.outcome"))
        .collect();
    assert_eq!(outcomes, ["failed", "failed", "set_aside"]);
    assert_eq!(
        attribute(bad[0], "error.type").as_deref(),
        Some("handler-error")
    );

    // Without a traceparent the span starts a trace of its own.
    let plain = spans
        .iter()
        .find(|s| attribute(s, "messaging.message.id").as_deref() == Some("untraced"))
        .expect("a span for the untraced record");
    assert!(plain.parent_span_id.is_empty(), "a root span: {plain:?}");
    assert!(!traced(plain, TRACE_OK) && !traced(plain, TRACE_BAD));
}

#[test]
fn asking_for_otlp_over_grpc_is_refused_before_connecting_with_what_to_set_instead() {
    let out = inbox_host_tests::host::run(
        &[
            "--plugin",
            plugin("billing").to_str().expect("path"),
            "--group",
            "g",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none"),
            ("KAFKA_BROKERS", "127.0.0.1:1"),
            ("INBOX_TOPIC", "orders"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
}
