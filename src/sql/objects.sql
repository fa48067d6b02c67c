-- streamguard 0.3: streams, SQL consumers, pipelines, progress views
\echo Use "CREATE EXTENSION streamguard" to load this file. \quit

-- The objects of a fresh installation: schemas, types, tables with their
-- constraints, functions, triggers.  make builds streamguard--0.3.sql from
-- this file and the parts every update states again in full (views.sql,
-- metrics.sql, privileges.sql, comments.sql, verify.sql); the update from
-- 0.2 is update--0.2--0.3.sql and the same parts (docs/internals.md,
-- "The SQL side").
--
-- The extension itself lives in pg_catalog (streamguard.control), so this
-- script runs with search_path = pg_catalog, pg_temp; it creates its two
-- schemas and refuses ones that exist already: a schema someone else
-- created could hold look-alike functions that the views below would bind
-- to, and its owner would keep owning the extension's objects' schema.
-- Created here, both schemas are members of the extension (DROP EXTENSION
-- removes them) owned by the installing superuser.  Every object below is
-- schema-qualified (docs/security.md, "Install schema").
DO $check$
DECLARE
	nsp record;
BEGIN
	FOR nsp IN
		SELECT n.nspname, pg_catalog.pg_get_userbyid(n.nspowner) AS owner
		FROM pg_catalog.pg_namespace n
		WHERE n.nspname OPERATOR(pg_catalog.=) ANY (ARRAY['streamguard', 'streamguard_data'])
	LOOP
		RAISE EXCEPTION 'schema "%" already exists', nsp.nspname
			USING ERRCODE = 'duplicate_schema',
				  DETAIL = pg_catalog.format('streamguard creates its schemas itself and does not install into one created by someone else (this one is owned by role "%s").', nsp.owner),
				  HINT = pg_catalog.format('Drop or rename schema "%s" (after moving out anything it holds), then run CREATE EXTENSION again.', nsp.nspname);
	END LOOP;
END
$check$;

CREATE SCHEMA streamguard;

-- Storage segments of every stream (tables s<stream id>_<segment>) live
-- here, owned by the extension's installer; nobody else has access.
CREATE SCHEMA streamguard_data;
REVOKE ALL ON SCHEMA streamguard_data FROM PUBLIC;

-- ------------------------------------------------------------------ types

CREATE TYPE streamguard.position AS (partition int, seq bigint);
CREATE TYPE streamguard.event AS (
	partition int,
	seq bigint,
	key text,
	payload jsonb,
	dedup_key text,
	appended_at timestamptz
);

-- The name of a stream or a pipeline: 1 to 63 letters, digits, "_" and
-- "-", starting with a letter or "_" (ASCII only: at most 63 bytes) -- what
-- SgCheckName (src/core/util.c) lets through, which every SQL entry point
-- calls first with its own messages; the domain keeps the catalog to it.
CREATE DOMAIN streamguard.object_name AS text
	CONSTRAINT object_name_check
	CHECK ((VALUE COLLATE pg_catalog."C") ~ '^[A-Za-z_][A-Za-z0-9_-]{0,62}$');
-- A consumer's name: such a name, or a pipeline's consumer "pipeline:<name>"
CREATE DOMAIN streamguard.consumer_name AS text
	CONSTRAINT consumer_name_check
	CHECK ((VALUE COLLATE pg_catalog."C") ~ '^(pipeline:)?[A-Za-z_][A-Za-z0-9_-]{0,62}$');

-- the closed vocabularies
CREATE TYPE streamguard.guarantee AS ENUM ('exactly_once', 'at_least_once', 'at_most_once');
CREATE TYPE streamguard.error_policy AS ENUM ('stop', 'skip', 'dead_letter');
CREATE TYPE streamguard.pipeline_state AS ENUM ('running', 'paused', 'failed');
CREATE TYPE streamguard.sink_mode AS ENUM ('two_phase', 'offsets');
CREATE TYPE streamguard.capture_operation AS ENUM ('insert', 'update', 'delete');
CREATE TYPE streamguard.backfill_state AS ENUM ('none', 'pending', 'running', 'done');
CREATE TYPE streamguard.window_kind AS ENUM ('tumbling', 'hopping', 'session');
CREATE TYPE streamguard.window_emit AS ENUM ('on_close', 'on_update');
CREATE TYPE streamguard.window_late AS ENUM ('drop', 'dead_letter', 'update');
CREATE TYPE streamguard.window_agg AS ENUM ('count', 'sum', 'min', 'max', 'avg');

-- ---------------------------------------------------------------- catalog
--
-- Every table carries what always holds of its rows: closed vocabularies
-- (enum types), names (the domains above), sizes of at least 1, offsets,
-- counts and partitions of at least 0, positive durations, and which
-- columns go together.  The entry points check the same first, with their
-- own messages, and also the bounds of src/core/bounds.h (at most 1,024
-- partitions, a dedup window of at least a second, ...): those are policy,
-- which a later version may move, and which rows made by older versions
-- may exceed; the constraints are not.
--
-- Columns are in the order an updated installation has them (an update
-- adds a column at the end): pg_dump of a fresh and of an updated database
-- must be the same.

CREATE TABLE streamguard.stream (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name streamguard.object_name NOT NULL UNIQUE,
	partitions int NOT NULL CHECK (partitions >= 1),
	owner regrole NOT NULL,
	retention interval CHECK (retention > '0'),
	dedup_window interval NOT NULL CHECK (dedup_window > '0'),
	segment_interval interval CHECK (segment_interval > '0'),
	current_seg int NOT NULL DEFAULT 0,
	min_seg int NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- 'object': append refuses payloads that are not JSON objects
	payload_check text NOT NULL DEFAULT 'any' CHECK (payload_check IN ('any', 'object')),
	-- segments min_seg .. current_seg exist; retention rotates them
	CONSTRAINT stream_segments_check CHECK (min_seg >= 0 AND min_seg <= current_seg),
	CONSTRAINT stream_rotation_check CHECK ((retention IS NULL) = (segment_interval IS NULL))
);

CREATE TABLE streamguard.stream_partition (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	partition int NOT NULL CHECK (partition >= 0),
	seq_floor bigint NOT NULL DEFAULT 0 CHECK (seq_floor >= 0),	-- highest seq dropped by retention
	PRIMARY KEY (stream_id, partition)
);

CREATE TABLE streamguard.stream_repartition (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	epoch int NOT NULL CHECK (epoch >= 1),	-- 1 for the first change of the count, then 2, ...
	old_partitions int NOT NULL CHECK (old_partitions >= 1),
	new_partitions int NOT NULL CHECK (new_partitions > old_partitions),
	switch_seqs bigint[] NOT NULL,			-- per old partition: the last seq of the old mapping
	changed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (stream_id, epoch),
	CHECK (pg_catalog.cardinality(switch_seqs) = old_partitions)
);

CREATE TABLE streamguard.segment (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	seg int NOT NULL CHECK (seg >= 0),
	created_at timestamptz NOT NULL,
	sealed_at timestamptz,					-- when the next segment took over
	seq_bounds bigint[],					-- per partition: every seq here is below it
	PRIMARY KEY (stream_id, seg)
);

CREATE TABLE streamguard.stream_grant (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	grantee regrole NOT NULL,
	can_append boolean NOT NULL,
	can_read boolean NOT NULL,
	-- sees the stream's consumers and group members (lag), reads no event
	can_watch boolean NOT NULL DEFAULT false,
	PRIMARY KEY (stream_id, grantee)
);

-- a position update leaves the key alone, so the foreign key costs nothing
-- on the hot path (nor does the name's domain: only a value written is
-- checked); append_dedup, pipeline_dedup (a row per event) and
-- window_state (a row per window and key) have none and are deleted
-- explicitly (19_invariants.sql keeps it so)
CREATE TABLE streamguard.consumer (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	name streamguard.consumer_name NOT NULL,
	partition int NOT NULL CHECK (partition >= 0),
	position bigint NOT NULL CHECK (position >= 0),	-- last consumed seq
	lost bigint NOT NULL DEFAULT 0 CHECK (lost >= 0),	-- removed by retention unread
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- consumer groups: the member the partition is assigned to (NULL: none).
	-- A member's poll locks the row FOR UPDATE only if it names the member,
	-- and a move locks it FOR UPDATE SKIP LOCKED: a partition never changes
	-- owner under an open transaction that read it (docs/consumer-groups.md)
	member text CHECK (pg_catalog.octet_length(member) BETWEEN 1 AND 128),
	PRIMARY KEY (stream_id, name, partition)
) WITH (fillfactor = 50);

CREATE TABLE streamguard.append_dedup (
	stream_id int NOT NULL,
	dedup_key text NOT NULL,
	partition int NOT NULL CHECK (partition >= 0),
	seq bigint NOT NULL CHECK (seq >= 1),
	appended_at timestamptz NOT NULL,
	PRIMARY KEY (stream_id, dedup_key)
);
CREATE INDEX append_dedup_expiry ON streamguard.append_dedup (stream_id, appended_at);

-- A pipeline's definition and its control state (state, epoch and
-- generation, which control calls raise; restarts, counted with the epoch
-- at a worker's start).  Its source is a local stream (stream_id) or a
-- remote stream or Kafka topic (source_server, remote_stream): the stream's
-- row cannot go while a pipeline reads it, and drop_stream drops the
-- pipelines itself first (they may have remote transactions to settle).
-- What every batch changes is in pipeline_stats.
CREATE TABLE streamguard.pipeline (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name streamguard.object_name NOT NULL UNIQUE,
	stream_id int REFERENCES streamguard.stream (id),
	sql text NOT NULL,
	guarantee streamguard.guarantee NOT NULL,
	batch_size int NOT NULL CHECK (batch_size >= 1),
	error_policy streamguard.error_policy NOT NULL,
	dedup boolean NOT NULL,
	dedup_window interval NOT NULL CHECK (dedup_window > '0'),
	owner regrole NOT NULL,
	search_path text NOT NULL,				-- in force when the SQL was defined
	state streamguard.pipeline_state NOT NULL DEFAULT 'running',
	epoch bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),	-- fencing generation
	started_once boolean NOT NULL DEFAULT false,
	restarts int NOT NULL DEFAULT 0 CHECK (restarts >= 0),
	source_server text,						-- remote source: foreign server name
	remote_stream text,						-- the stream (or topic) on that server
	sink_server text,						-- remote sink: foreign server name
	sink_table text,						-- table (or topic) on that server
	sink_mode streamguard.sink_mode,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	batch_timeout interval NOT NULL DEFAULT '5 min' CHECK (batch_timeout > '0'),	-- bound on each run of the SQL
	allow_source_append boolean NOT NULL DEFAULT false,
	max_attempts int NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),	-- failed attempts before isolation
	retry_backoff interval NOT NULL DEFAULT '100 ms' CHECK (retry_backoff > '0'),	-- first backoff, doubling
	max_backoff interval NOT NULL DEFAULT '5 s' CHECK (max_backoff > '0'),
	workers int NOT NULL DEFAULT 1 CHECK (workers >= 1),	-- workers sharing the partitions
	generation bigint NOT NULL DEFAULT 1 CHECK (generation >= 1),	-- bumped by control calls only
	sink_on_conflict text[],				-- upserting remote sink: ON CONFLICT columns
	-- source_server is a streamguard_kafka server: remote_stream is a topic
	source_kafka boolean NOT NULL DEFAULT false,
	-- one source: a local stream, or a stream or topic on a server
	CONSTRAINT pipeline_source_check CHECK ((stream_id IS NULL) = (source_server IS NOT NULL)
		AND (source_server IS NULL) = (remote_stream IS NULL)
		AND (source_server IS NOT NULL OR NOT source_kafka)),
	-- a remote sink: its server, table (or topic) and mode together
	CONSTRAINT pipeline_sink_check CHECK ((sink_server IS NULL) = (sink_table IS NULL)
		AND (sink_server IS NULL) = (sink_mode IS NULL)
		AND (sink_on_conflict IS NULL OR (sink_server IS NOT NULL
										  AND pg_catalog.cardinality(sink_on_conflict) >= 1)))
) WITH (fillfactor = 50);

-- A pipeline's counters and its last error: written by every batch (and by
-- every failed attempt) in the batch's transaction, a row per pipeline,
-- kept apart from the definition that the batches lock in KEY SHARE mode
CREATE TABLE streamguard.pipeline_stats (
	pipeline_id int PRIMARY KEY REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	batches bigint NOT NULL DEFAULT 0,		-- the last batch's id in the checkpoint log
	events_in bigint NOT NULL DEFAULT 0,
	rows_out bigint NOT NULL DEFAULT 0,
	skipped bigint NOT NULL DEFAULT 0,
	dead_letters bigint NOT NULL DEFAULT 0,
	last_batch_at timestamptz,
	last_error text,
	last_error_at timestamptz,
	CONSTRAINT pipeline_stats_counters_check CHECK (batches >= 0 AND events_in >= 0 AND rows_out >= 0
		AND skipped >= 0 AND dead_letters >= 0)
) WITH (fillfactor = 50);

-- positions of pipelines whose source is a stream on a remote server;
-- -1: the end, settled into a seq at the first batch
CREATE TABLE streamguard.remote_position (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	partition int NOT NULL CHECK (partition >= 0),
	position bigint NOT NULL CHECK (position >= -1),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, partition),
	-- seqs skipped because the remote's retention removed them first
	lost bigint NOT NULL DEFAULT 0 CHECK (lost >= 0)
) WITH (fillfactor = 50);

-- This installation's identity, drawn at CREATE EXTENSION (or at the update
-- to 0.2): a copy of the data directory made before then (same system
-- identifier, same database OIDs) still names its transactions and offsets
-- on shared remote servers differently.  Not dumped: a restored database is
-- another installation.
CREATE TABLE streamguard.installation (
	id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	one boolean PRIMARY KEY DEFAULT true CHECK (one)
);
INSERT INTO streamguard.installation DEFAULT VALUES;

-- one row per worker of a pipeline: the epoch its current incarnation took
-- at start (its batches are fenced on it), and the partitions it owns are
-- those with partition % workers = worker
CREATE TABLE streamguard.pipeline_worker (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	worker int NOT NULL CHECK (worker >= 0),
	epoch bigint NOT NULL CHECK (epoch >= 1),
	started_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, worker)
) WITH (fillfactor = 50);

-- remote transactions PREPAREd by a batch whose local transaction committed
CREATE TABLE streamguard.remote_prepared (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	gid text NOT NULL,
	server text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, gid)
);

-- events a pipeline's owner asked it to pass over (skip_event)
CREATE TABLE streamguard.pipeline_skip (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	partition int NOT NULL CHECK (partition >= 0),
	seq bigint NOT NULL CHECK (seq >= 1),
	requested_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, partition, seq)
);

-- the checkpoint log: one row per committed batch, written in the batch's own
-- transaction, pruned to streamguard.batch_history batches per pipeline
-- (the durations are wall-clock differences: no constraint)
CREATE TABLE streamguard.pipeline_batch (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	batch_id bigint NOT NULL CHECK (batch_id >= 1),
	epoch bigint NOT NULL CHECK (epoch >= 1),
	committed_at timestamptz NOT NULL,
	events_in int NOT NULL CHECK (events_in >= 0),
	rows_out bigint NOT NULL CHECK (rows_out >= 0),
	partitions int NOT NULL CHECK (partitions >= 0),
	first_seq bigint NOT NULL,
	last_seq bigint NOT NULL,
	fetch_ms float8 NOT NULL,
	process_ms float8 NOT NULL,
	PRIMARY KEY (pipeline_id, batch_id)
);

CREATE TABLE streamguard.pipeline_dedup (
	pipeline_id int NOT NULL,
	dedup_key text NOT NULL,
	seen_at timestamptz NOT NULL,
	PRIMARY KEY (pipeline_id, dedup_key)
);

-- seq: the event's, or a Kafka message's offset; sqlstate: also what a
-- remote sink reported
CREATE TABLE streamguard.dead_letter (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	pipeline streamguard.object_name NOT NULL,
	partition int NOT NULL CHECK (partition >= 0),
	seq bigint NOT NULL CHECK (seq >= 0),
	key text,
	payload jsonb,
	dedup_key text,
	appended_at timestamptz,
	error text NOT NULL,
	sqlstate text NOT NULL,
	failed_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX dead_letter_pipeline ON streamguard.dead_letter (pipeline_id, failed_at);

-- Positions of pipelines whose source is a Kafka topic, written in the
-- transaction that commits the batch's effects.  next_offset is the next
-- offset to read; -2 is the beginning of the partition, -1 its end (settled
-- into an offset at the first batch).  high_watermark: the partition's end
-- (last stable offset) as the worker last saw it.
CREATE TABLE streamguard.kafka_position (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	partition int NOT NULL CHECK (partition >= 0),
	next_offset bigint NOT NULL CHECK (next_offset >= -2),
	high_watermark bigint,
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, partition)
) WITH (fillfactor = 50);

-- A table whose changes a trigger appends to a stream (capture_table).  The
-- stream's row cannot go while a capture points at it: the capture's
-- triggers must go too, which a cascade would not do, so drop_stream
-- removes captures itself.
CREATE TABLE streamguard.capture (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	relid regclass NOT NULL,
	stream_id int NOT NULL REFERENCES streamguard.stream (id),
	key_attnums int2[] NOT NULL CHECK (pg_catalog.cardinality(key_attnums) >= 1),
	column_attnums int2[],					-- NULL: every column
	operations streamguard.capture_operation[] NOT NULL CHECK (pg_catalog.cardinality(operations) >= 1),
	owner regrole NOT NULL,					-- the role the events are appended as
	backfill_state streamguard.backfill_state NOT NULL,
	backfill_after text[],					-- key of the last row a committed chunk covered
	backfill_until text[],					-- the last key when the backfill began: its end
	backfill_rows bigint NOT NULL DEFAULT 0 CHECK (backfill_rows >= 0),	-- backfill events appended
	backfill_skipped bigint NOT NULL DEFAULT 0 CHECK (backfill_skipped >= 0),	-- rows whose version a live change sent
	backfill_total bigint CHECK (backfill_total >= 0),	-- the table's estimated rows when it started
	backfill_started_at timestamptz,
	backfill_done_at timestamptz,
	backfill_error text,					-- of the last failed chunk
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- the key's order (type, collation, operator family) the backfill walks
	backfill_key text[],
	UNIQUE (relid, stream_id)
);

-- row versions that live changes wrote while a backfill runs: the backfill
-- skips those whose content an event carried (prev_xid NULL), and for a
-- version that an update changing no captured column wrote, looks at the
-- version it replaced (prev_xid).  Written on the hot path, so no foreign
-- key; deleted explicitly.
CREATE TABLE streamguard.capture_claim (
	capture_id int NOT NULL,
	key_hash bigint NOT NULL,
	xid xid8 NOT NULL,
	prev_xid xid8,
	PRIMARY KEY (capture_id, key_hash, xid)
);

-- windows (docs/windows.md): a window pipeline is a pipeline whose SQL
-- streamguard generates from the window's definition; its state and its
-- emission live here, written in the batch's transaction
CREATE TABLE streamguard.window_def (
	pipeline_id int PRIMARY KEY REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	kind streamguard.window_kind NOT NULL,
	size interval NOT NULL CHECK (size > '0'),	-- tumbling and hopping: length; session: gap
	slide interval,					-- hopping only
	time_expr text,					-- event time over batch; NULL: append time
	key_expr text NOT NULL,
	agg_names text[] NOT NULL CHECK (pg_catalog.cardinality(agg_names) >= 1),
	agg_funcs streamguard.window_agg[] NOT NULL,
	target text,					-- quoted, schema-qualified table, or
	target_stream streamguard.object_name,	-- a stream the windows are appended to
	emit streamguard.window_emit NOT NULL,
	allowed_lateness interval NOT NULL CHECK (allowed_lateness >= '0'),
	idle_timeout interval CHECK (idle_timeout >= '0'),
	late streamguard.window_late NOT NULL,
	keep_closed interval CHECK (keep_closed > '0'),	-- late 'update': how long closed state is kept
	watermark timestamptz,			-- every window ending at or before it is closed
	windows_closed bigint NOT NULL DEFAULT 0,
	late_events bigint NOT NULL DEFAULT 0,
	corrections bigint NOT NULL DEFAULT 0,
	superseded bigint NOT NULL DEFAULT 0,	-- sessions merged into one starting elsewhere
	CHECK ((kind = 'hopping') = (slide IS NOT NULL)),
	CHECK (pg_catalog.cardinality(agg_names) = pg_catalog.cardinality(agg_funcs)),
	CHECK ((target IS NULL) <> (target_stream IS NULL)),
	CHECK ((late = 'update') = (keep_closed IS NOT NULL)),
	CONSTRAINT window_def_slide_check CHECK (slide > '0' AND slide <= size),
	CONSTRAINT window_def_counters_check CHECK (windows_closed >= 0 AND late_events >= 0
		AND corrections >= 0 AND superseded >= 0)
);

-- the partial aggregates of open windows (and, with late 'update', of
-- closed ones within the lateness horizon); acc holds one value per
-- aggregate (avg: its sum, then its count at the end of the array); no
-- foreign key (a check per window and key inserted): the pipeline's drop
-- deletes its rows
CREATE TABLE streamguard.window_state (
	pipeline_id int NOT NULL,
	window_start timestamptz NOT NULL,
	window_end timestamptz NOT NULL,
	key text,
	events bigint NOT NULL CHECK (events >= 0),
	acc numeric[] NOT NULL,
	closed boolean NOT NULL DEFAULT false,
	revision int NOT NULL DEFAULT 0 CHECK (revision >= 0),
	UNIQUE NULLS NOT DISTINCT (pipeline_id, window_start, key),
	CONSTRAINT window_state_window_check CHECK (window_end > window_start)
) WITH (fillfactor = 70);			-- room for HOT updates: a row is updated every batch

-- event time: per source partition, the highest event time seen and when
CREATE TABLE streamguard.window_partition (
	pipeline_id int NOT NULL REFERENCES streamguard.window_def (pipeline_id) ON DELETE CASCADE,
	partition int NOT NULL CHECK (partition >= 0),
	max_event_time timestamptz NOT NULL,
	seen_at timestamptz NOT NULL,
	PRIMARY KEY (pipeline_id, partition)
);

-- the catalog's rows are the user's data: pg_dump dumps them (all but
-- those of installation, pipeline_worker and capture_claim); the id
-- sequences too, or a restored database would hand out used ids
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_partition', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.segment', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_repartition', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_grant', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.consumer', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.append_dedup', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_stats', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_dedup', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_skip', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_batch', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.dead_letter', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.remote_position', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.remote_prepared', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.kafka_position', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.capture', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.window_def', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.window_state', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.window_partition', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.capture_id_seq', '');

-- -------------------------------------------------------------- streams

CREATE FUNCTION streamguard.create_stream(
	name text,
	partitions int DEFAULT 1,
	retention interval DEFAULT NULL,
	dedup_window interval DEFAULT '1 hour',
	segment_interval interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_create_stream'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.drop_stream(name text, force boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_drop_stream'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.alter_stream(
	name text,
	partitions int DEFAULT NULL,
	retention interval DEFAULT NULL,
	dedup_window interval DEFAULT NULL,
	segment_interval interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_alter_stream'
LANGUAGE C VOLATILE;

-- what a stream accepts as payload: 'any' JSON (the default) or only
-- 'object's; owner only, for appends from the change's commit on
CREATE FUNCTION streamguard.set_payload_check(stream text, payload_check text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_set_payload_check'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.grant_stream(stream text, grantee regrole, privilege text DEFAULT 'all')
RETURNS void
AS 'MODULE_PATHNAME', 'sg_grant_stream'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.revoke_stream(stream text, grantee regrole, privilege text DEFAULT 'all')
RETURNS void
AS 'MODULE_PATHNAME', 'sg_revoke_stream'
LANGUAGE C VOLATILE;

-- ------------------------------------------------------------ producing

CREATE FUNCTION streamguard.append(
	stream text,
	payload jsonb,
	key text DEFAULT NULL,
	dedup_key text DEFAULT NULL,
	partition int DEFAULT NULL)
RETURNS streamguard.position
AS 'MODULE_PATHNAME', 'sg_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.append_batch(
	stream text,
	payloads jsonb[],
	keys text[] DEFAULT NULL,
	dedup_keys text[] DEFAULT NULL,
	partitions int[] DEFAULT NULL)
RETURNS SETOF streamguard.position
AS 'MODULE_PATHNAME', 'sg_append_batch'
LANGUAGE C VOLATILE ROWS 1000;

-- ------------------------------------------------------------ consuming

CREATE FUNCTION streamguard.poll(stream text, consumer text, max_events int DEFAULT 100,
	wait interval DEFAULT NULL, member text DEFAULT NULL)
RETURNS SETOF streamguard.event
AS 'MODULE_PATHNAME', 'sg_poll_0_3'
LANGUAGE C VOLATILE ROWS 100;

CREATE FUNCTION streamguard.seek(stream text, consumer text, partition int, seq bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_seek'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.seek(stream text, consumer text, from_time timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_seek_time'
LANGUAGE C VOLATILE;

-- read without a consumer: what a remote pipeline's worker calls
CREATE FUNCTION streamguard.read(stream text, partition int, after_seq bigint, max_events int DEFAULT 1000)
RETURNS SETOF streamguard.event
AS 'MODULE_PATHNAME', 'sg_read'
LANGUAGE C VOLATILE ROWS 1000;

-- where read() starts for events appended at or after a time
CREATE FUNCTION streamguard.seq_at_time(stream text, partition int, at timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'sg_seq_at_time'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.drop_consumer(stream text, consumer text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_drop_consumer'
LANGUAGE C VOLATILE;

-- ------------------------------------------------------------ pipelines

CREATE FUNCTION streamguard.create_pipeline(
	name text,
	source text,
	sql text,
	guarantee text DEFAULT 'exactly_once',
	batch_size int DEFAULT NULL,
	error_policy text DEFAULT 'stop',
	dedup boolean DEFAULT false,
	dedup_window interval DEFAULT '1 hour',
	start_from text DEFAULT 'beginning',
	source_server text DEFAULT NULL,
	sink_server text DEFAULT NULL,
	sink_table text DEFAULT NULL,
	sink_mode text DEFAULT 'two_phase',
	batch_timeout interval DEFAULT '5 min',
	allow_source_append boolean DEFAULT false,
	max_attempts int DEFAULT 3,
	retry_backoff interval DEFAULT '100 ms',
	max_backoff interval DEFAULT '5 s',
	workers int DEFAULT 1,
	sink_on_conflict text[] DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_create_pipeline_0_3'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.pause_pipeline(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_pause_pipeline'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.resume_pipeline(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_resume_pipeline'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.drop_pipeline(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_drop_pipeline'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.reset_pipeline(
	name text,
	seq bigint DEFAULT NULL,
	from_time timestamptz DEFAULT NULL,
	partition int DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_reset_pipeline'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.alter_pipeline(
	name text,
	sql text DEFAULT NULL,
	batch_size int DEFAULT NULL,
	error_policy text DEFAULT NULL,
	batch_timeout interval DEFAULT NULL,
	max_attempts int DEFAULT NULL,
	retry_backoff interval DEFAULT NULL,
	max_backoff interval DEFAULT NULL,
	workers int DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_alter_pipeline_0_3'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.purge_dead_letters(pipeline text, older_than interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'sg_purge_dead_letters'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.redrive_dead_letters(
	pipeline text,
	partition int DEFAULT NULL,
	min_seq bigint DEFAULT NULL,
	max_seq bigint DEFAULT NULL,
	sqlstate text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'sg_redrive_dead_letters'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.skip_event(pipeline text, partition int, seq bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_skip_event'
LANGUAGE C VOLATILE;

-- TEST ONLY: arm a deterministic fault in a pipeline's worker (superuser)
CREATE FUNCTION streamguard.inject_fault(
	pipeline text,
	point text,
	action text DEFAULT 'kill',
	times int DEFAULT 1)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_inject_fault'
LANGUAGE C VOLATILE;

-- ------------------------------------------------------ remote servers

CREATE FUNCTION streamguard.remote_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_remote_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER streamguard_remote VALIDATOR streamguard.remote_validator;

CREATE FUNCTION streamguard.kafka_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_kafka_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER streamguard_kafka VALIDATOR streamguard.kafka_validator;

-- ------------------------------------------------- functions of the views

CREATE FUNCTION streamguard._partition_stats(
	OUT stream_id int, OUT partition int, OUT first_seq bigint, OUT last_seq bigint,
	OUT next_seq bigint, OUT readable_horizon bigint, OUT in_flight int, OUT append_rate float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_partition_stats'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard._next_event_time(stream_id int, partition int, after_seq bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'sg_next_event_time'
LANGUAGE C VOLATILE STRICT;

-- true when the current role may act as `role` (superuser, the role, or a
-- member of it); false, never an error, for a role that no longer exists
CREATE FUNCTION streamguard._is_member(role oid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'sg_is_member'
LANGUAGE C STABLE STRICT;

-- true when the current role may see the stream's consumers: owner, member,
-- a read or watch grant, pg_read_all_stats
CREATE FUNCTION streamguard._can_watch(stream_id int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'sg_can_watch'
LANGUAGE C STABLE STRICT;

-- what shared memory knows of the pipelines' workers and batches
CREATE FUNCTION streamguard._pipeline_runtime(
	OUT pipeline_id int, OUT worker_pid int, OUT events_per_sec float8,
	OUT last_batch_ms float8, OUT last_fetch_ms float8, OUT last_process_ms float8,
	OUT last_commit_ms float8, OUT worker_status text, OUT worker int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_pipeline_runtime'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard._pipeline_batches(
	OUT pipeline_id int, OUT batch_id bigint, OUT epoch bigint, OUT committed_at timestamptz,
	OUT events_in int, OUT rows_out bigint, OUT partitions int, OUT first_seq bigint,
	OUT last_seq bigint, OUT fetch_ms float8, OUT process_ms float8, OUT commit_ms float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_pipeline_batches'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard._remote_runtime(
	OUT pipeline_id int, OUT side text, OUT server text, OUT connected boolean,
	OUT rtt_ms float8, OUT last_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_remote_runtime'
LANGUAGE C VOLATILE;

-- which transactions hold a partition's readable horizon back
CREATE FUNCTION streamguard._open_appends(
	OUT stream_id int, OUT partition int, OUT pid int, OUT first_seq bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_open_appends'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard._pipeline_histogram(
	OUT pipeline_id int, OUT le text, OUT count bigint, OUT sum_seconds float8, OUT total bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_pipeline_histogram'
LANGUAGE C VOLATILE;

-- ------------------------------------------------------- change capture

CREATE FUNCTION streamguard.capture_table(
	tab regclass,
	stream text,
	key_columns text[] DEFAULT NULL,
	operations text[] DEFAULT '{insert,update,delete}',
	columns text[] DEFAULT NULL,
	backfill boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_capture_table'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard.uncapture_table(tab regclass, stream text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_uncapture_table'
LANGUAGE C VOLATILE;

-- one chunk of a backfill in the caller's transaction (READ COMMITTED)
CREATE FUNCTION streamguard.run_backfill_chunk(tab regclass, stream text, max_rows int DEFAULT 1000)
RETURNS int
AS 'MODULE_PATHNAME', 'sg_run_backfill_chunk'
LANGUAGE C VOLATILE;

-- the trigger capture_table installs; only capture_table installs it
CREATE FUNCTION streamguard._capture_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'sg_capture_trigger'
LANGUAGE C;

-- after any DROP: a capture keeps its triggers and its unique key, and goes
-- with its table
CREATE FUNCTION streamguard._capture_sql_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'sg_capture_sql_drop'
LANGUAGE C;

CREATE EVENT TRIGGER streamguard_capture_drop ON sql_drop
	EXECUTE FUNCTION streamguard._capture_sql_drop();
ALTER EVENT TRIGGER streamguard_capture_drop ENABLE ALWAYS;

-- while a backfill is not done: no rewrite of the table (new xmins would
-- make the rows writers sent look unsent), no change of the key's order
-- (the backfill's position is a key in the order it began with)
CREATE FUNCTION streamguard._capture_table_rewrite()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'sg_capture_table_rewrite'
LANGUAGE C;

CREATE FUNCTION streamguard._capture_ddl_end()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'sg_capture_ddl_end'
LANGUAGE C;

CREATE EVENT TRIGGER streamguard_capture_rewrite ON table_rewrite
	EXECUTE FUNCTION streamguard._capture_table_rewrite();
ALTER EVENT TRIGGER streamguard_capture_rewrite ENABLE ALWAYS;
CREATE EVENT TRIGGER streamguard_capture_ddl ON ddl_command_end
	WHEN TAG IN ('ALTER TABLE', 'CREATE INDEX', 'ALTER INDEX', 'DROP INDEX')
	EXECUTE FUNCTION streamguard._capture_ddl_end();
ALTER EVENT TRIGGER streamguard_capture_ddl ENABLE ALWAYS;

-- ------------------------------------------------------ consumer groups

CREATE FUNCTION streamguard.leave_group(stream text, consumer text, member text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'sg_leave_group'
LANGUAGE C VOLATILE;

CREATE FUNCTION streamguard._group_members(
	OUT stream_id int, OUT consumer text, OUT member text, OUT pid int,
	OUT joined_at timestamptz, OUT last_poll_at timestamptz, OUT lease_expires_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_group_members'
LANGUAGE C VOLATILE;

-- background worker slots as a server resource (docs/security.md,
-- "Server-wide resources"): counts per database and per role against the
-- caps; which pipelines hold them shows in each database's pipelines view
CREATE FUNCTION streamguard._worker_slots(
	OUT scope text, OUT name text, OUT pipeline_workers int, OUT backfill_workers int,
	OUT workers int, OUT cap int, OUT reserved int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_worker_slots'
LANGUAGE C VOLATILE;

-- ---------------------------------------------------------------- windows

CREATE FUNCTION streamguard.create_window_pipeline(
	name text,
	source text,
	target text,
	size interval,
	aggregates jsonb DEFAULT '{"events": "count(*)"}',
	kind text DEFAULT 'tumbling',
	slide interval DEFAULT NULL,
	event_time text DEFAULT NULL,
	key text DEFAULT 'key',
	emit text DEFAULT 'on_close',
	allowed_lateness interval DEFAULT '0',
	idle_timeout interval DEFAULT NULL,
	late text DEFAULT 'drop',
	batch_size int DEFAULT 1000,
	error_policy text DEFAULT 'stop',
	start_from text DEFAULT 'beginning',
	target_stream text DEFAULT NULL,
	keep_closed interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_create_window_pipeline'
LANGUAGE C VOLATILE;

-- a window pipeline's SQL is generated from its window, and it runs with one
-- worker: alter_pipeline may not change either
CREATE FUNCTION streamguard._window_pipeline_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF (NEW.sql IS DISTINCT FROM OLD.sql OR NEW.workers > 1)
	   AND EXISTS (SELECT 1 FROM streamguard.window_def w WHERE w.pipeline_id = NEW.id) THEN
		RAISE EXCEPTION 'pipeline "%" is a window pipeline', NEW.name
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = 'Its SQL is generated from its window, and it runs with one worker.',
				  HINT = 'Drop it and create it again with create_window_pipeline.';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER window_pipeline_guard BEFORE UPDATE OF sql, workers ON streamguard.pipeline
FOR EACH ROW EXECUTE FUNCTION streamguard._window_pipeline_guard();

-- an event's window time, checked (runs in the owner's generated SQL)
CREATE FUNCTION streamguard._window_time(timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'sg_window_time'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
