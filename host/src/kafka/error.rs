/// A Kafka client error, without exposing the client library's types.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct KafkaError(#[from] rdkafka::error::KafkaError);

pub type KafkaResult<T> = Result<T, KafkaError>;
