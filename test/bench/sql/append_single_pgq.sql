-- 1. single-event appends, PgQ: one event into the queue -D queue=<name>.
\set k random(1, 1000000)
\set a random(1, 10000)
SELECT pgq.insert_event(:queue, 'bench', (jsonb_build_object('id', CAST(:k AS int), 'amount', CAST(:a AS int), 'currency', 'EUR'))::text, 'k' || CAST(:k AS text), NULL, NULL, NULL);
