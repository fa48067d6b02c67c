-- 2. batched appends, COPY contender: the rows of one 1,000-row COPY block
-- (the rows of append_batch_raw.sql, partition computed up front).  Run by psql
-- when the blocks are made, not timed.
COPY (SELECT mod(abs(hashtext(k)::bigint), 4), k, p FROM (SELECT 'k' || (1 + floor(random() * 1000000))::int AS k,
         jsonb_build_object('id', g, 'amount', (1 + floor(random() * 10000))::int, 'currency', 'EUR') AS p
    FROM generate_series(1, 1000) AS g) AS s) TO STDOUT;
