\set n :rows
INSERT INTO a_inbox (message_id, consumer_group, dedupe_key, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at)
 SELECT id, 'g', md5(id)::uuid, 'host-1234-abcd', 'sha256:0123456789abcdef0123456789abcdef', 'orders', 1, i, now() - interval '50 minutes' + i * interval '100 microseconds'
 FROM (SELECT gen_random_uuid()::text id, i FROM generate_series(1, :n) i) s;
INSERT INTO b_inbox SELECT * FROM a_inbox;
INSERT INTO b_ids SELECT dedupe_key, record_at FROM a_inbox;
CREATE UNIQUE INDEX ON a_inbox (dedupe_key);
CREATE UNIQUE INDEX ON b_inbox (record_at, dedupe_key);
CREATE UNIQUE INDEX ON b_ids (dedupe_key);
VACUUM ANALYZE a_inbox; VACUUM ANALYZE b_inbox; VACUUM ANALYZE b_ids;
