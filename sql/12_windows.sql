-- windows: create_window_pipeline, its checks, and windows end to end
-- (docs/windows.md).  Event-time cases use fixed UTC times; append-time
-- cases compare with a recomputation from the stream.
SET client_min_messages = warning;
SET timezone = 'UTC';

SELECT streamguard.create_stream('clicks', 1);
CREATE TABLE click_counts (window_start timestamptz, window_end timestamptz, key text,
                           clicks numeric, total numeric, lo numeric, hi numeric, mean numeric);

-- bad input
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '0 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '1 month')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '-1 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', kind => 'sliding')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', kind => 'hopping')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', kind => 'hopping', slide => '20 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', slide => '5 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', allowed_lateness => '1 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', late => 'dead_letter')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', event_time => 'payload->>''ts''', late => 'update')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', event_time => 'payload->>''ts''', keep_closed => '1 min')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', event_time => 'payload->>''ts''', late => 'update', keep_closed => '0 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', kind => 'session', event_time => 'payload->>''ts''', late => 'update', keep_closed => '1 min')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "count(*)"}', event_time => 'payload->>''ts''', late => 'update', keep_closed => '1 min')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', event_time => 'payload->>''ts''', late => 'never')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', emit => 'sometimes')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', kind => 'session', emit => 'on_update')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '[]')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": 1}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "count"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "median(seq)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "sum()"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "sum(*)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"key": "count(*)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "sum(seq) FROM batch; DROP TABLE click_counts; --)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', key => 'key FROM batch UNION SELECT 1,2,3,4,5 --')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "sum(no_such_column)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"nope": "count(*)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'no_such_table', '10 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'streamguard.windows', '10 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'no_such_stream', 'click_counts', '10 s', aggregates => '{"clicks": "count(*)"}')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', '10 s', aggregates => '{"clicks": "count(*)"}', emit => 'on_update')$$);
SELECT try($$SELECT streamguard.create_window_pipeline(NULL, 'clicks', 'click_counts', '10 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'clicks', 'click_counts', NULL)$$);
SELECT count(*) AS no_pipelines_left FROM streamguard.pipelines;

-- event time, tumbling 10 s, every aggregate: windows close as the
-- watermark (highest event time - allowed lateness) passes their end
SELECT streamguard.create_window_pipeline('clicks_10s', 'clicks', 'click_counts', '10 s',
  aggregates => '{"clicks": "count(*)", "total": "sum(payload->>''n'')", "lo": "min(payload->>''n'')",
                  "hi": "max(payload->>''n'')", "mean": "avg(payload->>''n'')"}',
  event_time => $$payload->>'ts'$$, allowed_lateness => '2 s', batch_size => 100);
SELECT pipeline, kind, size, slide, event_time, key, target, emit, allowed_lateness, late
FROM streamguard.windows;
SELECT count(*) FROM streamguard.append_batch('clicks', ARRAY[
  '{"ts": "2026-01-01 00:00:01", "n": 1}', '{"ts": "2026-01-01 00:00:09.999", "n": 2}',
  '{"ts": "2026-01-01 00:00:10", "n": 4}', '{"ts": "2026-01-01 00:00:05", "n": 8}',
  '{"ts": "2026-01-01 00:00:11+00", "n": 16}']::jsonb[],
  keys => ARRAY['a', 'a', 'a', 'b', 'a']);
SELECT wait_for($$(SELECT watermark FROM streamguard.windows WHERE pipeline = 'clicks_10s') = '2026-01-01 00:00:09'$$);
-- 00:00:11 - 2 s = 00:00:09 < 00:00:10: nothing closed yet
SELECT count(*) FROM click_counts;
SELECT open_windows, windows_closed, late_events FROM streamguard.windows;
-- an event at 00:00:12 moves the watermark to 00:00:10: [00:00, 00:10) closes
SELECT * FROM streamguard.append('clicks', '{"ts": "2026-01-01T00:00:12Z", "n": 32}', key => 'b');
SELECT wait_for($$(SELECT count(*) FROM click_counts) = 2$$);
SELECT * FROM click_counts ORDER BY window_start, key;
-- late: an event for the closed window is dropped and counted; out of
-- order but not late (00:00:10.5 after 00:00:12) is counted in its window
SELECT count(*) FROM streamguard.append_batch('clicks', ARRAY[
  '{"ts": "2026-01-01 00:00:03", "n": 64}', '{"ts": "2026-01-01 00:00:10.5", "n": 128}',
  '{"ts": "2026-01-01 00:00:25", "n": 256}']::jsonb[], keys => ARRAY['a', 'a', 'a']);
SELECT wait_for($$(SELECT count(*) FROM click_counts) = 4$$);
SELECT * FROM click_counts ORDER BY window_start, key;
SELECT watermark, open_windows, windows_closed, late_events FROM streamguard.windows;
SELECT p.name, wp.partition, wp.max_event_time FROM streamguard.window_partition wp
  JOIN streamguard.pipeline p ON p.id = wp.pipeline_id;
-- its SQL is generated, and it runs with one worker
SELECT try($$SELECT streamguard.alter_pipeline('clicks_10s', sql => 'SELECT 1 FROM batch')$$);
SELECT try($$SELECT streamguard.alter_pipeline('clicks_10s', workers => 2)$$);
SELECT try($$SELECT streamguard.alter_pipeline('clicks_10s', batch_size => 50)$$);
-- an event whose time is NULL or not a time is an error of the event: the error policy
SELECT * FROM streamguard.append('clicks', '{"n": 1}', key => 'a');
SELECT wait_for($$(SELECT state FROM streamguard.pipelines WHERE pipeline = 'clicks_10s') = 'failed'$$);
SELECT state, last_error FROM streamguard.pipelines WHERE pipeline = 'clicks_10s';
SELECT streamguard.drop_pipeline('clicks_10s');
SELECT count(*) AS state_left FROM streamguard.window_state;

-- hopping 10 s every 5 s, per key, late events to dead letters
CREATE TABLE hops (window_start timestamptz, window_end timestamptz, key text, events numeric, total numeric);
SELECT streamguard.create_stream('hop_src', 2);
SELECT streamguard.create_window_pipeline('hopper', 'hop_src', 'hops', '10 s', kind => 'hopping',
  slide => '5 s', aggregates => '{"events": "count(*)", "total": "sum((payload->>''n'')::int)"}',
  event_time => $$(payload->>'ts')::timestamptz$$, late => 'dead_letter', error_policy => 'skip');
SELECT count(*) FROM streamguard.append_batch('hop_src', ARRAY[
  '{"ts": "2026-01-01 00:00:02", "n": 1}', '{"ts": "2026-01-01 00:00:07", "n": 2}',
  '{"ts": "2026-01-01 00:00:12", "n": 4}', '{"ts": "2026-01-01 00:00:03", "n": 8}']::jsonb[],
  keys => ARRAY['x', 'x', 'x', 'y'], partitions => ARRAY[0, 0, 0, 1]);
-- partition 1 holds the watermark at 00:00:03: nothing ends by then
SELECT wait_for($$(SELECT watermark FROM streamguard.windows WHERE pipeline = 'hopper') = '2026-01-01 00:00:03'$$);
SELECT count(*) FROM hops;
SELECT count(*) FROM streamguard.append_batch('hop_src', ARRAY[
  '{"ts": "2026-01-01 00:00:16", "n": 16}', '{"ts": "2026-01-01 00:00:01", "n": 32}',
  '{"ts": "2026-01-01 00:00:40", "n": 64}']::jsonb[],
  keys => ARRAY['y', 'z', 'x'], partitions => ARRAY[1, 1, 0]);
SELECT wait_for($$(SELECT watermark FROM streamguard.windows WHERE pipeline = 'hopper') = '2026-01-01 00:00:16'$$);
SELECT * FROM hops ORDER BY window_start, key;
SELECT watermark, open_windows, windows_closed, late_events FROM streamguard.windows;
-- 00:00:09: its window [00:00:00, 00:00:10) is closed, [00:00:05, 00:00:15) is
-- too: late, to the dead letters; 00:00:14 is late for [00:00:05, 00:00:15)
-- only, and counted in [00:00:10, 00:00:20)
SELECT count(*) FROM streamguard.append_batch('hop_src', ARRAY[
  '{"ts": "2026-01-01 00:00:09", "n": 128}', '{"ts": "2026-01-01 00:00:14", "n": 256}']::jsonb[],
  keys => ARRAY['x', 'x'], partitions => ARRAY[0, 0]);
SELECT wait_for($$(SELECT late_events FROM streamguard.windows WHERE pipeline = 'hopper') = 2$$);
SELECT key, payload, error, sqlstate FROM streamguard.dead_letters WHERE pipeline = 'hopper' ORDER BY seq;
SELECT key, events, acc FROM streamguard.window_state s JOIN streamguard.pipeline p ON p.id = s.pipeline_id
WHERE p.name = 'hopper' AND s.window_start = '2026-01-01 00:00:10' ORDER BY key;
SELECT streamguard.drop_pipeline('hopper');

-- idle partitions: partition 1 stops at 00:00:01 and holds the watermark
-- there; once it has had no event for idle_timeout it is left out, and the
-- watermark follows partition 0 to 00:00:31 (without idle_timeout it would
-- wait for partition 1): [00:00:00, 00:00:10) closes
CREATE TABLE idle_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_stream('idle_src', 2);
SELECT streamguard.create_window_pipeline('idler', 'idle_src', 'idle_out', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, idle_timeout => '1 s');
SELECT count(*) FROM streamguard.append_batch('idle_src', ARRAY[
  '{"ts": "2026-01-01 00:00:01"}', '{"ts": "2026-01-01 00:00:02"}', '{"ts": "2026-01-01 00:00:31"}']::jsonb[],
  keys => ARRAY['a', 'a', 'a'], partitions => ARRAY[1, 0, 0]);
SELECT wait_for($$(SELECT count(*) FROM idle_out) = 1$$);
SELECT * FROM idle_out ORDER BY window_start, key;
SELECT watermark, idle_timeout FROM streamguard.windows WHERE pipeline = 'idler';
-- partition 1 speaks again, with an older time: late for [00:00:00, 00:00:10)
SELECT * FROM streamguard.append('idle_src', '{"ts": "2026-01-01 00:00:05"}', key => 'a', partition => 1);
SELECT wait_for($$(SELECT late_events FROM streamguard.windows WHERE pipeline = 'idler') = 1$$);
SELECT streamguard.drop_pipeline('idler');

-- session windows, gap 5 s: sessions merge, also across batches
CREATE TABLE sessions (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_stream('sess_src', 1);
SELECT streamguard.create_window_pipeline('sessions', 'sess_src', 'sessions', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$);
SELECT count(*) FROM streamguard.append_batch('sess_src', ARRAY[
  '{"ts": "2026-01-01 00:00:00"}', '{"ts": "2026-01-01 00:00:04"}', '{"ts": "2026-01-01 00:00:20"}',
  '{"ts": "2026-01-01 00:00:01"}']::jsonb[], keys => ARRAY['u', 'u', 'u', 'v']);
SELECT wait_for($$(SELECT count(*) FROM sessions) = 2$$);
-- the watermark is 00:00:20: 00:00:12 alone would be late (its session would
-- end at 00:00:17), but with 00:00:16 and 00:00:24 it joins the open session
-- that began at 00:00:20: one session [00:00:12, 00:00:29), nothing late
SELECT count(*) FROM streamguard.append_batch('sess_src', ARRAY[
  '{"ts": "2026-01-01 00:00:16"}', '{"ts": "2026-01-01 00:00:24"}', '{"ts": "2026-01-01 00:00:12"}']::jsonb[],
  keys => ARRAY['u', 'u', 'u']);
SELECT * FROM streamguard.append('sess_src', '{"ts": "2026-01-01 00:01:00"}', key => 'w');
SELECT wait_for($$(SELECT count(*) FROM sessions) = 3$$);
SELECT * FROM sessions ORDER BY key, window_start;
SELECT watermark, open_windows, windows_closed, late_events FROM streamguard.windows;
SELECT streamguard.drop_pipeline('sessions');
-- an event whose own session would be over by the watermark is on time when
-- it joins an open session (lateness is judged on the merged session):
-- u@00:00:10 and v@00:00:12 leave u's session [00:10, 00:15) open at
-- watermark 00:00:12; u@00:00:06 extends it to [00:06, 00:15); x@00:00:01
-- joins nothing and is late
SELECT streamguard.create_stream('sess2_src', 1);
CREATE TABLE sessions2 (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('sessions2', 'sess2_src', 'sessions2', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, late => 'dead_letter');
SELECT count(*) FROM streamguard.append_batch('sess2_src', ARRAY[
  '{"ts": "2026-01-01 00:00:10"}', '{"ts": "2026-01-01 00:00:12"}']::jsonb[], keys => ARRAY['u', 'v']);
SELECT wait_for($$(SELECT watermark FROM streamguard.windows WHERE pipeline = 'sessions2') = '2026-01-01 00:00:12'$$);
SELECT count(*) FROM streamguard.append_batch('sess2_src', ARRAY[
  '{"ts": "2026-01-01 00:00:06"}', '{"ts": "2026-01-01 00:00:01"}']::jsonb[], keys => ARRAY['u', 'x']);
SELECT wait_for($$(SELECT late_events FROM streamguard.windows WHERE pipeline = 'sessions2') = 1$$);
SELECT * FROM streamguard.append('sess2_src', '{"ts": "2026-01-01 00:00:30"}', key => 'w');
SELECT wait_for($$(SELECT count(*) FROM sessions2) = 2$$);
SELECT * FROM sessions2 ORDER BY key;
SELECT key, payload, error FROM streamguard.dead_letters WHERE pipeline = 'sessions2';
SELECT streamguard.drop_pipeline('sessions2');

-- append time: windows close when the readable horizon of every partition
-- has passed their end, with or without new events; each window's row
-- equals a recomputation from the stream
CREATE TABLE per_second (window_start timestamptz, window_end timestamptz, key text, events numeric, total numeric);
SELECT streamguard.create_stream('ticks', 3);
SELECT streamguard.create_window_pipeline('per_second', 'ticks', 'per_second', '200 ms',
  aggregates => '{"events": "count(*)", "total": "sum((payload->>''n'')::int)"}');
DO $$
BEGIN
  FOR i IN 1 .. 20 LOOP
    PERFORM streamguard.append('ticks', jsonb_build_object('n', i), key => 'k' || (i % 3));
    PERFORM pg_sleep(0.03);
  END LOOP;
END $$;
SELECT wait_for($$(SELECT sum(events) FROM per_second) = 20$$);
SELECT count(*) AS mismatches FROM (
  SELECT date_bin('200 ms', appended_at, 'epoch') AS ws, key, count(*) AS events,
         sum((payload->>'n')::int) AS total
  FROM streamguard.read('ticks', 0, 0, 100) GROUP BY 1, 2
  UNION ALL SELECT date_bin('200 ms', appended_at, 'epoch'), key, count(*), sum((payload->>'n')::int)
  FROM streamguard.read('ticks', 1, 0, 100) GROUP BY 1, 2
  UNION ALL SELECT date_bin('200 ms', appended_at, 'epoch'), key, count(*), sum((payload->>'n')::int)
  FROM streamguard.read('ticks', 2, 0, 100) GROUP BY 1, 2) r
FULL JOIN per_second p ON p.window_start = r.ws AND p.key = r.key
WHERE p.events IS DISTINCT FROM r.events OR p.total IS DISTINCT FROM r.total
   OR p.window_end IS DISTINCT FROM r.ws + interval '200 ms';
SELECT open_windows, late_events, watermark >= (SELECT max(window_end) FROM per_second) AS watermark_past
FROM streamguard.windows WHERE pipeline = 'per_second';
SELECT streamguard.drop_pipeline('per_second');

-- append time across a change of the partition count (alter_stream): keys
-- move partitions, readers are held back at the switch points, the windows
-- still equal a recomputation from the stream
SELECT streamguard.create_stream('grow_src', 1);
CREATE TABLE grow_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('grower', 'grow_src', 'grow_out', '200 ms',
  aggregates => '{"events": "count(*)"}', key => $$'all'$$);
DO $$
BEGIN
  FOR i IN 1 .. 10 LOOP
    PERFORM streamguard.append('grow_src', jsonb_build_object('n', i), key => 'k' || i);
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
SELECT streamguard.alter_stream('grow_src', partitions => 3);
DO $$
BEGIN
  FOR i IN 11 .. 20 LOOP
    PERFORM streamguard.append('grow_src', jsonb_build_object('n', i), key => 'k' || i);
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
SELECT wait_for($$(SELECT sum(events) FROM grow_out) = 20$$);
SELECT count(*) AS mismatches FROM (
  SELECT date_bin('200 ms', appended_at, 'epoch') AS ws, count(*) AS events
  FROM (SELECT appended_at FROM streamguard.read('grow_src', 0, 0, 100)
        UNION ALL SELECT appended_at FROM streamguard.read('grow_src', 1, 0, 100)
        UNION ALL SELECT appended_at FROM streamguard.read('grow_src', 2, 0, 100)) e GROUP BY 1) r
FULL JOIN grow_out g ON g.window_start = r.ws
WHERE g.events IS DISTINCT FROM r.events;
SELECT late_events FROM streamguard.windows WHERE pipeline = 'grower';
SELECT streamguard.drop_pipeline('grower');

-- the same, deterministic: old events unread when the new mapping's arrive.
-- The pipeline is paused; 3 events in partition 0, then partition 1 added
-- and 3 events there; resumed once all their 100 ms windows are over.  Its
-- first batch may read partition 0 only (up to the switch point): partition
-- 1 must not count as read, or its windows would close empty and its
-- events come late
SELECT streamguard.create_stream('held_src', 1);
CREATE TABLE held_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('held', 'held_src', 'held_out', '100 ms',
  aggregates => '{"events": "count(*)"}', key => 'partition');
SELECT wait_for($$(SELECT worker_pid IS NOT NULL FROM streamguard.pipelines WHERE pipeline = 'held')$$);
SELECT streamguard.pause_pipeline('held');
SELECT count(*) FROM streamguard.append_batch('held_src', ARRAY['{}', '{}', '{}']::jsonb[]);
SELECT streamguard.alter_stream('held_src', partitions => 2);
SELECT count(*) FROM streamguard.append_batch('held_src', ARRAY['{}', '{}', '{}']::jsonb[],
  partitions => ARRAY[1, 1, 1]);
SELECT pg_sleep(0.3);
SELECT streamguard.resume_pipeline('held');
SELECT wait_for($$(SELECT sum(events) FROM held_out) = 6$$);
SELECT key, sum(events) FROM held_out GROUP BY key ORDER BY key;
SELECT late_events FROM streamguard.windows WHERE pipeline = 'held';
SELECT streamguard.drop_pipeline('held');

-- on_update: the target holds each open window's current figures
CREATE TABLE running (window_start timestamptz, window_end timestamptz, key text, events numeric,
                      PRIMARY KEY (window_start, key));
SELECT streamguard.create_window_pipeline('running', 'clicks', 'running', '1 hour',
  aggregates => '{"events": "count(*)"}', emit => 'on_update', start_from => 'end');
SELECT * FROM streamguard.append('clicks', '{}', key => 'r');
SELECT wait_for($$(SELECT events FROM running WHERE key = 'r') = 1$$);
SELECT * FROM streamguard.append('clicks', '{}', key => 'r');
SELECT wait_for($$(SELECT events FROM running WHERE key = 'r') = 2$$);
SELECT count(*), sum(events) FROM running;
SELECT streamguard.drop_pipeline('running');

-- late => 'update': a late event corrects its closed window (a new row with
-- the window's full figures and the next revision) while the window's state
-- is kept, keep_closed behind the watermark; later ones are dropped
CREATE TABLE corrected (window_start timestamptz, window_end timestamptz, key text, revision int,
                        events numeric, total numeric);
SELECT streamguard.create_stream('corr_src', 1);
SELECT streamguard.create_window_pipeline('corr', 'corr_src', 'corrected', '10 s',
  aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}',
  event_time => $$payload->>'ts'$$, late => 'update', keep_closed => '30 s');
SELECT count(*) FROM streamguard.append_batch('corr_src', ARRAY[
  '{"ts": "2026-01-01 00:00:01", "n": 1}', '{"ts": "2026-01-01 00:00:05", "n": 2}',
  '{"ts": "2026-01-01 00:00:12", "n": 4}']::jsonb[], keys => ARRAY['a', 'a', 'a']);
SELECT wait_for($$(SELECT count(*) FROM corrected) = 1$$);
-- late, its window's state kept: a correction
SELECT * FROM streamguard.append('corr_src', '{"ts": "2026-01-01 00:00:07", "n": 8}', key => 'a');
SELECT wait_for($$(SELECT count(*) FROM corrected) = 2$$);
-- the watermark moves to 00:00:50: [00:00:10, 00:00:20) closes, and the state
-- of [00:00:00, 00:00:10) is forgotten (its end is 30 s behind)
SELECT * FROM streamguard.append('corr_src', '{"ts": "2026-01-01 00:00:50", "n": 16}', key => 'a');
SELECT wait_for($$(SELECT count(*) FROM corrected) = 3$$);
-- too late now: dropped and counted; a window closed without state (key b)
-- still within keep_closed gets its first row
SELECT count(*) FROM streamguard.append_batch('corr_src', ARRAY[
  '{"ts": "2026-01-01 00:00:03", "n": 32}', '{"ts": "2026-01-01 00:00:25", "n": 64}']::jsonb[],
  keys => ARRAY['a', 'b']);
SELECT wait_for($$(SELECT late_events FROM streamguard.windows WHERE pipeline = 'corr') = 1$$);
SELECT wait_for($$(SELECT count(*) FROM corrected) = 4$$);
SELECT * FROM corrected ORDER BY window_start, key, revision;
SELECT watermark, keep_closed, open_windows, windows_closed, late_events, corrections
FROM streamguard.windows WHERE pipeline = 'corr';
SELECT window_start, key, closed, revision FROM streamguard.window_state s
JOIN streamguard.pipeline p ON p.id = s.pipeline_id WHERE p.name = 'corr' ORDER BY 1, 2;
SELECT streamguard.drop_pipeline('corr');

-- windows of windows: 10-second windows appended to a stream, as events
-- (key: the window's key, payload: the row as JSON, times in UTC), read by
-- a second window pipeline that sums them per minute of their window_start
SELECT streamguard.create_stream('w_in', 2);
SELECT streamguard.create_stream('w_10s', 1);
CREATE TABLE per_minute (window_start timestamptz, window_end timestamptz, key text, windows numeric, clicks numeric);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'w_in', NULL, '10 s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'w_in', 'per_minute', '10 s', target_stream => 'w_10s')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'w_in', NULL, '10 s', target_stream => 'w_in')$$);
SELECT try($$SELECT streamguard.create_window_pipeline('w', 'w_in', NULL, '10 s', target_stream => 'nowhere')$$);
SELECT streamguard.create_window_pipeline('ten_seconds', 'w_in', NULL, '10 s', target_stream => 'w_10s',
  aggregates => '{"clicks": "count(*)"}', event_time => $$payload->>'ts'$$);
SELECT streamguard.create_window_pipeline('one_minute', 'w_10s', 'per_minute', '1 minute',
  aggregates => '{"windows": "count(*)", "clicks": "sum(payload->>''clicks'')"}',
  event_time => $$payload->>'window_start'$$);
SELECT pipeline, target, target_stream FROM streamguard.windows ORDER BY pipeline;
SELECT count(*) FROM streamguard.append_batch('w_in',
  ARRAY(SELECT jsonb_build_object('ts', timestamptz '2026-01-01 00:00:00+00' + g * interval '3 s') FROM generate_series(0, 39) g),
  keys => ARRAY(SELECT 'k' || (g % 2) FROM generate_series(0, 39) g),
  partitions => ARRAY(SELECT g % 2 FROM generate_series(0, 39) g));
-- 00:00:00 .. 00:01:57: the watermark 00:01:57 (lowest of the two partitions'
-- maxima 00:01:54 and 00:01:57 is 00:01:54) closes the 10-second windows up to
-- 00:01:50; their events close the minute 00:00 downstream
SELECT wait_for($$(SELECT count(*) FROM per_minute) = 2$$);
SELECT * FROM per_minute ORDER BY key;
SELECT key, payload FROM streamguard.read('w_10s', 0, 0, 3) ORDER BY seq;
SELECT streamguard.drop_pipeline('ten_seconds');
SELECT streamguard.drop_pipeline('one_minute');

-- privileges: the owner needs read on the source, INSERT on the target,
-- append on a target stream; its expressions run with its rights only; other
-- roles neither see nor control its windows
CREATE ROLE sg_win_owner;
CREATE ROLE sg_win_other;
CREATE TABLE win_mine (window_start timestamptz, window_end timestamptz, key text, events numeric);
CREATE TABLE win_secret (v int);
INSERT INTO win_secret VALUES (42);
SELECT streamguard.create_stream('priv_src', 1);
SELECT streamguard.create_stream('priv_out', 1);
SET ROLE sg_win_owner;
SELECT try($$SELECT streamguard.create_window_pipeline('pw', 'priv_src', 'win_mine', '10 s')$$);
RESET ROLE;
GRANT INSERT ON win_mine TO sg_win_owner;
SET ROLE sg_win_owner;
SELECT try($$SELECT streamguard.create_window_pipeline('pw', 'priv_src', 'win_mine', '10 s')$$);
RESET ROLE;
SELECT streamguard.grant_stream('priv_src', 'sg_win_owner', 'read');
SET ROLE sg_win_owner;
SELECT try($$SELECT streamguard.create_window_pipeline('pw', 'priv_src', NULL, '10 s', target_stream => 'priv_out')$$);
-- an expression that reads what the owner may not read fails as the owner
SELECT streamguard.create_window_pipeline('pw', 'priv_src', 'win_mine', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$,
  key => '(SELECT v FROM win_secret)');
RESET ROLE;
SET ROLE sg_win_other;
SELECT count(*) AS visible FROM streamguard.windows;
SELECT try($$SELECT streamguard.pause_pipeline('pw')$$);
RESET ROLE;
-- nor through a cheap function of their own in a condition on the view (a leaky view)
CREATE FUNCTION pg_temp.sg_win_leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001
AS $$BEGIN RAISE WARNING 'leaked: %', $1; RETURN true; END$$;
GRANT EXECUTE ON FUNCTION pg_temp.sg_win_leak(text) TO sg_win_other;
SET ROLE sg_win_other;
SET enable_nestloop = off;
SET enable_mergejoin = off;
SELECT count(*) AS visible FROM streamguard.windows WHERE pg_temp.sg_win_leak(pipeline);
SELECT count(*) AS visible FROM streamguard.windows WHERE pg_temp.sg_win_leak(key);
RESET enable_nestloop;
RESET enable_mergejoin;
RESET ROLE;
DROP FUNCTION pg_temp.sg_win_leak(text);
SELECT * FROM streamguard.append('priv_src', '{"ts": "2026-01-01 00:00:01"}');
SELECT wait_for($$(SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'pw') LIKE 'permission denied%'$$);
SELECT last_error FROM streamguard.pipelines WHERE pipeline = 'pw';
SELECT count(*) AS emitted FROM win_mine;
SELECT streamguard.drop_pipeline('pw');
SELECT streamguard.drop_stream('priv_src', force => true);
SELECT streamguard.drop_stream('priv_out', force => true);
REVOKE INSERT ON win_mine FROM sg_win_owner;
DROP TABLE win_mine, win_secret;
DROP ROLE sg_win_owner, sg_win_other;

-- a batch whose partial aggregates (a row per window and key) outgrow
-- work_mem: they are written in parts, and the merge adds the parts of a
-- window up as it would the events (every key comes back 2,000 events
-- later, past many writes).  The windows must equal a recomputation.
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = %L', current_database(), '64kB'); END $$;
SELECT streamguard.create_stream('parts_src', 1);
CREATE TABLE parts_out (window_start timestamptz, window_end timestamptz, key text,
                        events numeric, total numeric, lo numeric, hi numeric, mean numeric);
SELECT count(*) FROM streamguard.append_batch('parts_src',
  (SELECT array_agg(CASE WHEN i % 7 = 0 THEN jsonb_build_object('ts', t)
                         ELSE jsonb_build_object('ts', t, 'n', (i % 100) * 1.5) END ORDER BY i)
   FROM generate_series(0, 5999) i, LATERAL (SELECT timestamptz '2026-01-01 00:00:00+00' + i * interval '1 ms' AS t) x),
  keys => (SELECT array_agg('k' || (i % 2000) ORDER BY i) FROM generate_series(0, 5999) i));
SELECT streamguard.create_window_pipeline('parts', 'parts_src', 'parts_out', '10 s', kind => 'hopping', slide => '5 s',
  aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')", "lo": "min(payload->>''n'')",
                  "hi": "max(payload->>''n'')", "mean": "avg(payload->>''n'')"}',
  event_time => $$payload->>'ts'$$, batch_size => 10000);
SELECT wait_for($$(SELECT events_in FROM streamguard.pipelines WHERE pipeline = 'parts') = 6000$$);
SELECT * FROM streamguard.append('parts_src', '{"ts": "2026-01-01 00:00:30"}', key => 'end');
SELECT wait_for($$(SELECT count(*) FROM parts_out) = 5000$$);
WITH e AS (SELECT key, (payload->>'ts')::timestamptz AS t, (payload->>'n')::numeric AS n
           FROM streamguard.read('parts_src', 0, 0, 10000) WHERE key <> 'end'),
  w AS (SELECT ws FROM generate_series(timestamptz '2025-12-31 23:59:55+00', '2026-01-01 00:00:05+00', '5 s') ws),
  r AS (SELECT w.ws, w.ws + interval '10 s' AS we, e.key, count(*)::numeric AS events, sum(e.n) AS total,
               min(e.n) AS lo, max(e.n) AS hi, round(avg(e.n), 10) AS mean
        FROM w JOIN e ON e.t >= w.ws AND e.t < w.ws + interval '10 s' GROUP BY 1, 2, 3),
  o AS (SELECT window_start, window_end, key, events, total, lo, hi, round(mean, 10) FROM parts_out)
SELECT (SELECT count(*) FROM r) AS recomputed, (SELECT count(*) FROM (SELECT * FROM r EXCEPT ALL SELECT * FROM o) d) AS missing,
       (SELECT count(*) FROM (SELECT * FROM o EXCEPT ALL SELECT * FROM r) d) AS wrong;
SELECT streamguard.drop_pipeline('parts');
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I RESET work_mem', current_database()); END $$;

SELECT streamguard.drop_stream(name, force => true) FROM streamguard.stream
WHERE name IN ('parts_src', 'clicks', 'hop_src', 'sess_src', 'ticks', 'w_in', 'w_10s', 'corr_src', 'idle_src', 'sess2_src', 'grow_src', 'held_src');
DROP TABLE click_counts, hops, sessions, per_second, running, per_minute, corrected, idle_out, sessions2, grow_out,
  held_out, parts_out;
