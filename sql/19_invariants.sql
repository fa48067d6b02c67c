-- the catalog carries its invariants (src/sql/objects.sql): every CHECK,
-- domain and foreign key of the catalog refuses a row that breaks it,
-- whoever writes it (a superuser here, behind the API's back), with its
-- SQLSTATE; the API still answers first with its own messages.
SET client_min_messages = warning;
SELECT streamguard.create_stream('inv', 2, retention => '1 day');
CREATE TABLE inv_sink (n int);
CREATE TABLE inv_win (window_start timestamptz, window_end timestamptz, key text, events numeric);
CREATE TABLE inv_cap (id int PRIMARY KEY, v text);
BEGIN;  -- paused before their workers could start
SELECT streamguard.create_pipeline('inv_p', 'inv', 'INSERT INTO inv_sink SELECT 1 FROM batch');
SELECT streamguard.pause_pipeline('inv_p');
SELECT streamguard.create_window_pipeline('inv_w', 'inv', 'inv_win', '10 s');
SELECT streamguard.pause_pipeline('inv_w');
COMMIT;
SELECT streamguard.capture_table('inv_cap', 'inv', backfill => false);
SELECT count(*) FROM streamguard.poll('inv', 'inv_c', 1);
SELECT id AS sid FROM streamguard.stream WHERE name = 'inv' \gset
SELECT id AS pid FROM streamguard.pipeline WHERE name = 'inv_p' \gset
SELECT id AS wid FROM streamguard.pipeline WHERE name = 'inv_w' \gset

-- a name is what SgCheckName (every entry point) lets through, exactly:
-- 1 to 63 ASCII letters, digits, "_" and "-", first a letter or "_"
CREATE TEMP TABLE names (n int, name text);
-- (names no other file of the suite gives a stream)
INSERT INTO names VALUES (1, ''), (2, 'y'), (3, '_y'), (4, 'Y9'), (5, '9y'), (6, '-y'),
	(7, 'y-b_C9'), (8, 'y b'), (9, 'y.b'), (10, 'y:b'), (11, 'pipeline:y'), (12, 'é'),
	(13, 'yé'), (14, 'y' || repeat('z', 62)), (15, 'y' || repeat('z', 63)), (16, E'y\n'), (17, 'y$');
BEGIN;
SELECT n, left(name, 12) AS name,
	   try(format('SELECT streamguard.create_stream(%L)', name)) AS create_stream,
	   try(format('SELECT %L::streamguard.object_name', name)) AS domain
FROM names ORDER BY n;
ROLLBACK;
-- the same verdict for each: the API refuses (42602, 42622) exactly what the domain does
BEGIN;
SELECT count(*) AS disagreements FROM names
WHERE (try(format('SELECT streamguard.create_stream(%L)', name)) = 'ok')
   <> (try(format('SELECT %L::streamguard.object_name', name)) = 'ok');
ROLLBACK;
-- a consumer's name: such a name, or a pipeline's "pipeline:<name>"
SELECT n, left(name, 12) AS name,
	   try(format('SELECT streamguard.drop_consumer(%L, %L)', 'inv', name)) AS drop_consumer,
	   try(format('SELECT %L::streamguard.consumer_name', name)) AS domain
FROM names ORDER BY n;
SELECT try($$SELECT 'pipeline:'::streamguard.consumer_name$$) AS bare_prefix,
	   try($$SELECT 'pipeline:pipeline:a'::streamguard.consumer_name$$) AS prefix_twice;

-- every rule, broken once: each is refused, with its constraint's name
CREATE TEMP TABLE rules (n serial, rule text, stmt text);
INSERT INTO rules (rule, stmt) VALUES
	('stream name', $$UPDATE streamguard.stream SET name = 'a b' WHERE name = 'inv'$$),
	('stream partitions', $$UPDATE streamguard.stream SET partitions = 0 WHERE name = 'inv'$$),
	('stream retention', $$UPDATE streamguard.stream SET retention = '-1 s' WHERE name = 'inv'$$),
	('stream dedup_window', $$UPDATE streamguard.stream SET dedup_window = '0' WHERE name = 'inv'$$),
	('stream segment_interval', $$UPDATE streamguard.stream SET segment_interval = '0' WHERE name = 'inv'$$),
	('stream segments', $$UPDATE streamguard.stream SET min_seg = current_seg + 1 WHERE name = 'inv'$$),
	('stream segments >= 0', $$UPDATE streamguard.stream SET min_seg = -1, current_seg = -1 WHERE name = 'inv'$$),
	('stream rotation', $$UPDATE streamguard.stream SET retention = NULL WHERE name = 'inv'$$),
	('stream payload_check', $$UPDATE streamguard.stream SET payload_check = 'array' WHERE name = 'inv'$$),
	('stream_partition partition', format($$INSERT INTO streamguard.stream_partition (stream_id, partition) VALUES (%s, -1)$$, :sid)),
	('stream_partition seq_floor', $$UPDATE streamguard.stream_partition SET seq_floor = -1$$),
	('stream_repartition epoch', format($$INSERT INTO streamguard.stream_repartition (stream_id, epoch, old_partitions, new_partitions, switch_seqs) VALUES (%s, 0, 2, 3, '{1,1}')$$, :sid)),
	('stream_repartition old_partitions', format($$INSERT INTO streamguard.stream_repartition (stream_id, epoch, old_partitions, new_partitions, switch_seqs) VALUES (%s, 1, 0, 3, '{}')$$, :sid)),
	('segment seg', format($$INSERT INTO streamguard.segment (stream_id, seg, created_at) VALUES (%s, -1, now())$$, :sid)),
	('consumer name', $$UPDATE streamguard.consumer SET name = 'a b' WHERE name = 'inv_c'$$),
	('consumer partition', $$UPDATE streamguard.consumer SET partition = -1 WHERE name = 'inv_c' AND partition = 0$$),
	('consumer position', $$UPDATE streamguard.consumer SET position = -1 WHERE name = 'inv_c'$$),
	('consumer lost', $$UPDATE streamguard.consumer SET lost = -1 WHERE name = 'inv_c'$$),
	('consumer member empty', $$UPDATE streamguard.consumer SET member = '' WHERE name = 'inv_c'$$),
	('consumer member long', $$UPDATE streamguard.consumer SET member = repeat('m', 129) WHERE name = 'inv_c'$$),
	('append_dedup partition', format($$INSERT INTO streamguard.append_dedup VALUES (%s, 'k', -1, 1, now())$$, :sid)),
	('append_dedup seq', format($$INSERT INTO streamguard.append_dedup VALUES (%s, 'k', 0, 0, now())$$, :sid)),
	('pipeline name', $$UPDATE streamguard.pipeline SET name = 'a.b' WHERE name = 'inv_p'$$),
	('pipeline stream_id', $$UPDATE streamguard.pipeline SET stream_id = 2147483647 WHERE name = 'inv_p'$$),
	('pipeline batch_size', $$UPDATE streamguard.pipeline SET batch_size = 0 WHERE name = 'inv_p'$$),
	('pipeline dedup_window', $$UPDATE streamguard.pipeline SET dedup_window = '0' WHERE name = 'inv_p'$$),
	('pipeline epoch', $$UPDATE streamguard.pipeline SET epoch = 0 WHERE name = 'inv_p'$$),
	('pipeline restarts', $$UPDATE streamguard.pipeline SET restarts = -1 WHERE name = 'inv_p'$$),
	('pipeline batch_timeout', $$UPDATE streamguard.pipeline SET batch_timeout = '0' WHERE name = 'inv_p'$$),
	('pipeline max_attempts', $$UPDATE streamguard.pipeline SET max_attempts = 0 WHERE name = 'inv_p'$$),
	('pipeline retry_backoff', $$UPDATE streamguard.pipeline SET retry_backoff = '-1 ms' WHERE name = 'inv_p'$$),
	('pipeline max_backoff', $$UPDATE streamguard.pipeline SET max_backoff = '0' WHERE name = 'inv_p'$$),
	('pipeline workers', $$UPDATE streamguard.pipeline SET workers = 0 WHERE name = 'inv_p'$$),
	('pipeline generation', $$UPDATE streamguard.pipeline SET generation = 0 WHERE name = 'inv_p'$$),
	('pipeline no source', $$UPDATE streamguard.pipeline SET stream_id = NULL WHERE name = 'inv_p'$$),
	('pipeline two sources', $$UPDATE streamguard.pipeline SET source_server = 'srv', remote_stream = 'x' WHERE name = 'inv_p'$$),
	('pipeline server without stream', $$UPDATE streamguard.pipeline SET stream_id = NULL, source_server = 'srv' WHERE name = 'inv_p'$$),
	('pipeline kafka without server', $$UPDATE streamguard.pipeline SET source_kafka = true WHERE name = 'inv_p'$$),
	('pipeline sink without table', $$UPDATE streamguard.pipeline SET sink_server = 'srv', sink_mode = 'two_phase' WHERE name = 'inv_p'$$),
	('pipeline sink without mode', $$UPDATE streamguard.pipeline SET sink_server = 'srv', sink_table = 't' WHERE name = 'inv_p'$$),
	('pipeline conflict without sink', $$UPDATE streamguard.pipeline SET sink_on_conflict = '{id}' WHERE name = 'inv_p'$$),
	('pipeline conflict empty', $$UPDATE streamguard.pipeline SET sink_server = 'srv', sink_table = 't', sink_mode = 'offsets', sink_on_conflict = '{}' WHERE name = 'inv_p'$$),
	('pipeline_stats pipeline', $$INSERT INTO streamguard.pipeline_stats (pipeline_id) VALUES (2147483647)$$),
	('pipeline_stats one row', format($$INSERT INTO streamguard.pipeline_stats (pipeline_id) VALUES (%s)$$, :pid)),
	('pipeline_stats batches', format($$UPDATE streamguard.pipeline_stats SET batches = -1 WHERE pipeline_id = %s$$, :pid)),
	('pipeline_stats events_in', format($$UPDATE streamguard.pipeline_stats SET events_in = -1 WHERE pipeline_id = %s$$, :pid)),
	('pipeline_stats rows_out', format($$UPDATE streamguard.pipeline_stats SET rows_out = -1 WHERE pipeline_id = %s$$, :pid)),
	('pipeline_stats skipped', format($$UPDATE streamguard.pipeline_stats SET skipped = -1 WHERE pipeline_id = %s$$, :pid)),
	('pipeline_stats dead_letters', format($$UPDATE streamguard.pipeline_stats SET dead_letters = -1 WHERE pipeline_id = %s$$, :pid)),
	('remote_position partition', format($$INSERT INTO streamguard.remote_position (pipeline_id, partition, position) VALUES (%s, -1, 0)$$, :pid)),
	('remote_position position', format($$INSERT INTO streamguard.remote_position (pipeline_id, partition, position) VALUES (%s, 0, -2)$$, :pid)),
	('remote_position lost', format($$INSERT INTO streamguard.remote_position (pipeline_id, partition, position, lost) VALUES (%s, 0, 0, -1)$$, :pid)),
	('pipeline_worker worker', format($$INSERT INTO streamguard.pipeline_worker (pipeline_id, worker, epoch) VALUES (%s, -1, 1)$$, :pid)),
	('pipeline_worker epoch', format($$INSERT INTO streamguard.pipeline_worker (pipeline_id, worker, epoch) VALUES (%s, 5, 0)$$, :pid)),
	('pipeline_skip partition', format($$INSERT INTO streamguard.pipeline_skip (pipeline_id, partition, seq) VALUES (%s, -1, 1)$$, :pid)),
	('pipeline_skip seq', format($$INSERT INTO streamguard.pipeline_skip (pipeline_id, partition, seq) VALUES (%s, 0, 0)$$, :pid)),
	('pipeline_batch batch_id', format($$INSERT INTO streamguard.pipeline_batch VALUES (%s, 0, 1, now(), 0, 0, 0, 0, 0, 0, 0)$$, :pid)),
	('pipeline_batch epoch', format($$INSERT INTO streamguard.pipeline_batch VALUES (%s, 1, 0, now(), 0, 0, 0, 0, 0, 0, 0)$$, :pid)),
	('pipeline_batch events_in', format($$INSERT INTO streamguard.pipeline_batch VALUES (%s, 1, 1, now(), -1, 0, 0, 0, 0, 0, 0)$$, :pid)),
	('pipeline_batch rows_out', format($$INSERT INTO streamguard.pipeline_batch VALUES (%s, 1, 1, now(), 0, -1, 0, 0, 0, 0, 0)$$, :pid)),
	('pipeline_batch partitions', format($$INSERT INTO streamguard.pipeline_batch VALUES (%s, 1, 1, now(), 0, 0, -1, 0, 0, 0, 0)$$, :pid)),
	('dead_letter pipeline', format($$INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, error, sqlstate) VALUES (%s, 'a b', 0, 1, 'e', 'XX000')$$, :pid)),
	('dead_letter partition', format($$INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, error, sqlstate) VALUES (%s, 'inv_p', -1, 1, 'e', 'XX000')$$, :pid)),
	('dead_letter seq', format($$INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, error, sqlstate) VALUES (%s, 'inv_p', 0, -1, 'e', 'XX000')$$, :pid)),
	('capture key_attnums', $$UPDATE streamguard.capture SET key_attnums = '{}'$$),
	('capture operations', $$UPDATE streamguard.capture SET operations = '{}'$$),
	('capture backfill_rows', $$UPDATE streamguard.capture SET backfill_rows = -1$$),
	('capture backfill_skipped', $$UPDATE streamguard.capture SET backfill_skipped = -1$$),
	('capture backfill_total', $$UPDATE streamguard.capture SET backfill_total = -1$$),
	('capture stream', $$UPDATE streamguard.capture SET stream_id = 2147483647$$),
	('window_def size', $$UPDATE streamguard.window_def SET size = '0'$$),
	('window_def slide', $$UPDATE streamguard.window_def SET kind = 'hopping', slide = '0'$$),
	('window_def slide > size', $$UPDATE streamguard.window_def SET kind = 'hopping', slide = size + '1 s'$$),
	('window_def agg_names', $$UPDATE streamguard.window_def SET agg_names = '{}', agg_funcs = '{}'$$),
	('window_def allowed_lateness', $$UPDATE streamguard.window_def SET allowed_lateness = '-1 s'$$),
	('window_def idle_timeout', $$UPDATE streamguard.window_def SET idle_timeout = '-1 s'$$),
	('window_def keep_closed', $$UPDATE streamguard.window_def SET late = 'update', keep_closed = '0'$$),
	('window_def counters', $$UPDATE streamguard.window_def SET late_events = -1$$),
	('window_def target_stream', $$UPDATE streamguard.window_def SET target = NULL, target_stream = 'a b'$$),
	('window_state events', format($$INSERT INTO streamguard.window_state (pipeline_id, window_start, window_end, events, acc) VALUES (%s, now(), now() + '1 s', -1, '{}')$$, :wid)),
	('window_state revision', format($$INSERT INTO streamguard.window_state (pipeline_id, window_start, window_end, events, acc, revision) VALUES (%s, now(), now() + '1 s', 0, '{}', -1)$$, :wid)),
	('window_state window', format($$INSERT INTO streamguard.window_state (pipeline_id, window_start, window_end, events, acc) VALUES (%s, now(), now(), 0, '{}')$$, :wid)),
	('window_partition partition', format($$INSERT INTO streamguard.window_partition VALUES (%s, -1, now(), now())$$, :wid)),
	('kafka_position partition', format($$INSERT INTO streamguard.kafka_position (pipeline_id, partition, next_offset) VALUES (%s, -1, 0)$$, :pid)),
	('kafka_position next_offset', format($$INSERT INTO streamguard.kafka_position (pipeline_id, partition, next_offset) VALUES (%s, 0, -3)$$, :pid));
SELECT n, rule, try(stmt) AS refused FROM rules ORDER BY n;

-- the same rows, one short of breaking a rule: accepted (and rolled back)
BEGIN;
SELECT try($$UPDATE streamguard.stream SET partitions = 1, min_seg = current_seg, retention = NULL,
	segment_interval = NULL, name = repeat('z', 63) WHERE name = 'inv'$$) AS stream,
	   try($$UPDATE streamguard.consumer SET position = 0, lost = 0, member = repeat('m', 128),
	name = 'pipeline:' || repeat('z', 63) WHERE name = 'inv_c'$$) AS consumer,
	   try($$UPDATE streamguard.pipeline SET batch_size = 1, max_attempts = 1, workers = 1,
	retry_backoff = '1 us', max_backoff = '1 us', sink_server = 'srv', sink_table = 't',
	sink_mode = 'offsets', sink_on_conflict = '{id}' WHERE name = 'inv_p'$$) AS pipeline,
	   try($$UPDATE streamguard.window_def SET kind = 'hopping', slide = size, allowed_lateness = '0',
	idle_timeout = '0'$$) AS window_def;
ROLLBACK;

-- a local source's stream cannot go while the pipeline reads it; the API
-- still says so first (2BP01), and drop_stream(force) drops the pipelines
-- first, then the stream
SELECT streamguard.uncapture_table('inv_cap');
SELECT try(format($$DELETE FROM streamguard.stream WHERE id = %s$$, :sid)) AS delete_stream;
SELECT try($$SELECT streamguard.drop_stream('inv')$$) AS drop_stream;
-- the entry points refuse bad values with their own messages, before the
-- constraints see them
SELECT try($$SELECT streamguard.create_stream('a b')$$) AS create_stream,
	   try($$SELECT streamguard.alter_pipeline('inv_p', batch_size => 0)$$) AS batch_size;
SELECT try($$SELECT streamguard.alter_pipeline('inv_p', max_attempts => 0)$$) AS max_attempts;
SELECT try($$SELECT streamguard.alter_pipeline('inv_p', retry_backoff => '0')$$) AS retry_backoff;
SELECT try($$SELECT streamguard.alter_pipeline('inv_p', max_backoff => '-1 s')$$) AS max_backoff;
-- the tables with a row per event, or per window and key, carry no foreign
-- key (a check per row inserted, on the hot path): their rows are deleted
-- explicitly with the pipeline or the stream
SELECT c.conrelid::regclass AS hot_table, c.conname FROM pg_constraint c
WHERE c.contype = 'f' AND (c.conrelid IN ('streamguard.append_dedup'::regclass,
	'streamguard.pipeline_dedup'::regclass, 'streamguard.window_state'::regclass)
	OR c.connamespace = 'streamguard_data'::regnamespace);
INSERT INTO streamguard.window_state (pipeline_id, window_start, window_end, key, events, acc)
	VALUES (:wid, now(), now() + '10 s', 'k', 1, '{1}');
-- a pipeline's counters and window state go with it
SELECT count(*) AS stats_rows FROM streamguard.pipeline_stats WHERE pipeline_id IN (:pid, :wid);
SELECT streamguard.drop_stream('inv', force => true);
SELECT count(*) AS stats_rows_after FROM streamguard.pipeline_stats WHERE pipeline_id IN (:pid, :wid);
SELECT count(*) AS window_state_after FROM streamguard.window_state WHERE pipeline_id = :wid;
SELECT count(*) AS pipelines_after FROM streamguard.pipeline WHERE id IN (:pid, :wid);
DROP TABLE inv_sink, inv_win, inv_cap;
