-- Failed attempts per record, written in their own transaction (the message's own
-- transaction rolled back), so `--max-attempts` survives restarts and operators
-- can see what keeps failing.
CREATE TABLE inbox_host.attempts (
    consumer_group  text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    message_id      text,
    attempts        integer     NOT NULL,
    last_error      text        NOT NULL,
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, kafka_partition, kafka_offset)
);
