-- The host's own schema. Guests never get rights here (see docs/security.md).
CREATE SCHEMA IF NOT EXISTS inbox_host;

-- One row per message handled under the exactly-once-inbox strategy. The row is
-- inserted in the same transaction as the handler's effects, so it exists exactly
-- when those effects were committed.
CREATE TABLE inbox_host.inbox (
    message_id     text        NOT NULL,
    consumer_group text        NOT NULL,
    status         text        NOT NULL DEFAULT 'processed' CHECK (status IN ('processed')),
    worker_id      text        NOT NULL,
    plugin_digest  text        NOT NULL,
    topic          text        NOT NULL,
    kafka_partition integer    NOT NULL,
    kafka_offset   bigint      NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, consumer_group)
);

-- Messages the host set aside instead of handling: no usable id, too large, or a
-- handler that failed more than the configured attempt budget. The original record
-- (key, headers, payload) is kept so it can be replayed.
CREATE TABLE inbox_host.dead_letters (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    kafka_partition integer    NOT NULL,
    kafka_offset   bigint      NOT NULL,
    message_id     text,
    reason         text        NOT NULL,
    record_key     bytea,
    headers        jsonb       NOT NULL,
    payload        bytea,
    worker_id      text        NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (consumer_group, topic, kafka_partition, kafka_offset)
);
