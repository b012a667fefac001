WITH m AS (SELECT id, md5(id)::uuid k, clock_timestamp() at FROM (SELECT gen_random_uuid()::text id FROM generate_series(1,100)) s),
ids AS (INSERT INTO b_ids SELECT k, at FROM m ON CONFLICT DO NOTHING RETURNING dedupe_key)
INSERT INTO b_inbox (message_id, consumer_group, dedupe_key, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at)
SELECT id, 'g', k, 'host-1234-abcd', 'sha256:0123456789abcdef0123456789abcdef', 'orders', 1, 1, at FROM m WHERE k IN (SELECT dedupe_key FROM ids) ON CONFLICT DO NOTHING;
