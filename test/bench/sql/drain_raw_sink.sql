-- 3. drain->sink, raw bound: drain_raw.sql, and the batch goes into sink_raw
-- in the same transaction (-D consumer=<name>).
WITH b AS (SELECT e.* FROM raw_events e
            WHERE e.seq > (SELECT seq FROM raw_drain_pos WHERE consumer = :consumer)
            ORDER BY e.seq LIMIT 1000),
     u AS (UPDATE raw_drain_pos SET seq = m.s FROM (SELECT max(seq) AS s FROM b) AS m
            WHERE consumer = :consumer AND m.s IS NOT NULL),
     i AS (INSERT INTO sink_raw (partition, seq, key, payload) SELECT partition, seq, key, payload FROM b)
SELECT count(*) FROM b;
