-- day-to-day operations: alter_stream (retention, dedup window) and
-- skip_event (pass over exactly one poison event, everything else processed)
SET client_min_messages = warning;

-- alter_stream
SELECT streamguard.create_stream('ops', 2);
SELECT retention, dedup_window FROM streamguard.streams WHERE stream = 'ops';
SELECT streamguard.alter_stream('ops', retention => '1 day');
SELECT s.retention, s.segment_interval FROM streamguard.stream s WHERE name = 'ops';
SELECT streamguard.alter_stream('ops', dedup_window => '5 minutes', segment_interval => '1 hour');
SELECT s.retention, s.dedup_window, s.segment_interval FROM streamguard.stream s WHERE name = 'ops';
SELECT streamguard.alter_stream('ops', retention => '0');
SELECT s.retention, s.segment_interval FROM streamguard.stream s WHERE name = 'ops';
SELECT streamguard.alter_stream('ops', partitions => 2);
SELECT try($$SELECT streamguard.alter_stream('ops', partitions => 1)$$);
SELECT try($$SELECT streamguard.alter_stream('ops', segment_interval => '1 hour')$$);
SELECT try($$SELECT streamguard.alter_stream('ops', retention => '-1 day')$$);
SELECT try($$SELECT streamguard.alter_stream('ops', dedup_window => '0.5 s')$$);
SELECT try($$SELECT streamguard.alter_stream('nope', retention => '1 day')$$);
SELECT try($$SELECT streamguard.alter_stream(NULL)$$);
CREATE ROLE ops_other;
SET ROLE ops_other;
SELECT try($$SELECT streamguard.alter_stream('ops', retention => '1 day')$$);
RESET ROLE;
DROP ROLE ops_other;
-- the new dedup window takes effect for appends at once
SELECT count(*) FROM streamguard.append('ops', '{}', dedup_key => 'k1');
SELECT count(*) FROM streamguard.append('ops', '{}', dedup_key => 'k1');
SELECT count(*) FROM streamguard.poll('ops', 'c', 10);

-- skip_event: a poison event stops the pipeline; skip exactly that one
SELECT streamguard.create_stream('skp', 1);
CREATE TABLE skp_sink (n int);
SELECT count(*) FROM streamguard.append_batch('skp',
	ARRAY['{"n": 1}', '{"n": 2}', '{"n": "poison"}', '{"n": 4}', '{"n": 5}']::jsonb[]);
SELECT streamguard.create_pipeline('skp_p', 'skp',
	$$INSERT INTO skp_sink SELECT (payload->>'n')::int FROM batch$$, batch_size => 100);
SELECT wait_for($$(SELECT state FROM streamguard.pipelines WHERE pipeline = 'skp_p') = 'failed'$$);
SELECT count(*) FROM skp_sink;
SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'skp_p';
SELECT try($$SELECT streamguard.skip_event('skp_p', 0, 0)$$);
SELECT try($$SELECT streamguard.skip_event('skp_p', 0, 99)$$);
SELECT try($$SELECT streamguard.skip_event('skp_p', 1, 3)$$);
SELECT try($$SELECT streamguard.skip_event('skp_p', NULL, 3)$$);
SELECT try($$SELECT streamguard.skip_event('nope', 0, 3)$$);
SELECT streamguard.skip_event('skp_p', 0, 3);
SELECT streamguard.resume_pipeline('skp_p');
SELECT wait_for($$(SELECT count(*) FROM skp_sink) = 4$$);
SELECT array_agg(n ORDER BY n) FROM skp_sink;
SELECT state, skipped, events_in FROM streamguard.pipelines WHERE pipeline = 'skp_p';
SELECT count(*) AS pending_skips FROM streamguard.pipeline_skip;
-- an event already passed cannot be skipped
SELECT try($$SELECT streamguard.skip_event('skp_p', 0, 2)$$);

-- redrive_dead_letters: dead letters fed back through the (fixed) SQL, once
SELECT streamguard.create_stream('rd', 1);
CREATE TABLE rd_sink (v text);
SELECT count(*) FROM streamguard.append_batch('rd',
	ARRAY['{"n": 1}', '{"n": "x"}', '{"n": 3}', '{"n": "y"}']::jsonb[]);
SELECT streamguard.create_pipeline('rd_p', 'rd',
	$$INSERT INTO rd_sink SELECT ((payload->>'n')::int)::text FROM batch$$,
	error_policy => 'dead_letter', max_attempts => 1, retry_backoff => '10 ms', max_backoff => '20 ms');
SELECT wait_for($$(SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'rd_p') = 2$$);
SELECT array_agg(v ORDER BY v) FROM rd_sink;
-- the SQL still fails on them: nothing applied, the dead letters stay
SELECT try($$SELECT streamguard.redrive_dead_letters('rd_p')$$);
SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'rd_p';
SELECT streamguard.alter_pipeline('rd_p', sql => $$INSERT INTO rd_sink SELECT payload->>'n' FROM batch$$);
SELECT streamguard.redrive_dead_letters('rd_p', min_seq => 4);
SELECT streamguard.redrive_dead_letters('rd_p');
SELECT streamguard.redrive_dead_letters('rd_p');
SELECT array_agg(v ORDER BY v) FROM rd_sink;
SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'rd_p';
-- a rolled-back redrive leaves the dead letters (the failing SQL first,
-- then the event it fails on: the other order races the worker)
SELECT streamguard.alter_pipeline('rd_p', sql => $$INSERT INTO rd_sink SELECT ((payload->>'n')::int)::text FROM batch$$);
SELECT count(*) FROM streamguard.append('rd', '{"n": "z"}');
SELECT wait_for($$(SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'rd_p') = 1$$);
BEGIN;
SELECT streamguard.alter_pipeline('rd_p', sql => $$INSERT INTO rd_sink SELECT payload->>'n' FROM batch$$);
SELECT streamguard.redrive_dead_letters('rd_p');
ROLLBACK;
SELECT count(*) FROM streamguard.dead_letters WHERE pipeline = 'rd_p';
SELECT try($$SELECT streamguard.redrive_dead_letters('nope')$$);
CREATE ROLE rd_other;
SET ROLE rd_other;
SELECT try($$SELECT streamguard.redrive_dead_letters('rd_p')$$);
RESET ROLE;
DROP ROLE rd_other;
-- retry settings
SELECT try($$SELECT streamguard.create_pipeline('rd_q', 'rd', 'SELECT 1', max_attempts => 0)$$);
SELECT try($$SELECT streamguard.create_pipeline('rd_q', 'rd', 'SELECT 1', retry_backoff => '1 ms')$$);
SELECT try($$SELECT streamguard.create_pipeline('rd_q', 'rd', 'SELECT 1', retry_backoff => '1 s', max_backoff => '100 ms')$$);
SELECT try($$SELECT streamguard.create_pipeline('rd_q', 'rd', 'SELECT 1', max_attempts => NULL)$$);
SELECT try($$SELECT streamguard.alter_pipeline('rd_p', max_backoff => '5 ms')$$);
SELECT try($$SELECT streamguard.alter_pipeline('rd_p', retry_backoff => '1 s')$$);
SELECT streamguard.alter_pipeline('rd_p', max_attempts => 5, retry_backoff => '50 ms', max_backoff => '1 s');
SELECT max_attempts, retry_backoff, max_backoff FROM streamguard.pipeline WHERE name = 'rd_p';

SELECT streamguard.drop_stream('skp', force => true);
SELECT streamguard.drop_stream('ops', force => true);
SELECT streamguard.drop_stream('rd', force => true);
DROP TABLE skp_sink, rd_sink;
