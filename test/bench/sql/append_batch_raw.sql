-- 2. batched appends (and the raw pre-fill of the drain), raw PostgreSQL
-- baseline: 1,000 events in one INSERT ... SELECT into raw_events, 4 partitions.
INSERT INTO raw_events (partition, key, payload)
  SELECT mod(abs(hashtext(k)::bigint), 4), k, p FROM (SELECT 'k' || (1 + floor(random() * 1000000))::int AS k,
         jsonb_build_object('id', g, 'amount', (1 + floor(random() * 10000))::int, 'currency', 'EUR') AS p
    FROM generate_series(1, 1000) AS g) AS s;
