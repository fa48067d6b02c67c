-- append / append_batch: partitions, keys, dedup keys, bad input
SET client_min_messages = warning;

SELECT streamguard.create_stream('events', 3);

-- explicit partition, seqs start at 1 per partition
SELECT * FROM streamguard.append('events', '{"n": 1}', partition => 0);
SELECT * FROM streamguard.append('events', '{"n": 2}', partition => 0);
SELECT * FROM streamguard.append('events', '{"n": 3}', partition => 2);
-- the same key always lands in the same partition
SELECT count(DISTINCT (streamguard.append('events', '{"k": true}', key => 'customer-42')).partition)
FROM generate_series(1, 20);
-- no key and no partition: spread over all partitions
SELECT count(DISTINCT (streamguard.append('events', '{}')).partition) FROM generate_series(1, 30);

-- dedup keys: a retry returns the first position and appends nothing
SELECT * FROM streamguard.append('events', '{"pay": 10}', dedup_key => 'pay-1', partition => 1) AS first;
SELECT * FROM streamguard.append('events', '{"pay": 10}', dedup_key => 'pay-1', partition => 1) AS retry;
SELECT * FROM streamguard.append('events', '{"pay": 10}', dedup_key => 'pay-1', partition => 2) AS retry_elsewhere;
SELECT count(*) FROM streamguard.poll('events', 'audit', 1000) WHERE dedup_key = 'pay-1';
-- a rolled-back append does not keep its dedup key
BEGIN;
SELECT partition FROM streamguard.append('events', '{"pay": 20}', dedup_key => 'pay-2', partition => 1);
ROLLBACK;
SELECT seq > 0 AS appended FROM streamguard.append('events', '{"pay": 20}', dedup_key => 'pay-2', partition => 1);
SELECT key, payload FROM streamguard.poll('events', 'audit', 1000) WHERE dedup_key = 'pay-2';

-- batches: one row per input in input order; duplicates point at the original
SELECT * FROM streamguard.append_batch('events',
	ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}', '{"b": 4}']::jsonb[],
	dedup_keys => ARRAY['b-1', 'b-2', 'b-1', 'pay-1'],
	partitions => ARRAY[0, 0, 0, 0]);
SELECT payload FROM streamguard.poll('events', 'audit', 1000) ORDER BY partition, seq;
SELECT * FROM streamguard.append_batch('events', '{}'::jsonb[]);
SELECT count(*) FROM streamguard.append_batch('events',
	(SELECT array_agg(jsonb_build_object('i', g)) FROM generate_series(1, 5000) g),
	keys => (SELECT array_agg('k' || (g % 7)) FROM generate_series(1, 5000) g));
SELECT count(*), count(DISTINCT partition) FROM streamguard.poll('events', 'audit', 100000);

-- bad input
SELECT try($$SELECT streamguard.append('events', NULL)$$);
SELECT try($$SELECT streamguard.append(NULL, '{}')$$);
SELECT try($$SELECT streamguard.append('nope', '{}')$$);
SELECT try($$SELECT streamguard.append('', '{}')$$);
SELECT try($$SELECT streamguard.append('x"; DROP TABLE t; --', '{}')$$);
SELECT try($$SELECT streamguard.append('events', '{}', partition => 3)$$);
SELECT try($$SELECT streamguard.append('events', '{}', partition => -1)$$);
SELECT try($$SELECT streamguard.append('events', '{}', dedup_key => '')$$);
SELECT try($$SELECT streamguard.append('events', '{}', dedup_key => repeat('d', 300))$$);
SELECT try($$SELECT streamguard.append('events', 'not json')$$);
SELECT try($$SELECT streamguard.append_batch('events', NULL)$$);
SELECT try($$SELECT streamguard.append_batch('events', ARRAY['{}', NULL]::jsonb[])$$);
SELECT try($$SELECT streamguard.append_batch('events', ARRAY['{}', '{}']::jsonb[], keys => ARRAY['a'])$$);
SELECT try($$SELECT streamguard.append_batch('events', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['a', 'b'])$$);
SELECT try($$SELECT streamguard.append_batch('events', ARRAY['{}']::jsonb[], partitions => ARRAY[7])$$);
SELECT try($$SELECT streamguard.append_batch('events', ARRAY[['{}'], ['{}']]::jsonb[])$$);
-- failed calls appended nothing
SELECT count(*) FROM streamguard.poll('events', 'audit', 1000);

-- seqs keep increasing; aborted appends leave gaps, never reuse
BEGIN;
SELECT seq FROM streamguard.append('events', '{"aborted": true}', partition => 2);
ROLLBACK;
SELECT seq FROM streamguard.append('events', '{"after": true}', partition => 2);

-- payload_check: set_payload_check(stream, 'object') makes a stream take
-- JSON objects only; the default 'any' keeps taking any JSON value
SELECT streamguard.create_stream('objs', 2);
SELECT try($$SELECT streamguard.set_payload_check('objs', 'objects')$$);
SELECT try($$SELECT streamguard.set_payload_check('objs', NULL)$$);
SELECT try($$SELECT streamguard.set_payload_check('no_such', 'object')$$);
-- the owner only
CREATE ROLE pc_other;
SET ROLE pc_other;
SELECT try($$SELECT streamguard.set_payload_check('objs', 'object')$$);
RESET ROLE;
DROP ROLE pc_other;
-- a payload appended in this session before the change (the cached stream)
SELECT seq FROM streamguard.append('objs', '"before"', partition => 0);
SELECT streamguard.set_payload_check('objs', 'object');
SELECT try($$SELECT streamguard.append('objs', 'null')$$);
SELECT try($$SELECT streamguard.append('objs', '"text"')$$);
SELECT try($$SELECT streamguard.append('objs', '42')$$);
SELECT try($$SELECT streamguard.append('objs', 'true')$$);
SELECT try($$SELECT streamguard.append('objs', '[{"a": 1}]')$$);
SELECT try($$SELECT * FROM streamguard.append_batch('objs', ARRAY['{"a": 1}', 'null', '{}']::jsonb[])$$);
SELECT try($$SELECT * FROM streamguard.append_batch('objs', ARRAY['[]']::jsonb[])$$);
-- checked before the dedup key is claimed: the key stays free
SELECT try($$SELECT streamguard.append('objs', '1', dedup_key => 'd1')$$);
SELECT partition, seq FROM streamguard.append('objs', '{"ok": 1}', key => 'k', dedup_key => 'd1');
SELECT count(*) FROM streamguard.append_batch('objs', ARRAY['{"ok": 2}', '{}']::jsonb[]);
-- nothing refused was stored
SELECT payload FROM streamguard.poll('objs', 'c', 100) ORDER BY payload::text;
-- and back to any JSON
SELECT streamguard.set_payload_check('objs', 'any');
SELECT seq FROM streamguard.append('objs', 'null', partition => 0);
SELECT stream, payload_check FROM streamguard.streams WHERE stream IN ('objs', 'events') ORDER BY 1;
SELECT streamguard.set_payload_check('objs', 'object');
SELECT stream, payload_check FROM streamguard.streams WHERE stream = 'objs';
SELECT streamguard.drop_stream('objs', force => true);
