-- 4. latency producer, PgQ: one event with a unique id per transaction into
-- the queue -D queue=<name>.
\set k random(1, 1000000)
\set a random(1, 10000)
SELECT pgq.insert_event(:queue, 'lat', (jsonb_build_object('id', nextval('bench_lat_id'), 'amount', CAST(:a AS int), 'currency', 'EUR'))::text, 'k' || CAST(:k AS text), NULL, NULL, NULL);
