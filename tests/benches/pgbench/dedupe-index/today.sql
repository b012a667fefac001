INSERT INTO a_inbox (message_id, consumer_group, dedupe_key, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at)
SELECT id, 'g', md5(id)::uuid, 'host-1234-abcd', 'sha256:0123456789abcdef0123456789abcdef', 'orders', 1, 1, clock_timestamp() FROM (SELECT gen_random_uuid()::text id FROM generate_series(1,100)) s ON CONFLICT DO NOTHING;
