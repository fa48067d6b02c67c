-- poll / seek / drop_consumer
SET client_min_messages = warning;

SELECT streamguard.create_stream('q', 2);
SELECT count(*) FROM streamguard.append_batch('q',
	(SELECT array_agg(jsonb_build_object('i', g)) FROM generate_series(1, 10) g),
	partitions => (SELECT array_agg(g % 2) FROM generate_series(1, 10) g));

-- max_events bounds a poll; positions advance per partition in seq order
SELECT partition, seq, payload FROM streamguard.poll('q', 'c', 3) ORDER BY partition, seq;
SELECT partition, committed_seq, lag_events FROM streamguard.consumers WHERE consumer = 'c' ORDER BY partition;

-- ROLLBACK redelivers, COMMIT acknowledges
BEGIN;
SELECT count(*) FROM streamguard.poll('q', 'c', 100);
ROLLBACK;
BEGIN;
SELECT count(*) FROM streamguard.poll('q', 'c', 100);
COMMIT;
SELECT count(*) FROM streamguard.poll('q', 'c', 100);
SELECT partition, committed_seq, lag_events FROM streamguard.consumers WHERE consumer = 'c' ORDER BY partition;

-- an independent consumer sees everything
SELECT count(*) FROM streamguard.poll('q', 'other', 100);

-- seek replays from a seq
SELECT streamguard.seek('q', 'c', 1, 3);
SELECT partition, seq FROM streamguard.poll('q', 'c', 100) ORDER BY partition, seq;
SELECT streamguard.seek('q', 'c', 0, 6);
SELECT partition, seq FROM streamguard.poll('q', 'c', 100) ORDER BY partition, seq;
-- seek to the end: nothing to read
SELECT streamguard.seek('q', 'c', 0, 6);
SELECT streamguard.seek('q', 'c', 1, 6);
SELECT count(*) FROM streamguard.poll('q', 'c', 100);

-- seek by time: the beginning, and the future
SELECT streamguard.seek('q', 'c', '-infinity'::timestamptz);
SELECT count(*) FROM streamguard.poll('q', 'c', 100);
SELECT streamguard.seek('q', 'c', now() + interval '1 hour');
SELECT count(*) FROM streamguard.poll('q', 'c', 100);
SELECT * FROM streamguard.append('q', '{"late": 1}', partition => 1);
SELECT partition, seq, payload FROM streamguard.poll('q', 'c', 100);

-- seq_at_time: where read() starts for a time, without a consumer
SELECT p, streamguard.seq_at_time('q', p, '-infinity') FROM generate_series(0, 1) p;
SELECT p, streamguard.seq_at_time('q', p, now() + interval '1 hour') = sp.readable_horizon
FROM generate_series(0, 1) p JOIN streamguard.stream_partitions sp ON sp.stream = 'q' AND sp.partition = p;
SELECT streamguard.seq_at_time('q', 1, e.appended_at) = e.seq, e.payload
FROM streamguard.read('q', 1, 0, 100) e WHERE e.payload ? 'late';
SELECT payload FROM streamguard.read('q', 1,
	streamguard.seq_at_time('q', 1, (SELECT appended_at FROM streamguard.read('q', 1, 0, 100) WHERE payload ? 'late')) - 1, 100);

-- bad input
SELECT try($$SELECT * FROM streamguard.poll('q', '', 1)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', NULL, 1)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', 'bad name', 1)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', 'c', 0)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', 'c', -5)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', 'c', 100001)$$);
SELECT try($$SELECT * FROM streamguard.poll('q', 'c', NULL)$$);
SELECT try($$SELECT * FROM streamguard.poll('nope', 'c', 1)$$);
SELECT try($$SELECT streamguard.seek('q', 'c', 2, 1)$$);
SELECT try($$SELECT streamguard.seek('q', 'c', 0, 0)$$);
SELECT try($$SELECT streamguard.seek('q', 'c', 0, 1000)$$);
SELECT try($$SELECT streamguard.seek('q', 'c', NULL, 1)$$);
SELECT try($$SELECT streamguard.seek('q', 'c', NULL::timestamptz)$$);
SELECT try($$SELECT streamguard.seek('nope', 'c', 0, 1)$$);
SELECT try($$SELECT streamguard.seq_at_time('q', NULL, now())$$);
SELECT try($$SELECT streamguard.seq_at_time('q', 0, NULL)$$);
SELECT try($$SELECT streamguard.seq_at_time(NULL, 0, now())$$);
SELECT try($$SELECT streamguard.seq_at_time('q', 2, now())$$);
SELECT try($$SELECT streamguard.seq_at_time('nope', 0, now())$$);
SELECT try($$SELECT streamguard.drop_consumer('q', 'never')$$);
SELECT try($$SELECT streamguard.drop_consumer('q', NULL)$$);

SELECT streamguard.drop_consumer('q', 'other');
SELECT DISTINCT consumer FROM streamguard.consumers WHERE stream = 'q' ORDER BY 1;
-- a dropped consumer starts again from the beginning
SELECT count(*) FROM streamguard.poll('q', 'other', 100);

-- REPEATABLE READ: the events are still read with a snapshot taken after the horizon
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM streamguard.stream WHERE name = 'q';
SELECT count(*) FROM streamguard.poll('q', 'rr', 100);
COMMIT;
