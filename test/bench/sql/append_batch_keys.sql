-- 8. windows: 1,000 events in one append_batch to the stream -D stream=<name>,
-- keyed over -D keys=<n> keys (per-key aggregation needs repeating keys).
SELECT count(*) FROM (SELECT array_agg(p) AS ps, array_agg(k) AS ks FROM (SELECT 'k' || (1 + floor(random() * :keys))::int AS k,
         jsonb_build_object('id', g, 'amount', (1 + floor(random() * 10000))::int, 'currency', 'EUR') AS p
    FROM generate_series(1, 1000) AS g) AS s) AS a,
  LATERAL streamguard.append_batch(:stream, a.ps, a.ks);
