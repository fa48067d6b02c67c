-- queue benchmark producer, streamguard: one event per transaction into the
-- stream -D stream=<name>, spread over its partitions by a random key
\set k random(1, 1000000)
SELECT streamguard.append(:stream, jsonb_build_object('id', nextval('q_ids'), 't', q_now_us()), 'k' || CAST(:k AS text));
