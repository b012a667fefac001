-- HTTP requests a handler asked for, written in the same transaction as its
-- effects and the inbox row, and sent by the host after that transaction
-- committed (docs/effects.md). A row is deleted only once its request is done:
-- answered with a final status (its reply, if any, staged in the outbox in the
-- same transaction as the delete), or set aside as a dead letter.
CREATE TABLE inbox_host.requests (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group   text        NOT NULL,
    -- Sent as `Idempotency-Key`: derived from the group, the incoming message
    -- id and the call's position, the same on every resend.
    idempotency_key  text        NOT NULL,
    method           text        NOT NULL,
    url              text        NOT NULL,
    -- [name, value] pairs, values strings (a secret is named, never stored).
    headers          jsonb       NOT NULL DEFAULT '[]',
    body             bytea       NOT NULL,
    -- Requests of one (group, ordering key) are sent one after another, in id order.
    ordering_key     text,
    reply_topic      text,
    -- The record whose run asked for it.
    caused_by        text        NOT NULL,
    topic            text        NOT NULL,
    kafka_partition  integer     NOT NULL,
    kafka_offset     bigint      NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    -- When a sender may take it next (a taken row is leased until then).
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX requests_due ON inbox_host.requests (consumer_group, next_attempt_at);
CREATE INDEX requests_in_order ON inbox_host.requests (consumer_group, ordering_key, id)
    WHERE ordering_key IS NOT NULL;

-- A dead letter is a record set aside (the default) or a request that failed for good.
ALTER TABLE inbox_host.dead_letters
    ADD COLUMN letter_kind text NOT NULL DEFAULT 'record'
        CHECK (letter_kind IN ('record', 'request')),
    ADD COLUMN request jsonb;
DO $$
DECLARE
    one_per_record text;
BEGIN
    SELECT conname INTO one_per_record FROM pg_constraint
    WHERE conrelid = 'inbox_host.dead_letters'::regclass AND contype = 'u';
    EXECUTE format('ALTER TABLE inbox_host.dead_letters DROP CONSTRAINT %I', one_per_record);
END
$$;
CREATE UNIQUE INDEX dead_letters_one_per_record
    ON inbox_host.dead_letters (consumer_group, topic, kafka_partition, kafka_offset)
    WHERE letter_kind = 'record';
