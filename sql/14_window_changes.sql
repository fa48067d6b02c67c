-- windows that change after they were emitted (docs/windows.md): on_update
-- into tables and streams (a changelog), merging sessions that were emitted
-- (retractions), append-time sessions, reset_pipeline refused, and emission errors
-- (bounded retries, then failed).  Event times are fixed UTC times.
SET client_min_messages = warning;
SET timezone = 'UTC';

-- on_update: a window that closes in the batch that changed it gets its last
-- figures too (the upsert runs before the window is closed)
SELECT streamguard.create_stream('upd_src', 1);
CREATE TABLE upd_out (window_start timestamptz, window_end timestamptz, key text, events numeric,
                      PRIMARY KEY (window_start, key));
SELECT streamguard.create_window_pipeline('upd', 'upd_src', 'upd_out', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update');
SELECT count(*) FROM streamguard.append_batch('upd_src', ARRAY[
  '{"ts": "2026-01-01 00:00:01"}', '{"ts": "2026-01-01 00:00:02"}', '{"ts": "2026-01-01 00:00:15"}']::jsonb[],
  keys => ARRAY['a', 'a', 'a']);
SELECT wait_for($$(SELECT windows_closed FROM streamguard.windows WHERE pipeline = 'upd') = 1$$);
SELECT * FROM upd_out ORDER BY window_start, key;
SELECT streamguard.drop_pipeline('upd');

-- on_update and NULL keys (one group): a unique index that treats NULLs as
-- distinct would get a new row at every update, so the target is refused;
-- NULLS NOT DISTINCT (or a NOT NULL key) upserts the NULL key's row
CREATE TABLE upd_null_bad (window_start timestamptz, window_end timestamptz, key text, events numeric,
                           UNIQUE (window_start, key));
SELECT try($q$SELECT streamguard.create_window_pipeline('updn', 'upd_src', 'upd_null_bad', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update')$q$);
SELECT count(*) FROM streamguard.pipelines WHERE pipeline = 'updn';
CREATE TABLE upd_null (window_start timestamptz, window_end timestamptz, key text, events numeric,
                       UNIQUE NULLS NOT DISTINCT (window_start, key));
SELECT streamguard.create_window_pipeline('updn', 'upd_src', 'upd_null', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, key => 'NULL',
  emit => 'on_update', start_from => 'end');
SELECT count(*) FROM streamguard.append_batch('upd_src', ARRAY['{"ts": "2026-01-01 00:01:01"}']::jsonb[]);
SELECT wait_for($$(SELECT sum(events) FROM upd_null) = 1$$);
SELECT count(*) FROM streamguard.append_batch('upd_src', ARRAY['{"ts": "2026-01-01 00:01:02"}']::jsonb[]);
SELECT wait_for($$(SELECT sum(events) FROM upd_null) = 2$$);
SELECT window_start, key IS NULL AS null_key, events FROM upd_null ORDER BY window_start;
SELECT streamguard.drop_pipeline('updn');

-- sessions with on_update: a session's row is upserted by (window_start,
-- key); when sessions merge, the rows of those that started later are
-- deleted, in the same transaction
CREATE TABLE sess_live (window_start timestamptz, window_end timestamptz, key text, events numeric,
                        PRIMARY KEY (window_start, key));
SELECT streamguard.create_stream('live_src', 1);
-- the owner needs DELETE on the target besides INSERT and UPDATE (and SELECT,
-- which ON CONFLICT DO UPDATE needs)
CREATE ROLE sg_live_owner;
GRANT SELECT, INSERT, UPDATE ON sess_live TO sg_live_owner;
SELECT streamguard.grant_stream('live_src', 'sg_live_owner', 'read');
SET ROLE sg_live_owner;
SELECT try($q$SELECT streamguard.create_window_pipeline('live', 'live_src', 'sess_live', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update')$q$);
RESET ROLE;
GRANT DELETE ON sess_live TO sg_live_owner;
SET ROLE sg_live_owner;
SELECT streamguard.create_window_pipeline('live', 'live_src', 'sess_live', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update',
  allowed_lateness => '1 min');
SELECT streamguard.alter_pipeline('live', max_attempts => 2, retry_backoff => '10 ms');
RESET ROLE;
SELECT count(*) FROM streamguard.append_batch('live_src', ARRAY[
  '{"ts": "2026-01-01 00:00:00"}', '{"ts": "2026-01-01 00:00:10"}', '{"ts": "2026-01-01 00:00:01"}']::jsonb[],
  keys => ARRAY['u', 'u', 'v']);
SELECT wait_for($$(SELECT count(*) FROM sess_live) = 3$$);
SELECT * FROM sess_live ORDER BY key, window_start;
-- 00:00:03 and 00:00:07 join [00:00, 00:05) and [00:10, 00:15) into one; the
-- owner lost DELETE meanwhile: the merge cannot be written, the pipeline
-- fails after max_attempts with nothing changed; with DELETE back and the
-- pipeline resumed, the merge is written
REVOKE DELETE ON sess_live FROM sg_live_owner;
SELECT count(*) FROM streamguard.append_batch('live_src', ARRAY[
  '{"ts": "2026-01-01 00:00:03"}', '{"ts": "2026-01-01 00:00:07"}']::jsonb[], keys => ARRAY['u', 'u']);
SELECT wait_for($$(SELECT state FROM streamguard.pipelines WHERE pipeline = 'live') = 'failed'$$);
SELECT state, last_error FROM streamguard.pipelines WHERE pipeline = 'live';
SELECT * FROM sess_live ORDER BY key, window_start;
GRANT DELETE ON sess_live TO sg_live_owner;
SELECT streamguard.resume_pipeline('live');
SELECT wait_for($$(SELECT count(*) FROM sess_live) = 2$$);
SELECT * FROM sess_live ORDER BY key, window_start;
SELECT open_windows, windows_closed, late_events, corrections, superseded FROM streamguard.windows
WHERE pipeline = 'live';
-- once the watermark passes them they close; the rows keep their last figures
SELECT * FROM streamguard.append('live_src', '{"ts": "2026-01-01 00:02:00"}', key => 'w');
SELECT wait_for($$(SELECT windows_closed FROM streamguard.windows WHERE pipeline = 'live') = 2$$);
SELECT * FROM sess_live ORDER BY key, window_start;
SELECT streamguard.drop_pipeline('live');
REVOKE ALL ON sess_live FROM sg_live_owner;
SELECT streamguard.drop_stream('live_src', force => true);
DROP ROLE sg_live_owner;

-- on_update with late => 'update': a late event that merges closed sessions
-- deletes the superseded session's row and updates the merged one in place
CREATE TABLE sess_lu (window_start timestamptz, window_end timestamptz, key text, events numeric,
                      PRIMARY KEY (window_start, key));
SELECT streamguard.create_stream('lu_src', 1);
SELECT streamguard.create_window_pipeline('lu', 'lu_src', 'sess_lu', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update',
  late => 'update', keep_closed => '30 s');
SELECT count(*) FROM streamguard.append_batch('lu_src', ARRAY[
  '{"ts": "2026-01-01 00:00:00"}', '{"ts": "2026-01-01 00:00:08"}', '{"ts": "2026-01-01 00:00:30"}']::jsonb[],
  keys => ARRAY['u', 'u', 'v']);
SELECT wait_for($$(SELECT windows_closed FROM streamguard.windows WHERE pipeline = 'lu') = 2$$);
SELECT * FROM sess_lu ORDER BY key, window_start;
SELECT * FROM streamguard.append('lu_src', '{"ts": "2026-01-01 00:00:04"}', key => 'u');
SELECT wait_for($$(SELECT count(*) FROM sess_lu) = 2$$);
SELECT * FROM sess_lu ORDER BY key, window_start;
SELECT windows_closed, late_events, corrections, superseded FROM streamguard.windows WHERE pipeline = 'lu';
SELECT streamguard.drop_pipeline('lu');
SELECT streamguard.drop_stream('lu_src', force => true);
DROP TABLE sess_lu;

-- sessions with late => 'update': a late event that merges emitted sessions
-- gives the merged session's row with the next revision, and a row marked
-- retracted for each emitted session that starts elsewhere; readers take the
-- highest revision per (window_start, key) and leave out retracted ones
CREATE TABLE sess_corr (window_start timestamptz, window_end timestamptz, key text, revision int,
                        retracted boolean, events numeric, total numeric);
CREATE TABLE sess_no_flag (window_start timestamptz, window_end timestamptz, key text, revision int,
                           events numeric);
SELECT streamguard.create_stream('sc_src', 1);
SELECT try($q$SELECT streamguard.create_window_pipeline('sc', 'sc_src', 'sess_no_flag', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, late => 'update', keep_closed => '30 s')$q$);
SELECT streamguard.create_window_pipeline('sc', 'sc_src', 'sess_corr', '5 s', kind => 'session',
  aggregates => '{"events": "count(*)", "total": "sum(payload->>''n'')"}', event_time => $$payload->>'ts'$$,
  late => 'update', keep_closed => '30 s');
-- watermark 00:00:30: u's sessions [00:00, 00:05) and [00:08, 00:13) close
SELECT count(*) FROM streamguard.append_batch('sc_src', ARRAY[
  '{"ts": "2026-01-01 00:00:00", "n": 1}', '{"ts": "2026-01-01 00:00:08", "n": 2}',
  '{"ts": "2026-01-01 00:00:30", "n": 4}']::jsonb[], keys => ARRAY['u', 'u', 'v']);
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 2$$);
-- late 00:00:04 joins both: [00:00, 00:13) revision 1, [00:08, 00:13) retracted
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:04", "n": 8}', key => 'u');
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 4$$);
-- late 00:00:12 extends it: revision 2, nothing retracted
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:12", "n": 16}', key => 'u');
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 5$$);
-- a late event of a new session within keep_closed: its row, revision 0
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:22", "n": 32}', key => 'w');
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 6$$);
-- w@00:00:29 is on time (open until 00:00:34); the late w@00:00:25 bridges
-- the closed [00:00:22, 00:00:27) and the open one: open, emitted when it
-- closes, with revision 1
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:29", "n": 64}', key => 'w');
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:25", "n": 128}', key => 'w');
-- (both processed: a batch that took 00:00:25 with the next append would merge differently)
SELECT wait_for($$(SELECT open_windows FROM streamguard.windows WHERE pipeline = 'sc') = 2
	AND (SELECT committed_seq FROM streamguard.consumers WHERE stream = 'sc_src' AND consumer = 'pipeline:sc') >= 8$$);
SELECT count(*) FROM sess_corr;
-- the late w@00:00:19 makes that open session start earlier: the row of
-- [00:00:22, 00:00:27) it carries is retracted now; the session [00:00:19,
-- 00:00:34) is emitted when it closes
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:19", "n": 1024}', key => 'w');
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 7$$);
-- watermark 00:01:00: v's and w's sessions close; u's state is forgotten
-- (30 s past its end), so u@00:00:01 is too late: dropped and counted
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:01:00", "n": 256}', key => 'z');
SELECT wait_for($$(SELECT count(*) FROM sess_corr) = 9$$);
SELECT * FROM streamguard.append('sc_src', '{"ts": "2026-01-01 00:00:01", "n": 512}', key => 'u');
SELECT wait_for($$(SELECT late_events FROM streamguard.windows WHERE pipeline = 'sc') = 1$$);
SELECT * FROM sess_corr ORDER BY key, window_start, revision;
SELECT watermark, open_windows, windows_closed, late_events, corrections, superseded
FROM streamguard.windows WHERE pipeline = 'sc';
-- the readers' view equals a recomputation of the sessions from the stream
-- (every event but the last, which was late)
SELECT key, window_start, window_end, events, total FROM (
  SELECT DISTINCT ON (key, window_start) * FROM sess_corr ORDER BY key, window_start, revision DESC) r
WHERE NOT retracted ORDER BY key, window_start;
SELECT key, min(t) AS window_start, max(t) + interval '5 s' AS window_end, count(*) AS events, sum(n) AS total
FROM (SELECT key, t, n, sum(brk) OVER (PARTITION BY key ORDER BY t) AS isl FROM (
        SELECT key, (payload->>'ts')::timestamptz AS t, (payload->>'n')::numeric AS n,
               CASE WHEN (payload->>'ts')::timestamptz < lag((payload->>'ts')::timestamptz)
                      OVER (PARTITION BY key ORDER BY (payload->>'ts')::timestamptz) + interval '5 s'
                    THEN 0 ELSE 1 END AS brk
        FROM streamguard.read('sc_src', 0, 0, 100) WHERE key <> 'z' AND seq < 11) e) s
GROUP BY key, isl ORDER BY key, window_start;
SELECT streamguard.drop_pipeline('sc');

-- on_update with target_stream: a changelog, one event per window the batch
-- changed, with an increasing revision per window; merged sessions give a
-- retracted event for each session that started elsewhere
SELECT streamguard.create_stream('cl_src', 1);
SELECT streamguard.create_stream('cl_out', 1);
SELECT streamguard.create_stream('cls_out', 1);
SELECT streamguard.create_window_pipeline('cl', 'cl_src', NULL, '10 s', aggregates => '{"events": "count(*)"}',
  event_time => $$payload->>'ts'$$, emit => 'on_update', target_stream => 'cl_out');
SELECT streamguard.create_window_pipeline('cls', 'cl_src', NULL, '5 s', kind => 'session',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, emit => 'on_update',
  allowed_lateness => '1 min', target_stream => 'cls_out');
SELECT pipeline, kind, emit, target, target_stream FROM streamguard.windows ORDER BY pipeline;
SELECT count(*) FROM streamguard.append_batch('cl_src', ARRAY[
  '{"ts": "2026-01-01 00:00:00"}', '{"ts": "2026-01-01 00:00:02"}', '{"ts": "2026-01-01 00:00:10"}']::jsonb[],
  keys => ARRAY['a', 'b', 'a']);
SELECT wait_for($$(SELECT count(*) FROM streamguard.read('cls_out', 0, 0, 100)) = 3$$);
SELECT count(*) FROM streamguard.append_batch('cl_src', ARRAY[
  '{"ts": "2026-01-01 00:00:03"}', '{"ts": "2026-01-01 00:00:07"}']::jsonb[], keys => ARRAY['a', 'a']);
SELECT wait_for($$(SELECT count(*) FROM streamguard.read('cls_out', 0, 0, 100)) = 5$$);
-- (the tumbling pipeline's [00:00, 00:10) closed at 00:00:10: 00:00:03 and
-- 00:00:07 are late for it, dropped, and change nothing)
SELECT * FROM streamguard.append('cl_src', '{"ts": "2026-01-01 00:00:15"}', key => 'a');
SELECT wait_for($$(SELECT count(*) FROM streamguard.read('cl_out', 0, 0, 100)) = 4$$);
SELECT wait_for($$(SELECT count(*) FROM streamguard.read('cls_out', 0, 0, 100)) = 6$$);
SELECT seq, key, payload FROM streamguard.read('cl_out', 0, 0, 100) ORDER BY seq;
SELECT late_events FROM streamguard.windows WHERE pipeline = 'cl';
SELECT seq, key, payload FROM streamguard.read('cls_out', 0, 0, 100) ORDER BY seq;
-- a reader's latest figures per window: the highest revision, not retracted
SELECT key, payload->>'window_start' AS window_start, payload->'events' AS events FROM (
  SELECT DISTINCT ON (key, payload->>'window_start') key, payload FROM streamguard.read('cls_out', 0, 0, 100)
  ORDER BY key, payload->>'window_start', (payload->>'revision')::int DESC) l
WHERE NOT (payload->>'retracted')::boolean ORDER BY 1, 2;
SELECT streamguard.drop_pipeline('cl');
SELECT streamguard.drop_pipeline('cls');

-- append-time sessions: a session closes once the readable horizon has
-- passed its last event plus the gap; two bursts 2.5 s apart with a gap of
-- 1 s are two sessions
SELECT streamguard.create_stream('at_src', 2);
CREATE TABLE at_sess (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('at_sess', 'at_src', 'at_sess', '1 s', kind => 'session',
  aggregates => '{"events": "count(*)"}');
SELECT count(*) FROM streamguard.append_batch('at_src', ARRAY['{}', '{}', '{}']::jsonb[],
  keys => ARRAY['k', 'k', 'j'], partitions => ARRAY[0, 1, 1]);
SELECT pg_sleep(2.5);
SELECT count(*) FROM streamguard.append_batch('at_src', ARRAY['{}', '{}']::jsonb[],
  keys => ARRAY['k', 'k'], partitions => ARRAY[1, 0]);
SELECT wait_for($$(SELECT count(*) FROM at_sess) = 3$$);
SELECT key, events, window_end - window_start >= interval '1 s' AS spans_gap FROM at_sess ORDER BY window_start, key;
-- equal to a recomputation from the stream: each session from its first
-- event to its last event plus the gap
SELECT count(*) AS mismatches FROM at_sess a FULL JOIN (
  SELECT key, min(appended_at) AS ws, max(appended_at) + interval '1 s' AS we, count(*) AS n
  FROM (SELECT key, appended_at, sum(brk) OVER (PARTITION BY key ORDER BY appended_at) AS isl FROM (
          SELECT key, appended_at, CASE WHEN appended_at < lag(appended_at) OVER (PARTITION BY key ORDER BY appended_at)
                 + interval '1 s' THEN 0 ELSE 1 END AS brk
          FROM (SELECT * FROM streamguard.read('at_src', 0, 0, 100) UNION ALL
                SELECT * FROM streamguard.read('at_src', 1, 0, 100)) r) e) s GROUP BY key, isl) r
  ON r.key = a.key AND r.ws = a.window_start AND r.we = a.window_end AND r.n = a.events
WHERE a.key IS NULL OR r.key IS NULL;
SELECT late_events FROM streamguard.windows WHERE pipeline = 'at_sess';

-- reset_pipeline is refused for a window pipeline: replayed events would be
-- counted a second time in the windows still open (here [00:00:10, 00:00:20)
-- holds the event at 00:00:15), and be late for the closed ones.  Nothing
-- moved: the next event closes that window with its one event.
SELECT streamguard.drop_pipeline('at_sess');
SELECT streamguard.create_stream('rs_src', 1);
CREATE TABLE rs_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
SELECT streamguard.create_window_pipeline('rs', 'rs_src', 'rs_out', '10 s', aggregates => '{"events": "count(*)"}',
  event_time => $$payload->>'ts'$$);
SELECT count(*) FROM streamguard.append_batch('rs_src', ARRAY[
  '{"ts": "2026-01-01 00:00:01"}', '{"ts": "2026-01-01 00:00:02"}', '{"ts": "2026-01-01 00:00:15"}']::jsonb[],
  keys => ARRAY['a', 'a', 'a']);
SELECT wait_for($$(SELECT count(*) FROM rs_out) = 1$$);
SELECT try($$SELECT streamguard.reset_pipeline('rs')$$);
SELECT try($$SELECT streamguard.reset_pipeline('rs', from_time => '2026-01-01')$$);
SELECT state FROM streamguard.pipelines WHERE pipeline = 'rs';
SELECT * FROM streamguard.append('rs_src', '{"ts": "2026-01-01 00:00:25"}', key => 'a');
SELECT wait_for($$(SELECT count(*) FROM rs_out) = 2$$);
SELECT * FROM rs_out ORDER BY window_start;
SELECT late_events FROM streamguard.windows WHERE pipeline = 'rs';
SELECT streamguard.drop_pipeline('rs');

-- emission errors are the windows', not an event's: the batch is retried
-- max_attempts times, then the pipeline fails with the error (nothing is
-- skipped, whatever the error policy); fixed and resumed, the windows are
-- emitted once
CREATE ROLE sg_emit_owner;
CREATE TABLE emit_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
GRANT INSERT ON emit_out TO sg_emit_owner;
SELECT streamguard.create_stream('emit_src', 1);
SELECT streamguard.grant_stream('emit_src', 'sg_emit_owner', 'read');
SET ROLE sg_emit_owner;
SELECT streamguard.create_window_pipeline('emitter', 'emit_src', 'emit_out', '10 s',
  aggregates => '{"events": "count(*)"}', event_time => $$payload->>'ts'$$, error_policy => 'skip');
SELECT streamguard.alter_pipeline('emitter', max_attempts => 2, retry_backoff => '10 ms');
RESET ROLE;
REVOKE INSERT ON emit_out FROM sg_emit_owner;
SELECT count(*) FROM streamguard.append_batch('emit_src', ARRAY[
  '{"ts": "2026-01-01 00:00:01"}', '{"ts": "2026-01-01 00:00:02"}', '{"ts": "2026-01-01 00:00:11"}']::jsonb[],
  keys => ARRAY['a', 'a', 'a']);
SELECT wait_for($$(SELECT state FROM streamguard.pipelines WHERE pipeline = 'emitter') = 'failed'$$);
SELECT state, last_error FROM streamguard.pipelines WHERE pipeline = 'emitter';
SELECT count(*) AS emitted FROM emit_out;
SELECT watermark, open_windows, windows_closed FROM streamguard.windows WHERE pipeline = 'emitter';
GRANT INSERT ON emit_out TO sg_emit_owner;
SELECT streamguard.resume_pipeline('emitter');
SELECT wait_for($$(SELECT count(*) FROM emit_out) = 1$$);
SELECT * FROM emit_out;
-- the target dropped: the same; created again, the windows go there
SELECT * FROM streamguard.append('emit_src', '{"ts": "2026-01-01 00:00:25"}', key => 'a');
SELECT wait_for($$(SELECT windows_closed FROM streamguard.windows WHERE pipeline = 'emitter') = 2$$);
DROP TABLE emit_out;
SELECT * FROM streamguard.append('emit_src', '{"ts": "2026-01-01 00:00:35"}', key => 'a');
SELECT wait_for($$(SELECT state FROM streamguard.pipelines WHERE pipeline = 'emitter') = 'failed'$$);
SELECT state, last_error FROM streamguard.pipelines WHERE pipeline = 'emitter';
CREATE TABLE emit_out (window_start timestamptz, window_end timestamptz, key text, events numeric);
GRANT INSERT ON emit_out TO sg_emit_owner;
SELECT streamguard.resume_pipeline('emitter');
SELECT wait_for($$(SELECT count(*) FROM emit_out) = 1$$);
SELECT pg_sleep(0.2);
SELECT * FROM emit_out;
SELECT state, windows_closed, skipped FROM streamguard.windows w JOIN streamguard.pipelines p USING (pipeline)
WHERE pipeline = 'emitter';
SELECT streamguard.drop_pipeline('emitter');
REVOKE ALL ON emit_out FROM sg_emit_owner;
SELECT streamguard.drop_stream('emit_src', force => true);
DROP ROLE sg_emit_owner;

SELECT streamguard.drop_stream(name, force => true) FROM streamguard.stream
WHERE name IN ('upd_src', 'sc_src', 'cl_src', 'cl_out', 'cls_out', 'at_src', 'rs_src');
DROP TABLE upd_out, sess_live, sess_corr, sess_no_flag, at_sess, emit_out, rs_out;
