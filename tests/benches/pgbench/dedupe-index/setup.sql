-- The two designs' tables: today's (a_: unique on the random key) and two
-- indexes (b_: unique on (record_at, key), the random key in an UNLOGGED table).
DROP TABLE IF EXISTS a_inbox, b_inbox, b_ids;
CREATE TABLE a_inbox (message_id text NOT NULL, consumer_group text NOT NULL, dedupe_key uuid NOT NULL, status text NOT NULL DEFAULT 'processed', worker_id text NOT NULL, plugin_digest text NOT NULL, topic text NOT NULL, kafka_partition int NOT NULL, kafka_offset bigint NOT NULL, record_at timestamptz, received_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE b_inbox (LIKE a_inbox INCLUDING DEFAULTS);
CREATE UNLOGGED TABLE b_ids (dedupe_key uuid NOT NULL, record_at timestamptz NOT NULL);
