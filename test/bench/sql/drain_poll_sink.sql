-- 3. drain->sink, streamguard: one poll of up to 1,000 events into sink_sg in
-- the same transaction (-D stream=<name> -D consumer=<name>).
WITH b AS (SELECT * FROM streamguard.poll(:stream, :consumer, 1000)),
     i AS (INSERT INTO sink_sg (partition, seq, key, payload) SELECT partition, seq, key, payload FROM b)
SELECT count(*) FROM b;
