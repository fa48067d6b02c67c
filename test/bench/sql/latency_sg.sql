-- 4. latency producer, streamguard: one event with a unique id per
-- transaction into the stream -D stream=<name>.
\set k random(1, 1000000)
\set a random(1, 10000)
SELECT streamguard.append(:stream, jsonb_build_object('id', nextval('bench_lat_id'), 'amount', CAST(:a AS int), 'currency', 'EUR'), 'k' || CAST(:k AS text));
