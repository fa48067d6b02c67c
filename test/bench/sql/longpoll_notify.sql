-- 9. long-poll benchmark, LISTEN/NOTIFY contender: the latency producer's
-- event plus a NOTIFY in the same transaction (-D stream=<name>).
\set k random(1, 1000000)
\set a random(1, 10000)
BEGIN;
SELECT streamguard.append(:stream, jsonb_build_object('id', nextval('bench_lat_id'), 'amount', CAST(:a AS int), 'currency', 'EUR'), 'k' || CAST(:k AS text));
NOTIFY lp_bench;
END;
