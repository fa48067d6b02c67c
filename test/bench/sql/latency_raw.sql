-- 4. latency producer, naive poller: one event with a unique id per
-- transaction into the plain table lat_raw.
\set k random(1, 1000000)
\set a random(1, 10000)
INSERT INTO lat_raw (key, payload) VALUES ('k' || CAST(:k AS text), jsonb_build_object('id', nextval('bench_lat_id'), 'amount', CAST(:a AS int), 'currency', 'EUR'));
