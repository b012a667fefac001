//! A record whose header key is not UTF-8, as a producer in another language
//! can write one. rdkafka's API takes header keys as `&str`, so this goes
//! through librdkafka's C API: the only `unsafe` of the project, in a test helper.

use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

/// Produces one record to `topic`/`partition` with `headers` (keys any bytes);
/// returns its offset.
pub async fn produce(
    brokers: &str,
    topic: &str,
    partition: i32,
    headers: &[(&[u8], &[u8])],
    payload: &[u8],
) -> i64 {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    let list = OwnedHeaders::new_with_capacity(headers.len());
    for (key, value) in headers {
        add(&list, key, value);
    }
    let record = FutureRecord::<[u8], [u8]>::to(topic)
        .partition(partition)
        .payload(payload)
        .headers(list);
    let delivered = producer
        .send(record, std::time::Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)
        .expect("delivered");
    delivered.offset
}

#[allow(unsafe_code)]
fn add(list: &OwnedHeaders, key: &[u8], value: &[u8]) {
    // SAFETY: rdkafka's `BorrowedHeaders` is a reference to the native header
    // list itself (that is how `as_borrowed` is built); librdkafka copies the key
    // (`key.len()` bytes, no terminator needed) and the value.
    let added = unsafe {
        let native = std::ptr::from_ref(list.as_borrowed())
            .cast::<rdkafka::bindings::rd_kafka_headers_t>()
            .cast_mut();
        rdkafka::bindings::rd_kafka_header_add(
            native,
            key.as_ptr().cast(),
            key.len() as isize,
            value.as_ptr().cast(),
            value.len() as isize,
        )
    };
    assert_eq!(
        added,
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    );
}
