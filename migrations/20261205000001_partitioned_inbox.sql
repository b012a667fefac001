-- 0.4: the inbox partitioned by group, then by hour of the record's own Kafka
-- timestamp, so that retention drops whole partitions and the partition being
-- written stays small whatever the inbox holds in total (docs/semantics.md,
-- "The inbox over time", says why this key; docs/sizing.md measures it).
--
-- The 0.3 table is kept, renamed, and read for deduplication until retention
-- empties it: rows written before the upgrade still make their messages
-- duplicates. A 0.3 host's claim fails on the new table (its ON CONFLICT target
-- no longer exists), so a mixed-version group never handles a message twice.
ALTER TABLE inbox_host.inbox RENAME TO inbox_before_0_4;
ALTER INDEX inbox_host.inbox_pkey RENAME TO inbox_before_0_4_pkey;

-- The 16-byte key a message is deduplicated by within its group's partition:
-- a spread of (group, message id), not a secret (whoever can write to a topic
-- can repeat an id anyway). Operators look rows up with it:
--   WHERE consumer_group = 'billing' AND dedupe_key = inbox_host.message_key('billing', 'id')
CREATE FUNCTION inbox_host.message_key(consumer_group text, message_id text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN md5(length(consumer_group)::text || ':' || consumer_group || message_id)::uuid;

CREATE TABLE inbox_host.inbox (
    message_id      text        NOT NULL,
    consumer_group  text        NOT NULL,
    dedupe_key      uuid        NOT NULL
        GENERATED ALWAYS AS (inbox_host.message_key(consumer_group, message_id)) STORED,
    status          text        NOT NULL DEFAULT 'processed' CHECK (status IN ('processed')),
    worker_id       text        NOT NULL,
    plugin_digest   text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    -- The record's Kafka timestamp: the same on every delivery of the record,
    -- so every claim of it meets the same partition's unique index. NULL (a
    -- record without one) and times outside the prepared hours land in the
    -- group's `_other` partition.
    record_at       timestamptz,
    received_at     timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (consumer_group);

-- The partitions the host made, for retention and for operators.
CREATE TABLE inbox_host.inbox_partitions (
    consumer_group text        NOT NULL,
    -- NULL bounds: the group's own partition (both) or its `_other` one.
    from_at        timestamptz,
    to_at          timestamptz,
    name           text        NOT NULL PRIMARY KEY,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_partitions_by_group ON inbox_host.inbox_partitions (consumer_group, to_at);

-- Makes sure `consumer_group` has its partitions for every hour that starts in
-- [from_at, to_at); returns how many it created. Hours are UTC. A partition
-- is created detached and attached (a lock that lets claims go on), after
-- moving in any rows its hour already put in the `_other` partition.
-- SECURITY DEFINER: a runtime login without DDL rights only needs EXECUTE.
CREATE FUNCTION inbox_host.inbox_prepare(grp text, from_at timestamptz, to_at timestamptz)
    RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '10s'
AS $$
DECLARE
    tag    text := 'inbox_' || left(md5(grp), 12);
    other  text := tag || '_other';
    hour   timestamptz;
    leaf   text;
    made   integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('inbox_host.inbox_prepare:' || grp, 0));
    IF NOT EXISTS (SELECT 1 FROM inbox_host.inbox_partitions p WHERE p.name = tag) THEN
        EXECUTE format('CREATE TABLE inbox_host.%I (LIKE inbox_host.inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED) PARTITION BY RANGE (record_at)', tag);
        EXECUTE format('CREATE TABLE inbox_host.%I PARTITION OF inbox_host.%I DEFAULT', other, tag);
        EXECUTE format('CREATE UNIQUE INDEX ON inbox_host.%I (dedupe_key)', other);
        EXECUTE format('ALTER TABLE inbox_host.inbox ATTACH PARTITION inbox_host.%I FOR VALUES IN (%L)', tag, grp);
        EXECUTE format('COMMENT ON TABLE inbox_host.%I IS %L', tag, 'inbox rows of consumer group ' || grp);
        INSERT INTO inbox_host.inbox_partitions (consumer_group, name) VALUES (grp, tag), (grp, other);
    END IF;
    hour := date_trunc('hour', from_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    WHILE hour < to_at LOOP
        leaf := tag || '_' || to_char(hour AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24');
        IF NOT EXISTS (SELECT 1 FROM inbox_host.inbox_partitions p WHERE p.name = leaf) THEN
            EXECUTE format('CREATE TABLE inbox_host.%I (LIKE inbox_host.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)', leaf, tag);
            EXECUTE format('ALTER TABLE inbox_host.%I ADD CHECK (record_at IS NOT NULL AND record_at >= %L AND record_at < %L)', leaf, hour, hour + interval '1 hour');
            EXECUTE format('WITH moved AS (DELETE FROM inbox_host.%I WHERE record_at >= %L AND record_at < %L RETURNING *)
                            INSERT INTO inbox_host.%I (message_id, consumer_group, status, worker_id, plugin_digest, topic,
                                                       kafka_partition, kafka_offset, record_at, received_at)
                            SELECT message_id, consumer_group, status, worker_id, plugin_digest, topic,
                                   kafka_partition, kafka_offset, record_at, received_at FROM moved',
                           other, hour, hour + interval '1 hour', leaf);
            EXECUTE format('CREATE UNIQUE INDEX ON inbox_host.%I (dedupe_key)', leaf);
            EXECUTE format('ALTER TABLE inbox_host.%I ATTACH PARTITION inbox_host.%I FOR VALUES FROM (%L) TO (%L)',
                           tag, leaf, hour, hour + interval '1 hour');
            INSERT INTO inbox_host.inbox_partitions (consumer_group, from_at, to_at, name)
                VALUES (grp, hour, hour + interval '1 hour', leaf);
            made := made + 1;
        END IF;
        hour := hour + interval '1 hour';
    END LOOP;
    RETURN made;
END $$;

-- Retention: drops the group's hourly partitions that end at or before
-- `before` (whole tables: no DELETE, no bloat) and deletes the `_other` and
-- rows claimed before it; returns the partitions dropped. Dropping a partition
-- takes its group's table for a moment (claims wait for it): the lock timeout
-- makes a drop that cannot get it give up and be tried again, never queue long.
CREATE FUNCTION inbox_host.inbox_drop_before(grp text, before timestamptz)
    RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '2s'
AS $$
DECLARE
    old     record;
    dropped integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('inbox_host.inbox_prepare:' || grp, 0));
    FOR old IN SELECT p.name FROM inbox_host.inbox_partitions p
               WHERE p.consumer_group = grp AND p.to_at <= before ORDER BY p.to_at LOOP
        EXECUTE format('DROP TABLE IF EXISTS inbox_host.%I', old.name);
        DELETE FROM inbox_host.inbox_partitions p WHERE p.name = old.name;
        dropped := dropped + 1;
    END LOOP;
    IF EXISTS (SELECT 1 FROM inbox_host.inbox_partitions p WHERE p.consumer_group = grp) THEN
        EXECUTE format('DELETE FROM inbox_host.%I WHERE received_at < %L',
                       'inbox_' || left(md5(grp), 12) || '_other', before);
    END IF;
    RETURN dropped;
END $$;

REVOKE ALL ON FUNCTION inbox_host.inbox_prepare(text, timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_host.inbox_drop_before(text, timestamptz) FROM PUBLIC;

-- Attempts of records that are long gone (left by crashes) are pruned by age;
-- this index serves that and the operators' "what keeps failing" by time.
CREATE INDEX attempts_last_failed_at ON inbox_host.attempts (last_failed_at);
