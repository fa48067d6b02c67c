-- 3. drain, raw bound: read the next 1,000 events after the consumer's
-- position and save the new position, one statement (-D consumer=<name>).
WITH b AS (SELECT e.* FROM raw_events e
            WHERE e.seq > (SELECT seq FROM raw_drain_pos WHERE consumer = :consumer)
            ORDER BY e.seq LIMIT 1000),
     u AS (UPDATE raw_drain_pos SET seq = m.s FROM (SELECT max(seq) AS s FROM b) AS m
            WHERE consumer = :consumer AND m.s IS NOT NULL)
SELECT count(*) FROM b;
