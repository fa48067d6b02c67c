-- 3. drain, PgQ pre-fill: the 1,000 events of append_batch_pgq.sql, then a
-- tick, so that every PgQ batch holds 1,000 events (-D queue=<name>).
SELECT count(pgq.insert_event(:queue, 'bench', p::text, k, NULL, NULL, NULL)) FROM (SELECT 'k' || (1 + floor(random() * 1000000))::int AS k,
         jsonb_build_object('id', g, 'amount', (1 + floor(random() * 10000))::int, 'currency', 'EUR') AS p
    FROM generate_series(1, 1000) AS g) AS s;
SELECT pgq.ticker(:queue);
