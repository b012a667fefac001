-- Messages to publish to Kafka, written in the same transaction as the effects
-- that caused them (by a handler through the `outbox` interface, or by an
-- application) and sent by the relay after that transaction committed. A row is
-- deleted only after the broker acknowledged its message. docs/outbox.md is the
-- contract for applications that insert rows themselves.
CREATE TABLE inbox_host.outbox (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic          text        NOT NULL,
    message_key    bytea,
    -- NULL publishes a tombstone.
    payload        bytea,
    -- Headers as an array of [name, value] pairs, value a string or null; the
    -- message_id column, not a pair, names the message.
    headers        jsonb       NOT NULL DEFAULT '[]'
        CONSTRAINT outbox_headers_are_name_value_pairs CHECK (
            jsonb_typeof(headers) = 'array'
            AND NOT jsonb_path_exists(headers, 'strict $[*] ? (!(@.type() == "array" && @.size() == 2
                && @[0].type() == "string" && @[0] != "message_id"
                && (@[1].type() == "string" || @[1].type() == "null")))')
        ),
    -- Sent as the `message_id` header: how a downstream inbox recognises a copy.
    message_id     text        NOT NULL DEFAULT gen_random_uuid()::text,
    -- The group whose handler published it; NULL for a row an application wrote.
    consumer_group text,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Wakes the relay (LISTEN inbox_host_outbox) when the inserting transaction
-- commits; once per statement, and PostgreSQL folds equal notifications of one
-- transaction into one. Not for the host's own inserts: a NOTIFY takes a
-- database-wide lock from its transaction's commit until the commit is flushed,
-- which would serialise the commits of every partition worker; the host wakes
-- the relay itself after the commit (host/src/app/relay.rs).
CREATE FUNCTION inbox_host.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inbox_host_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON inbox_host.outbox
    FOR EACH STATEMENT
    WHEN (pg_catalog.current_setting('inbox_host.wakes_relay_itself', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION inbox_host.outbox_notify();
