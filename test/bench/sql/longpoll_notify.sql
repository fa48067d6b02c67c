-- 9. long-poll benchmark, LISTEN/NOTIFY contender: the producer of
-- longpoll_sg.sql plus a NOTIFY in the append's transaction
-- (-D stream=<name> -D n=0).
\set n :n + 1
\set k random(1, 1000000)
\set a random(1, 10000)
BEGIN;
SELECT streamguard.append(:stream, jsonb_build_object('id', CAST(:client_id AS bigint) * 1000000000 + :n, 'amount', CAST(:a AS int), 'currency', 'EUR'), 'k' || CAST(:k AS text));
NOTIFY lp_bench;
END;
