-- 1. single-event appends, raw PostgreSQL baseline: a plain INSERT of one
-- event (same columns and keys as a stream event) into raw_events, seq from
-- its bigserial, partition = hash(key) mod 4.
\set k random(1, 1000000)
\set a random(1, 10000)
INSERT INTO raw_events (partition, key, payload)
  VALUES (mod(abs(hashtext('k' || CAST(:k AS text))::bigint), 4), 'k' || CAST(:k AS text), jsonb_build_object('id', CAST(:k AS int), 'amount', CAST(:a AS int), 'currency', 'EUR'));
