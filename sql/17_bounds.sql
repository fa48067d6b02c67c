-- bounds: every parameter that multiplies work, just over its bound
-- (refused, 22023, naming the value and the bound) and at it (accepted),
-- at creation and at alter (docs/security.md, "Bounds"; src/bounds.h).
-- "At the bound" against an object that does not exist shows the bound
-- passed: the next check (42704) refuses the call.
SET client_min_messages = warning;
SELECT streamguard.create_stream('bsrc', 1);
CREATE TABLE bout (window_start timestamptz, window_end timestamptz, key text, events numeric);
CREATE TABLE bout_rev (window_start timestamptz, window_end timestamptz, key text, events numeric, revision int);

-- partitions per stream: 1024
SELECT try($$SELECT streamguard.create_stream('b_parts', 1025)$$);
SELECT try($$SELECT streamguard.create_stream('b_parts', 1024)$$);
SELECT try($$SELECT streamguard.alter_stream('b_parts', partitions => 1025)$$);
SELECT streamguard.drop_stream('b_parts');

-- segments per stream: retention / segment_interval, 1000
SELECT try($$SELECT streamguard.create_stream('b_seg', 1, retention => '1001 s', segment_interval => '1 s')$$);
SELECT try($$SELECT streamguard.create_stream('b_seg', 1, retention => '1000 s', segment_interval => '1 s')$$);
SELECT try($$SELECT streamguard.alter_stream('b_seg', retention => '1001 s')$$);
SELECT try($$SELECT streamguard.alter_stream('b_seg', segment_interval => '0.9 s')$$);
SELECT try($$SELECT streamguard.alter_stream('b_seg', retention => '10 years', segment_interval => '1 day')$$);
SELECT try($$SELECT streamguard.alter_stream('b_seg', retention => '10 years', segment_interval => '3 days 16 hours')$$);
-- a longer retention is checked against the segment_interval the stream keeps
SELECT try($$SELECT streamguard.alter_stream('b_seg', retention => '100 years')$$);
-- a stream above the bound (0.2 allowed it; made here behind alter_stream's
-- back) can still be altered otherwise, and a new retention must fit
UPDATE streamguard.stream SET retention = '10 years', segment_interval = '1 day' WHERE name = 'b_seg';
SELECT try($$SELECT streamguard.alter_stream('b_seg', dedup_window => '2 hours')$$);
SELECT try($$SELECT streamguard.alter_stream('b_seg', retention => '11 years')$$);
SELECT streamguard.drop_stream('b_seg');
-- the default segment_interval (a quarter of the retention) always fits
SELECT try($$SELECT streamguard.create_stream('b_seg2', 1, retention => '100 years')$$);
SELECT streamguard.drop_stream('b_seg2');

-- dedup_window: 1 second to 366 days (streams and pipelines)
SELECT try($$SELECT streamguard.create_stream('b_dd', 1, dedup_window => '367 days')$$);
SELECT try($$SELECT streamguard.create_stream('b_dd', 1, dedup_window => '100000000 years')$$);
SELECT try($$SELECT streamguard.create_stream('b_dd', 1, dedup_window => '366 days')$$);
SELECT try($$SELECT streamguard.alter_stream('b_dd', dedup_window => '366 days 00:00:01')$$);
SELECT try($$SELECT streamguard.alter_stream('b_dd', dedup_window => '1 year')$$);
SELECT streamguard.drop_stream('b_dd');
SELECT try($$SELECT streamguard.create_pipeline('b_p', 'bsrc', 'SELECT 1 FROM batch', dedup => true, dedup_window => '367 days')$$);
SELECT try($$SELECT streamguard.create_pipeline('b_p', 'no_such_stream', 'SELECT 1 FROM batch', dedup => true, dedup_window => '366 days')$$);

-- batch_size: 100000
SELECT try($$SELECT streamguard.create_pipeline('b_p', 'bsrc', 'SELECT 1 FROM batch', batch_size => 100001)$$);
SELECT try($$SELECT streamguard.create_pipeline('b_p', 'bsrc', 'SELECT 1 FROM batch', batch_size => 100000)$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', batch_size => 100001)$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', batch_size => 100000)$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '10 s', batch_size => 100001)$$);

-- workers: 64
SELECT try($$SELECT streamguard.create_pipeline('b_p2', 'bsrc', 'SELECT 1 FROM batch', workers => 65)$$);
SELECT try($$SELECT streamguard.create_pipeline('b_p2', 'no_such_stream', 'SELECT 1 FROM batch', workers => 64)$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', workers => 65)$$);
SELECT try($$SELECT streamguard.alter_pipeline('no_such_pipeline', workers => 64)$$);

-- batch_timeout: 1 second to 24 days; retries: 1000 attempts, backoff 1 hour
SELECT try($$SELECT streamguard.alter_pipeline('b_p', batch_timeout => '25 days')$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', batch_timeout => '24 days')$$);
SELECT try($$SELECT streamguard.create_pipeline('b_p2', 'bsrc', 'SELECT 1 FROM batch', batch_timeout => '25 days')$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', max_attempts => 1001)$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', max_attempts => 1000)$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', max_backoff => '1 hour 1 ms')$$);
SELECT try($$SELECT streamguard.alter_pipeline('b_p', max_backoff => '1 hour')$$);
SELECT batch_size, batch_timeout FROM streamguard.pipelines WHERE pipeline = 'b_p';
SELECT streamguard.drop_pipeline('b_p');

-- skip_event: 1000 requests a pipeline has not passed yet
SELECT streamguard.create_stream('b_sk', 1);
SELECT count(*) FROM streamguard.append_batch('b_sk', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1001)));
BEGIN;  -- paused before its worker could start
SELECT streamguard.create_pipeline('b_skp', 'b_sk', 'SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('b_skp');
COMMIT;
SELECT count(streamguard.skip_event('b_skp', 0, s)) FROM generate_series(1, 1000) s;
SELECT try($$SELECT streamguard.skip_event('b_skp', 0, 1001)$$);
SELECT streamguard.drop_stream('b_sk', force => true);

-- poll and read: 100000 events, a wait of 1 hour
SELECT count(*) FROM streamguard.append('bsrc', '{}');
SELECT try($$SELECT count(*) FROM streamguard.poll('bsrc', 'c', 100001)$$);
SELECT try($$SELECT count(*) FROM streamguard.poll('bsrc', 'c', 100000)$$);
SELECT try($$SELECT count(*) FROM streamguard.poll('bsrc', 'c', 10, wait => '1 hour 1 s')$$);
-- (an event is waiting: the poll returns at once)
SELECT count(*) FROM streamguard.append('bsrc', '{}');
SELECT try($$SELECT count(*) FROM streamguard.poll('bsrc', 'c', 10, wait => '1 hour')$$);
SELECT try($$SELECT count(*) FROM streamguard.read('bsrc', 0, 0, 100001)$$);
SELECT try($$SELECT count(*) FROM streamguard.read('bsrc', 0, 0, 100000)$$);
SELECT streamguard.drop_consumer('bsrc', 'c');

-- a backfill chunk: 1000000 rows
SELECT try($$SELECT streamguard.run_backfill_chunk('bout', 'bsrc', 1000001)$$);
SELECT try($$SELECT streamguard.run_backfill_chunk('bout', 'bsrc', 1000000)$$) ~ 'not captured|no backfill|^ok' AS passes_the_bound;

-- windows per event (hopping: size / slide, rounded up): 1000 by default
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '1 hour', kind => 'hopping', slide => '1 microsecond')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '1000 s', kind => 'hopping', slide => '999 ms')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '1000 s', kind => 'hopping', slide => '1 s')$$);
SELECT streamguard.drop_pipeline('b_w');
-- a superuser setting; it raises (or lowers) the bound for new windows
SELECT setting, unit, context, min_val, max_val FROM pg_settings WHERE name = 'streamguard.max_windows_per_event';
SET streamguard.max_windows_per_event = 2000;
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '1000 s', kind => 'hopping', slide => '500 ms')$$);
SELECT streamguard.drop_pipeline('b_w');
SELECT try($$SET streamguard.max_windows_per_event = 100001$$);
RESET streamguard.max_windows_per_event;
CREATE ROLE b_user;
SET ROLE b_user;
SELECT try($$SET streamguard.max_windows_per_event = 2000$$);
RESET ROLE;
DROP ROLE b_user;

-- a window's size and a session's gap: 366 days
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '367 days')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '100000000 days')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '367 days', kind => 'session', event_time => 'appended_at')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '366 days')$$);
SELECT streamguard.drop_pipeline('b_w');

-- allowed_lateness, keep_closed, idle_timeout: 31 days
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '10 s', event_time => 'appended_at', allowed_lateness => '31 days 00:00:01')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '10 s', event_time => 'appended_at', idle_timeout => '32 days')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout', '10 s', event_time => 'appended_at', late => 'update', keep_closed => '32 days')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('b_w', 'bsrc', 'bout_rev', '10 s', event_time => 'appended_at', allowed_lateness => '31 days', idle_timeout => '31 days', late => 'update', keep_closed => '31 days')$$);
SELECT pipeline, size, allowed_lateness FROM streamguard.windows WHERE pipeline = 'b_w';
SELECT streamguard.drop_pipeline('b_w');

SELECT count(*) AS no_pipelines_left FROM streamguard.pipelines;
SELECT streamguard.drop_stream('bsrc');
DROP TABLE bout, bout_rev;
