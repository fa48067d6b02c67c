-- streamguard 0.3: streams, SQL consumers, pipelines, progress views
\echo Use "CREATE EXTENSION streamguard" to load this file. \quit

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

CREATE TYPE streamguard.position AS (partition int, seq bigint);
CREATE TYPE streamguard.event AS (
	partition int,
	seq bigint,
	key text,
	payload jsonb,
	dedup_key text,
	appended_at timestamptz
);

-- ---------------------------------------------------------------- catalog

CREATE TABLE streamguard.stream (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name text NOT NULL UNIQUE,
	partitions int NOT NULL,
	owner oid NOT NULL,
	retention interval,
	dedup_window interval NOT NULL,
	segment_interval interval,
	current_seg int NOT NULL DEFAULT 0,
	min_seg int NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- 'object': append refuses payloads that are not JSON objects
	payload_check text NOT NULL DEFAULT 'any' CHECK (payload_check IN ('any', 'object'))
);

CREATE TABLE streamguard.stream_partition (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	partition int NOT NULL,
	seq_floor bigint NOT NULL DEFAULT 0,	-- highest seq dropped by retention
	PRIMARY KEY (stream_id, partition)
);

CREATE TABLE streamguard.stream_repartition (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	epoch int NOT NULL,						-- 1 for the first change of the count, then 2, ...
	old_partitions int NOT NULL,
	new_partitions int NOT NULL CHECK (new_partitions > old_partitions),
	switch_seqs bigint[] NOT NULL,			-- per old partition: the last seq of the old mapping
	changed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (stream_id, epoch),
	CHECK (pg_catalog.cardinality(switch_seqs) = old_partitions)
);

CREATE TABLE streamguard.segment (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	seg int NOT NULL,
	created_at timestamptz NOT NULL,
	sealed_at timestamptz,					-- when the next segment took over
	seq_bounds bigint[],					-- per partition: every seq here is below it
	PRIMARY KEY (stream_id, seg)
);

CREATE TABLE streamguard.stream_grant (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	grantee oid NOT NULL,
	can_append boolean NOT NULL,
	can_read boolean NOT NULL,
	PRIMARY KEY (stream_id, grantee)
);

-- a position update leaves the key alone, so the foreign key costs nothing
-- on the hot path; append_dedup and pipeline_dedup (a row per event) have
-- none and are deleted explicitly
CREATE TABLE streamguard.consumer (
	stream_id int NOT NULL REFERENCES streamguard.stream (id) ON DELETE CASCADE,
	name text NOT NULL,
	partition int NOT NULL,
	position bigint NOT NULL,				-- last consumed seq
	lost bigint NOT NULL DEFAULT 0,			-- removed by retention unread
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- consumer groups: the member the partition is assigned to (NULL: none).
	-- A member's poll locks the row FOR UPDATE only if it names the member,
	-- and a move locks it FOR UPDATE SKIP LOCKED: a partition never changes
	-- owner under an open transaction that read it (docs/consumer-groups.md)
	member text,
	PRIMARY KEY (stream_id, name, partition)
) WITH (fillfactor = 50);

CREATE TABLE streamguard.append_dedup (
	stream_id int NOT NULL,
	dedup_key text NOT NULL,
	partition int NOT NULL,
	seq bigint NOT NULL,
	appended_at timestamptz NOT NULL,
	PRIMARY KEY (stream_id, dedup_key)
);
CREATE INDEX append_dedup_expiry ON streamguard.append_dedup (stream_id, appended_at);

-- the closed vocabularies of a pipeline
CREATE TYPE streamguard.guarantee AS ENUM ('exactly_once', 'at_least_once', 'at_most_once');
CREATE TYPE streamguard.error_policy AS ENUM ('stop', 'skip', 'dead_letter');
CREATE TYPE streamguard.pipeline_state AS ENUM ('running', 'paused', 'failed');
CREATE TYPE streamguard.sink_mode AS ENUM ('two_phase', 'offsets');

CREATE TABLE streamguard.pipeline (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name text NOT NULL UNIQUE,
	stream_id int NOT NULL,
	sql text NOT NULL,
	guarantee streamguard.guarantee NOT NULL,
	batch_size int NOT NULL,
	error_policy streamguard.error_policy NOT NULL,
	dedup boolean NOT NULL,
	dedup_window interval NOT NULL,
	owner oid NOT NULL,
	search_path text NOT NULL,				-- in force when the SQL was defined
	state streamguard.pipeline_state NOT NULL DEFAULT 'running',
	epoch bigint NOT NULL DEFAULT 1,		-- fencing generation
	started_once boolean NOT NULL DEFAULT false,
	restarts int NOT NULL DEFAULT 0,
	batches bigint NOT NULL DEFAULT 0,
	events_in bigint NOT NULL DEFAULT 0,
	rows_out bigint NOT NULL DEFAULT 0,
	skipped bigint NOT NULL DEFAULT 0,
	dead_letters bigint NOT NULL DEFAULT 0,
	last_batch_at timestamptz,
	last_error text,
	last_error_at timestamptz,
	source_server text,						-- remote source: foreign server name
	remote_stream text,						-- the stream on that server
	sink_server text,						-- remote sink: foreign server name
	sink_table text,						-- table on that server
	sink_mode streamguard.sink_mode,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	batch_timeout interval NOT NULL DEFAULT '5 min',	-- bound on each run of the SQL
	allow_source_append boolean NOT NULL DEFAULT false,
	max_attempts int NOT NULL DEFAULT 3,	-- failed attempts before isolation
	retry_backoff interval NOT NULL DEFAULT '100 ms',	-- first backoff, doubling
	max_backoff interval NOT NULL DEFAULT '5 s',
	workers int NOT NULL DEFAULT 1,			-- workers sharing the partitions
	generation bigint NOT NULL DEFAULT 1,	-- bumped by control calls only
	sink_on_conflict text[]					-- upserting remote sink: ON CONFLICT columns
) WITH (fillfactor = 50);

-- positions of pipelines whose source is a stream on a remote server
CREATE TABLE streamguard.remote_position (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	partition int NOT NULL,
	position bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, partition),
	-- seqs skipped because the remote's retention removed them first
	lost bigint NOT NULL DEFAULT 0
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
	worker int NOT NULL,
	epoch bigint NOT NULL,
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
	partition int NOT NULL,
	seq bigint NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (pipeline_id, partition, seq)
);
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_skip', '');

-- the checkpoint log: one row per committed batch, written in the batch's own
-- transaction, pruned to streamguard.batch_history batches per pipeline
CREATE TABLE streamguard.pipeline_batch (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	batch_id bigint NOT NULL,
	epoch bigint NOT NULL,
	committed_at timestamptz NOT NULL,
	events_in int NOT NULL,
	rows_out bigint NOT NULL,
	partitions int NOT NULL,
	first_seq bigint NOT NULL,
	last_seq bigint NOT NULL,
	fetch_ms float8 NOT NULL,
	process_ms float8 NOT NULL,
	PRIMARY KEY (pipeline_id, batch_id)
);
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_batch', '');

CREATE TABLE streamguard.pipeline_dedup (
	pipeline_id int NOT NULL,
	dedup_key text NOT NULL,
	seen_at timestamptz NOT NULL,
	PRIMARY KEY (pipeline_id, dedup_key)
);

CREATE TABLE streamguard.dead_letter (
	pipeline_id int NOT NULL REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	pipeline text NOT NULL,
	partition int NOT NULL,
	seq bigint NOT NULL,
	key text,
	payload jsonb,
	dedup_key text,
	appended_at timestamptz,
	error text NOT NULL,
	sqlstate text NOT NULL,
	failed_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX dead_letter_pipeline ON streamguard.dead_letter (pipeline_id, failed_at);

SELECT pg_catalog.pg_extension_config_dump('streamguard.stream', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_partition', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.segment', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_repartition', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_grant', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.consumer', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.append_dedup', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_dedup', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.dead_letter', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.remote_position', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.remote_prepared', '');
-- the id sequences too, or a restored database would hand out used ids
SELECT pg_catalog.pg_extension_config_dump('streamguard.stream_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_id_seq', '');

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
AS 'MODULE_PATHNAME', 'sg_poll'
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
AS 'MODULE_PATHNAME', 'sg_create_pipeline'
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
AS 'MODULE_PATHNAME', 'sg_alter_pipeline'
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

-- ---------------------------------------------------------------- views

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

-- true when the current role may read the stream (owner, member, grant)
CREATE FUNCTION streamguard._can_read(stream_id int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'sg_can_read'
LANGUAGE C STABLE STRICT;

CREATE VIEW streamguard.stream_partitions AS
SELECT s.name AS stream, p.partition, p.first_seq, p.last_seq,
	   p.readable_horizon, p.next_seq, p.in_flight,
	   sp.seq_floor
FROM streamguard._partition_stats() p
JOIN streamguard.stream s ON s.id = p.stream_id
JOIN streamguard.stream_partition sp ON sp.stream_id = p.stream_id AND sp.partition = p.partition;

CREATE VIEW streamguard.streams AS
SELECT s.name AS stream,
	   s.owner::regrole AS owner,
	   s.partitions,
	   s.retention,
	   s.dedup_window,
	   s.current_seg - s.min_seg + 1 AS segments,
	   coalesce(pg_catalog.sum(p.last_seq - p.first_seq + 1), 0)::bigint AS retained_events,
	   pg_catalog.min(p.first_seq) AS first_seq,
	   pg_catalog.max(p.last_seq) AS last_seq,
	   pg_catalog.min(p.readable_horizon) AS readable_horizon,
	   coalesce(pg_catalog.sum(p.in_flight), 0)::int AS in_flight,
	   coalesce(pg_catalog.max(p.append_rate), 0) AS append_rate,
	   s.created_at,
	   s.payload_check
FROM streamguard.stream s
LEFT JOIN streamguard._partition_stats() p ON p.stream_id = s.id
GROUP BY s.id;

-- changes of a stream's partition count and their switch points (alter_stream)
CREATE VIEW streamguard.stream_repartitions AS
SELECT s.name AS stream,
	   r.epoch,
	   r.old_partitions,
	   r.new_partitions,
	   r.switch_seqs,
	   r.changed_at
FROM streamguard.stream_repartition r
JOIN streamguard.stream s ON s.id = r.stream_id;

-- a consumer's positions are shown to the roles that may read its stream
CREATE VIEW streamguard.consumers WITH (security_barrier) AS
SELECT s.name AS stream,
	   c.name AS consumer,
	   c.partition,
	   c.position AS committed_seq,
	   p.readable_horizon,
	   greatest(coalesce(p.last_seq, 0) - c.position, 0) AS lag_events,
	   coalesce(extract(epoch FROM pg_catalog.now() - streamguard._next_event_time(c.stream_id, c.partition, c.position)), 0)::float8 AS lag_seconds,
	   c.lost AS lost_events,
	   c.updated_at
FROM streamguard.consumer c
JOIN streamguard.stream s ON s.id = c.stream_id
LEFT JOIN streamguard._partition_stats() p
	   ON p.stream_id = c.stream_id AND p.partition = c.partition
WHERE streamguard._can_read(c.stream_id);

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

-- every role sees every pipeline's state and counters; its error text (which
-- can quote the events' values) only the owner, its members and superusers
CREATE VIEW streamguard.pipelines AS
SELECT p.name AS pipeline,
	   coalesce(s.name, p.source_server || ':' || p.remote_stream) AS source,
	   p.sink_server,
	   p.sink_table,
	   p.state::text AS state,
	   p.guarantee::text AS guarantee,
	   p.owner::regrole AS owner,
	   r.worker_pid,
	   p.batch_size,
	   p.error_policy::text AS error_policy,
	   p.batches,
	   p.events_in,
	   p.rows_out,
	   coalesce((SELECT pg_catalog.sum(rw.events_per_sec) FROM streamguard._pipeline_runtime() rw
				 WHERE rw.pipeline_id = p.id), 0) AS events_per_sec,
	   lag.lag_events,
	   lag.lag_seconds,
	   p.last_batch_at,
	   r.last_batch_ms,
	   r.last_fetch_ms,
	   r.last_process_ms,
	   r.last_commit_ms,
	   CASE WHEN streamguard._is_member(p.owner) THEN p.last_error END AS last_error,
	   CASE WHEN streamguard._is_member(p.owner) THEN p.last_error_at END AS last_error_at,
	   p.restarts,
	   p.skipped,
	   p.dead_letters,
	   p.epoch,
	   CASE WHEN p.state = 'running' THEN coalesce(r.worker_status, 'starting') END AS worker_status,
	   p.batch_timeout,
	   p.workers,
	   CASE WHEN p.source_server IS NULL THEN lag.lost_events
			ELSE (SELECT pg_catalog.sum(rp.lost)::bigint FROM streamguard.remote_position rp
				  WHERE rp.pipeline_id = p.id) END AS lost_events
FROM streamguard.pipeline p
LEFT JOIN streamguard.stream s ON s.id = p.stream_id
LEFT JOIN streamguard._pipeline_runtime() r ON r.pipeline_id = p.id AND r.worker = 0
LEFT JOIN LATERAL (
	SELECT pg_catalog.sum(c.lag_events)::bigint AS lag_events, pg_catalog.max(c.lag_seconds) AS lag_seconds,
		   pg_catalog.sum(c.lost_events)::bigint AS lost_events
	FROM streamguard.consumers c
	WHERE c.stream = s.name AND c.consumer = 'pipeline:' || p.name) lag ON true;

-- each worker of each pipeline: the partitions it owns (p % workers =
-- worker), its process, rate, last batch and lag
CREATE VIEW streamguard.pipeline_workers AS
SELECT p.name AS pipeline,
	   w.worker,
	   -- a remote source's partitions are its remote_position rows
	   coalesce((SELECT pg_catalog.array_agg(sp.partition ORDER BY sp.partition) FROM streamguard.stream_partition sp
		WHERE sp.stream_id = p.stream_id AND sp.partition % p.workers = w.worker),
		(SELECT pg_catalog.array_agg(rp.partition ORDER BY rp.partition) FROM streamguard.remote_position rp
		WHERE rp.pipeline_id = p.id AND rp.partition % p.workers = w.worker)) AS partitions,
	   r.worker_pid,
	   pw.epoch,
	   pw.started_at,
	   coalesce(r.events_per_sec, 0) AS events_per_sec,
	   r.last_batch_ms,
	   lag.lag_events,
	   lag.lag_seconds,
	   CASE WHEN p.state = 'running' THEN coalesce(r.worker_status, 'starting') END AS worker_status
FROM streamguard.pipeline p
CROSS JOIN LATERAL pg_catalog.generate_series(0, p.workers - 1) AS w(worker)
LEFT JOIN streamguard.stream s ON s.id = p.stream_id
LEFT JOIN streamguard.pipeline_worker pw ON pw.pipeline_id = p.id AND pw.worker = w.worker
LEFT JOIN streamguard._pipeline_runtime() r ON r.pipeline_id = p.id AND r.worker = w.worker
LEFT JOIN LATERAL (
	SELECT pg_catalog.sum(c.lag_events)::bigint AS lag_events, pg_catalog.max(c.lag_seconds) AS lag_seconds
	FROM streamguard.consumers c
	WHERE c.stream = s.name AND c.consumer = 'pipeline:' || p.name
	  AND c.partition % p.workers = w.worker) lag ON true;

CREATE FUNCTION streamguard._remote_runtime(
	OUT pipeline_id int, OUT side text, OUT server text, OUT connected boolean,
	OUT rtt_ms float8, OUT last_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_remote_runtime'
LANGUAGE C VOLATILE;

CREATE VIEW streamguard.remote_status AS
SELECT p.name AS pipeline,
	   side.side,
	   side.server,
	   coalesce(r.connected, false) AS connected,
	   r.rtt_ms,
	   CASE WHEN streamguard._is_member(p.owner) THEN r.last_error END AS last_error,
	   (SELECT pg_catalog.count(*) FROM streamguard.remote_prepared rp WHERE rp.pipeline_id = p.id) AS prepared_pending
FROM streamguard.pipeline p
CROSS JOIN LATERAL (VALUES ('source', p.source_server), ('sink', p.sink_server)) AS side(side, server)
-- one row per pipeline and side whatever its workers: connected only if every
-- worker is, the slowest round trip, an error of any
LEFT JOIN (SELECT rr.pipeline_id, rr.side, pg_catalog.bool_and(rr.connected) AS connected,
				  pg_catalog.max(rr.rtt_ms) AS rtt_ms, pg_catalog.max(rr.last_error) AS last_error
		   FROM streamguard._remote_runtime() rr GROUP BY rr.pipeline_id, rr.side) r
	ON r.pipeline_id = p.id AND r.side = side.side
WHERE side.server IS NOT NULL;

-- the checkpoint log: for the pipeline's owner, its members and superusers
CREATE VIEW streamguard.pipeline_batches WITH (security_barrier) AS
SELECT p.name AS pipeline, b.batch_id, b.epoch, b.committed_at, b.events_in, b.rows_out,
	   b.partitions, b.first_seq, b.last_seq, b.fetch_ms, b.process_ms, r.commit_ms
FROM streamguard.pipeline_batch b
JOIN streamguard.pipeline p ON p.id = b.pipeline_id
LEFT JOIN streamguard._pipeline_batches() r
	   ON r.pipeline_id = b.pipeline_id AND r.batch_id = b.batch_id
WHERE streamguard._is_member(p.owner);

-- dead letters hold payloads: each role sees those of the pipelines it owns
CREATE VIEW streamguard.dead_letters WITH (security_barrier) AS
SELECT d.pipeline, d.partition, d.seq, d.key, d.payload, d.dedup_key, d.appended_at,
	   d.error, d.sqlstate, d.failed_at
FROM streamguard.dead_letter d
JOIN streamguard.pipeline p ON p.id = d.pipeline_id
WHERE streamguard._is_member(p.owner);

-- which transactions hold a partition's readable horizon back
CREATE FUNCTION streamguard._open_appends(
	OUT stream_id int, OUT partition int, OUT pid int, OUT first_seq bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_open_appends'
LANGUAGE C VOLATILE;

CREATE VIEW streamguard.horizon_holders AS
SELECT s.name AS stream, o.partition, o.pid, o.first_seq,
	   a.xact_start, pg_catalog.now() - a.xact_start AS xact_age, a.state
FROM streamguard._open_appends() o
JOIN streamguard.stream s ON s.id = o.stream_id
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = o.pid;

CREATE FUNCTION streamguard._pipeline_histogram(
	OUT pipeline_id int, OUT le text, OUT count bigint, OUT sum_seconds float8, OUT total bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_pipeline_histogram'
LANGUAGE C VOLATILE;

-- cumulative counts of committed batches by duration, since the server started
CREATE VIEW streamguard.pipeline_batch_durations AS
SELECT p.name AS pipeline, h.le, pg_catalog.sum(h.count)::bigint AS count, pg_catalog.sum(h.sum_seconds) AS sum_seconds,
	   pg_catalog.sum(h.total)::bigint AS total
FROM streamguard._pipeline_histogram() h
JOIN streamguard.pipeline p ON p.id = h.pipeline_id
GROUP BY p.name, h.le;

-- ----------------------------------------------------------- privileges

GRANT USAGE ON SCHEMA streamguard TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA streamguard FROM PUBLIC;
GRANT SELECT ON streamguard.streams, streamguard.stream_partitions, streamguard.consumers,
	streamguard.pipelines, streamguard.pipeline_batches, streamguard.dead_letters,
	streamguard.remote_status, streamguard.horizon_holders, streamguard.pipeline_batch_durations,
	streamguard.pipeline_workers, streamguard.stream_repartitions
	TO PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.inject_fault(text, text, text, int) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) FROM PUBLIC;
-- A view calls functions with its caller's rights, not its owner's: the
-- internal functions the views call stay executable by PUBLIC and filter by
-- themselves (_next_event_time, _pipeline_batches, _remote_runtime,
-- _group_members) or return only what the views show every role
-- (_partition_stats, _pipeline_runtime, _open_appends, _pipeline_histogram,
-- _is_member, _can_read).  The others are revoked.  sql/15_trust.sql lists
-- every function with its decision (docs/security.md, "Function privileges").
REVOKE EXECUTE ON FUNCTION streamguard.remote_validator(text[], oid) FROM PUBLIC;

-- ------------------------------------------------------- change capture

CREATE TYPE streamguard.capture_operation AS ENUM ('insert', 'update', 'delete');
CREATE TYPE streamguard.backfill_state AS ENUM ('none', 'pending', 'running', 'done');

-- A table whose changes a trigger appends to a stream (capture_table).  The
-- stream's row cannot go while a capture points at it: the capture's
-- triggers must go too, which a cascade would not do, so drop_stream
-- removes captures itself.
CREATE TABLE streamguard.capture (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	relid regclass NOT NULL,
	stream_id int NOT NULL REFERENCES streamguard.stream (id),
	key_attnums int2[] NOT NULL,
	column_attnums int2[],					-- NULL: every column
	operations streamguard.capture_operation[] NOT NULL,
	owner oid NOT NULL,						-- the role the events are appended as
	backfill_state streamguard.backfill_state NOT NULL,
	backfill_after text[],					-- key of the last row a committed chunk covered
	backfill_until text[],					-- the last key when the backfill began: its end
	backfill_rows bigint NOT NULL DEFAULT 0,	-- backfill events appended
	backfill_skipped bigint NOT NULL DEFAULT 0,	-- rows whose version a live change sent
	backfill_total bigint,					-- the table's estimated rows when it started
	backfill_started_at timestamptz,
	backfill_done_at timestamptz,
	backfill_error text,					-- of the last failed chunk
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	-- the key's order (type, collation, operator family) the backfill walks
	-- (0.3; last, where the update from 0.2 adds it)
	backfill_key text[],
	UNIQUE (relid, stream_id)
);
SELECT pg_catalog.pg_extension_config_dump('streamguard.capture', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.capture_id_seq', '');

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

-- every role sees every capture (as it sees every table in pg_class); the
-- backfill's position (key values) and its error text only the capture's
-- owner and the table's owner (members of each, superusers): a role that
-- may SELECT the table may still be kept from some rows by a policy
CREATE VIEW streamguard.captures AS
SELECT c.relid AS tab,
	   s.name AS stream,
	   ARRAY(SELECT a.attname FROM pg_catalog.unnest(c.key_attnums) WITH ORDINALITY k(attnum, n)
			 JOIN pg_catalog.pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
			 ORDER BY k.n) AS key_columns,
	   c.operations::text[] AS operations,
	   CASE WHEN c.column_attnums IS NOT NULL THEN
		   ARRAY(SELECT a.attname FROM pg_catalog.unnest(c.column_attnums) WITH ORDINALITY k(attnum, n)
				 JOIN pg_catalog.pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
				 ORDER BY k.n)
	   END AS columns,
	   c.owner::regrole AS owner,
	   c.backfill_state::text AS backfill_state,
	   c.backfill_rows,
	   c.backfill_skipped,
	   c.backfill_total,
	   CASE WHEN c.backfill_state = 'done' THEN 100
			WHEN c.backfill_total > 0 THEN
				least(99.9, pg_catalog.round(100.0 * (c.backfill_rows + c.backfill_skipped) / c.backfill_total, 1))
	   END AS backfill_percent,
	   CASE WHEN streamguard._is_member(c.owner) OR streamguard._is_member(
				(SELECT r.relowner FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.relid))
			THEN c.backfill_after END AS backfill_position,
	   c.backfill_started_at,
	   c.backfill_done_at,
	   CASE WHEN streamguard._is_member(c.owner) OR streamguard._is_member(
				(SELECT r.relowner FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.relid))
			THEN c.backfill_error END AS backfill_error,
	   c.created_at
FROM streamguard.capture c
JOIN streamguard.stream s ON s.id = c.stream_id;

REVOKE ALL ON streamguard.capture, streamguard.capture_claim FROM PUBLIC;
GRANT SELECT ON streamguard.captures TO PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_trigger() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_sql_drop() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_table_rewrite() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_ddl_end() FROM PUBLIC;

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

-- the members of consumer groups on streams the role may read
-- (_group_members filters too)
CREATE VIEW streamguard.consumer_group_members WITH (security_barrier) AS
SELECT s.name AS stream,
	   m.consumer,
	   m.member,
	   coalesce(a.partitions, '{}') AS partitions,
	   m.lease_expires_at,
	   m.last_poll_at,
	   m.joined_at,
	   m.pid,
	   coalesce(a.lag_events, 0)::bigint AS lag_events
FROM streamguard._group_members() m
JOIN streamguard.stream s ON s.id = m.stream_id
LEFT JOIN LATERAL (
	SELECT pg_catalog.array_agg(ga.partition ORDER BY ga.partition) AS partitions,
		   pg_catalog.sum(c.lag_events) AS lag_events
	FROM streamguard.consumer ga
	LEFT JOIN streamguard.consumers c
		   ON c.stream = s.name AND c.consumer = ga.name AND c.partition = ga.partition
	WHERE ga.stream_id = m.stream_id AND ga.name = m.consumer AND ga.member = m.member
) a ON true
WHERE streamguard._can_read(m.stream_id);

GRANT SELECT ON streamguard.consumer_group_members TO PUBLIC;

-- background worker slots as a server resource (docs/security.md,
-- "Server-wide resources"): counts per database and per role against the
-- caps; which pipelines hold them shows in each database's pipelines view
CREATE FUNCTION streamguard._worker_slots(
	OUT scope text, OUT name text, OUT pipeline_workers int, OUT backfill_workers int,
	OUT workers int, OUT cap int, OUT reserved int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_worker_slots'
LANGUAGE C VOLATILE;

CREATE VIEW streamguard.worker_slots AS
SELECT w.scope, w.name, w.pipeline_workers, w.backfill_workers, w.workers, w.cap, w.reserved
FROM streamguard._worker_slots() w;

GRANT SELECT ON streamguard.worker_slots TO PUBLIC;

-- windows (docs/windows.md): a window pipeline is a pipeline whose SQL
-- streamguard generates from the window's definition; its state and its
-- emission live here, written in the batch's transaction
CREATE TYPE streamguard.window_kind AS ENUM ('tumbling', 'hopping', 'session');
CREATE TYPE streamguard.window_emit AS ENUM ('on_close', 'on_update');
CREATE TYPE streamguard.window_late AS ENUM ('drop', 'dead_letter', 'update');
CREATE TYPE streamguard.window_agg AS ENUM ('count', 'sum', 'min', 'max', 'avg');

CREATE TABLE streamguard.window_def (
	pipeline_id int PRIMARY KEY REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	kind streamguard.window_kind NOT NULL,
	size interval NOT NULL,			-- tumbling and hopping: length; session: gap
	slide interval,					-- hopping only
	time_expr text,					-- event time over batch; NULL: append time
	key_expr text NOT NULL,
	agg_names text[] NOT NULL,
	agg_funcs streamguard.window_agg[] NOT NULL,
	target text,					-- quoted, schema-qualified table, or
	target_stream text,				-- a stream the windows are appended to
	emit streamguard.window_emit NOT NULL,
	allowed_lateness interval NOT NULL,
	idle_timeout interval,
	late streamguard.window_late NOT NULL,
	keep_closed interval,			-- late 'update': how long closed state is kept
	watermark timestamptz,			-- every window ending at or before it is closed
	windows_closed bigint NOT NULL DEFAULT 0,
	late_events bigint NOT NULL DEFAULT 0,
	corrections bigint NOT NULL DEFAULT 0,
	superseded bigint NOT NULL DEFAULT 0,	-- sessions merged into one starting elsewhere
	CHECK ((kind = 'hopping') = (slide IS NOT NULL)),
	CHECK (pg_catalog.cardinality(agg_names) = pg_catalog.cardinality(agg_funcs)),
	CHECK ((target IS NULL) <> (target_stream IS NULL)),
	CHECK ((late = 'update') = (keep_closed IS NOT NULL))
);

-- the partial aggregates of open windows (and, with late 'update', of
-- closed ones within the lateness horizon); acc holds one value per
-- aggregate (avg: its sum, then its count at the end of the array)
CREATE TABLE streamguard.window_state (
	pipeline_id int NOT NULL REFERENCES streamguard.window_def (pipeline_id) ON DELETE CASCADE,
	window_start timestamptz NOT NULL,
	window_end timestamptz NOT NULL,
	key text,
	events bigint NOT NULL,
	acc numeric[] NOT NULL,
	closed boolean NOT NULL DEFAULT false,
	revision int NOT NULL DEFAULT 0,
	UNIQUE NULLS NOT DISTINCT (pipeline_id, window_start, key)
) WITH (fillfactor = 70);			-- room for HOT updates: a row is updated every batch

-- event time: per source partition, the highest event time seen and when
CREATE TABLE streamguard.window_partition (
	pipeline_id int NOT NULL REFERENCES streamguard.window_def (pipeline_id) ON DELETE CASCADE,
	partition int NOT NULL,
	max_event_time timestamptz NOT NULL,
	seen_at timestamptz NOT NULL,
	PRIMARY KEY (pipeline_id, partition)
);

SELECT pg_catalog.pg_extension_config_dump('streamguard.window_def', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.window_state', '');
SELECT pg_catalog.pg_extension_config_dump('streamguard.window_partition', '');

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
REVOKE EXECUTE ON FUNCTION streamguard._window_pipeline_guard() FROM PUBLIC;

-- an event's window time, checked (runs in the owner's generated SQL)
CREATE FUNCTION streamguard._window_time(timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'sg_window_time'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE VIEW streamguard.windows WITH (security_barrier) AS
SELECT p.name AS pipeline,
	   w.kind::text AS kind,
	   w.size,
	   w.slide,
	   w.time_expr AS event_time,
	   w.key_expr AS key,
	   w.target,
	   w.target_stream,
	   w.emit::text AS emit,
	   w.allowed_lateness,
	   w.idle_timeout,
	   w.late::text AS late,
	   w.keep_closed,
	   w.watermark,
	   (SELECT pg_catalog.count(*) FROM streamguard.window_state s
		WHERE s.pipeline_id = w.pipeline_id AND NOT s.closed) AS open_windows,
	   w.windows_closed,
	   w.late_events,
	   w.corrections,
	   w.superseded
FROM streamguard.window_def w
JOIN streamguard.pipeline p ON p.id = w.pipeline_id
WHERE streamguard._is_member(p.owner);

REVOKE ALL ON streamguard.window_def, streamguard.window_state, streamguard.window_partition FROM PUBLIC;
GRANT SELECT ON streamguard.windows TO PUBLIC;
-- ---------------------------------------------------------------- Kafka

-- A pipeline whose source_server is a streamguard_kafka server reads the
-- topic named by remote_stream.
ALTER TABLE streamguard.pipeline ADD COLUMN source_kafka boolean NOT NULL DEFAULT false;

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
SELECT pg_catalog.pg_extension_config_dump('streamguard.kafka_position', '');

CREATE FUNCTION streamguard.kafka_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_kafka_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER streamguard_kafka VALIDATOR streamguard.kafka_validator;
REVOKE EXECUTE ON FUNCTION streamguard.kafka_validator(text[], oid) FROM PUBLIC;

-- Kafka lag per partition: for the pipeline's owner, its members and
-- superusers.
CREATE VIEW streamguard.kafka_lag WITH (security_barrier) AS
SELECT p.name AS pipeline,
	   p.source_server AS server,
	   p.remote_stream AS topic,
	   k.partition,
	   CASE WHEN k.next_offset >= 0 THEN k.next_offset END AS next_offset,
	   k.high_watermark,
	   CASE WHEN k.next_offset >= 0 AND k.high_watermark IS NOT NULL
			THEN greatest(k.high_watermark - k.next_offset, 0) END AS lag,
	   k.updated_at
FROM streamguard.kafka_position k
JOIN streamguard.pipeline p ON p.id = k.pipeline_id
WHERE streamguard._is_member(p.owner);

REVOKE ALL ON streamguard.kafka_position FROM PUBLIC;
GRANT SELECT ON streamguard.kafka_lag TO PUBLIC;

-- the numbers of the views in the Prometheus text exposition format; each
-- role gets what the views show it (last: it reads every view above)
CREATE FUNCTION streamguard.metrics()
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $metrics$
WITH m(name, type, help) AS (VALUES
	('streamguard_stream_partitions', 'gauge', 'Partitions of the stream.'),
	('streamguard_stream_retained_events', 'gauge', 'Events retained (upper bound: aborted appends leave gaps).'),
	('streamguard_stream_append_rate', 'gauge', 'Committed appends per second over the last 10 seconds (0 when idle).'),
	('streamguard_stream_appended_events_total', 'counter', 'Seqs below the readable horizons of the stream''s partitions: events appended and committed, plus the gaps of aborted appends.'),
	('streamguard_stream_in_flight', 'gauge', 'Appends not yet committed or aborted.'),
	('streamguard_partition_last_seq', 'gauge', 'Highest retained seq of the partition.'),
	('streamguard_partition_horizon_lag', 'gauge', 'Seqs handed out but not yet readable (next_seq - readable_horizon).'),
	('streamguard_horizon_holder_age_seconds', 'gauge', 'Age of the transaction of an open append that holds a partition back.'),
	('streamguard_consumer_lag_events', 'gauge', 'Events after the consumer''s position (upper bound).'),
	('streamguard_consumer_lag_seconds', 'gauge', 'Age of the oldest event the consumer has not read.'),
	('streamguard_consumer_lost_events_total', 'counter', 'Events removed by retention before the consumer read them.'),
	('streamguard_consumer_consumed_events_total', 'counter', 'Seqs up to the consumer''s committed position (events read, with the gaps of aborted appends; a seek back starts it over).'),
	('streamguard_consumer_retention_margin_seconds', 'gauge', 'Time left before retention removes the oldest unread event.'),
	('streamguard_pipeline_info', 'gauge', 'Pipeline definition and state (value 1).'),
	('streamguard_pipeline_worker_up', 'gauge', '1 when a running pipeline has its worker, else 0.'),
	('streamguard_pipeline_failed', 'gauge', '1 when the pipeline stopped on an error (state failed), else 0.'),
	('streamguard_pipeline_batches_total', 'counter', 'Committed batches.'),
	('streamguard_pipeline_events_in_total', 'counter', 'Events consumed.'),
	('streamguard_pipeline_rows_out_total', 'counter', 'Rows written by the pipeline''s SQL.'),
	('streamguard_pipeline_skipped_total', 'counter', 'Events skipped by the error policy or skip_event.'),
	('streamguard_pipeline_dead_letters_total', 'counter', 'Events stored as dead letters.'),
	('streamguard_pipeline_restarts_total', 'counter', 'Unplanned worker restarts (not the first start after a clean server shutdown).'),
	('streamguard_pipeline_lag_events', 'gauge', 'Events not yet consumed.'),
	('streamguard_pipeline_lag_seconds', 'gauge', 'Age of the oldest event not yet consumed.'),
	('streamguard_pipeline_events_per_second', 'gauge', 'Consumption rate (moving average over about 5 seconds, 0 when idle).'),
	('streamguard_pipeline_batch_duration_seconds', 'histogram', 'Duration of committed batches, fetch to commit.'),
	('streamguard_remote_connected', 'gauge', '1 when the worker is connected to the remote server.'),
	('streamguard_remote_prepared_pending', 'gauge', 'Prepared remote transactions not yet settled.'),
	('streamguard_group_member_partitions', 'gauge', 'Partitions assigned to the consumer group member.'),
	('streamguard_group_member_lag_events', 'gauge', 'Events after the positions of the member''s partitions (upper bound).'),
	('streamguard_group_member_lease_remaining_seconds', 'gauge', 'Time left on the member''s lease (0: expired).'),
	('streamguard_window_watermark_timestamp_seconds', 'gauge', 'Watermark of the window pipeline (Unix time).'),
	('streamguard_window_open', 'gauge', 'Windows of the pipeline not yet closed.'),
	('streamguard_window_closed_total', 'counter', 'Windows closed and emitted.'),
	('streamguard_window_late_events_total', 'counter', 'Events that came after their window closed.'),
	('streamguard_window_corrections_total', 'counter', 'Correction rows emitted for closed windows (late => update).'),
	('streamguard_window_superseded_total', 'counter', 'Emitted sessions merged into a session that starts earlier (retracted, or their rows deleted).'),
	('streamguard_kafka_lag_messages', 'gauge', 'Messages of the Kafka partition after the pipeline''s stored offset.')
),
-- group members: consumer and member names may hold any character, escaped for a label
g AS (
	SELECT format('stream="%s",consumer="%s",member="%s"', stream,
		replace(replace(replace(consumer, '\', '\\'), '"', '\"'), E'\n', '\n'),
		replace(replace(replace(member, '\', '\\'), '"', '\"'), E'\n', '\n')) AS labels,
		partitions, lag_events, lease_expires_at
	FROM streamguard.consumer_group_members
),
s(name, labels, value) AS (
	SELECT 'streamguard_stream_partitions', format('stream="%s"', stream), partitions::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_retained_events', format('stream="%s"', stream), retained_events::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_append_rate', format('stream="%s"', stream), append_rate::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_in_flight', format('stream="%s"', stream), in_flight::text
	FROM streamguard.streams
	UNION ALL SELECT 'streamguard_stream_appended_events_total', format('stream="%s"', stream),
		sum(greatest(readable_horizon - 1, 0))::text
	FROM streamguard.stream_partitions WHERE readable_horizon IS NOT NULL GROUP BY stream
	UNION ALL SELECT 'streamguard_partition_last_seq', format('stream="%s",partition="%s"', stream, partition),
		coalesce(last_seq, 0)::text
	FROM streamguard.stream_partitions
	UNION ALL SELECT 'streamguard_partition_horizon_lag', format('stream="%s",partition="%s"', stream, partition),
		(next_seq - readable_horizon)::text
	FROM streamguard.stream_partitions WHERE readable_horizon IS NOT NULL
	UNION ALL SELECT 'streamguard_horizon_holder_age_seconds',
		format('stream="%s",partition="%s",pid="%s"', stream, partition, pid),
		coalesce(extract(epoch FROM xact_age), 0)::text
	FROM streamguard.horizon_holders
	UNION ALL SELECT 'streamguard_consumer_lag_events',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lag_events::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_lag_seconds',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lag_seconds::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_consumed_events_total',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition),
		greatest(committed_seq, 0)::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_lost_events_total',
		format('stream="%s",consumer="%s",partition="%s"', stream, consumer, partition), lost_events::text
	FROM streamguard.consumers
	UNION ALL SELECT 'streamguard_consumer_retention_margin_seconds',
		format('stream="%s",consumer="%s",partition="%s"', c.stream, c.consumer, c.partition),
		greatest(extract(epoch FROM st.retention) - c.lag_seconds, 0)::text
	FROM streamguard.consumers c JOIN streamguard.streams st ON st.stream = c.stream
	WHERE st.retention IS NOT NULL AND c.lag_events > 0
	UNION ALL SELECT 'streamguard_pipeline_info',
		format('pipeline="%s",source="%s",guarantee="%s",state="%s"', pipeline,
			replace(replace(source, '\', '\\'), '"', '\"'), guarantee, state), '1'
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_worker_up', format('pipeline="%s"', pipeline),
		(worker_pid IS NOT NULL)::int::text
	FROM streamguard.pipelines WHERE state = 'running'
	UNION ALL SELECT 'streamguard_pipeline_failed', format('pipeline="%s"', pipeline),
		(state = 'failed')::int::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_batches_total', format('pipeline="%s"', pipeline), batches::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_events_in_total', format('pipeline="%s"', pipeline), events_in::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_rows_out_total', format('pipeline="%s"', pipeline), rows_out::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_skipped_total', format('pipeline="%s"', pipeline), skipped::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_dead_letters_total', format('pipeline="%s"', pipeline), dead_letters::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_restarts_total', format('pipeline="%s"', pipeline), restarts::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_lag_events', format('pipeline="%s"', pipeline), lag_events::text
	FROM streamguard.pipelines WHERE lag_events IS NOT NULL
	UNION ALL SELECT 'streamguard_pipeline_lag_seconds', format('pipeline="%s"', pipeline), lag_seconds::text
	FROM streamguard.pipelines WHERE lag_seconds IS NOT NULL
	UNION ALL SELECT 'streamguard_pipeline_events_per_second', format('pipeline="%s"', pipeline),
		events_per_sec::text
	FROM streamguard.pipelines
	UNION ALL SELECT 'streamguard_pipeline_batch_duration_seconds_bucket',
		format('pipeline="%s",le="%s"', pipeline, le), count::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT DISTINCT 'streamguard_pipeline_batch_duration_seconds_sum', format('pipeline="%s"', pipeline),
		sum_seconds::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT DISTINCT 'streamguard_pipeline_batch_duration_seconds_count', format('pipeline="%s"', pipeline),
		total::text
	FROM streamguard.pipeline_batch_durations
	UNION ALL SELECT 'streamguard_remote_connected',
		format('pipeline="%s",side="%s",foreign_server="%s"', pipeline, side,
			replace(replace(server, '\', '\\'), '"', '\"')), connected::int::text
	FROM streamguard.remote_status
	UNION ALL SELECT 'streamguard_remote_prepared_pending',
		format('pipeline="%s",foreign_server="%s"', pipeline, replace(replace(server, '\', '\\'), '"', '\"')),
		prepared_pending::text
	FROM streamguard.remote_status WHERE side = 'sink'
	UNION ALL SELECT 'streamguard_group_member_partitions',
		labels, cardinality(partitions)::text
	FROM g
	UNION ALL SELECT 'streamguard_group_member_lag_events', labels, lag_events::text
	FROM g
	UNION ALL SELECT 'streamguard_group_member_lease_remaining_seconds',
		labels,
		greatest(extract(epoch FROM lease_expires_at - now()), 0)::text
	FROM g
	UNION ALL SELECT 'streamguard_window_watermark_timestamp_seconds', format('pipeline="%s"', pipeline),
		extract(epoch FROM watermark)::text
	FROM streamguard.windows WHERE watermark IS NOT NULL
	UNION ALL SELECT 'streamguard_window_open', format('pipeline="%s"', pipeline), open_windows::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_closed_total', format('pipeline="%s"', pipeline), windows_closed::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_late_events_total', format('pipeline="%s"', pipeline), late_events::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_corrections_total', format('pipeline="%s"', pipeline), corrections::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_window_superseded_total', format('pipeline="%s"', pipeline), superseded::text
	FROM streamguard.windows
	UNION ALL SELECT 'streamguard_kafka_lag_messages',
		format('pipeline="%s",topic="%s",partition="%s"', pipeline, replace(replace(replace(topic, '\', '\\'), '"', '\"'), E'\n', '\n'), partition), lag::text
	FROM streamguard.kafka_lag WHERE lag IS NOT NULL
)
-- Prometheus text: HELP then TYPE, each series with the database first;
-- a series after another by its labels; a histogram's buckets by le,
-- ascending, +Inf last (le is the last label), then _count and _sum
SELECT string_agg(block, '' ORDER BY name)
FROM (
	SELECT m.name,
		format(E'# HELP %s %s\n# TYPE %s %s\n', m.name, m.help, m.name, m.type)
		|| coalesce(string_agg(format(E'%s{database="%s",%s} %s\n', s.name, db.label, s.labels, s.value), ''
			ORDER BY regexp_replace(s.labels, ',le="[^"]*"$', ''), s.name,
				CASE WHEN s.labels ~ ',le="[^"]*"$'
					 THEN substring(s.labels FROM ',le="([^"]*)"$')::float8 END)
			FILTER (WHERE s.name IS NOT NULL), '') AS block
	FROM m LEFT JOIN s ON s.name = m.name OR s.name LIKE m.name || '\_%'
		AND m.type = 'histogram'
	CROSS JOIN (SELECT replace(replace(replace(current_database(), '\', '\\'), '"', '\"'), E'\n', '\n')
				AS label) db
	GROUP BY m.name, m.type, m.help
) blocks
$metrics$;

-- ------------------------------------------------------------ comments
-- what \df+, \dv+ and \dt+ show for each object of the extension; the
-- reference is docs/sql-reference.md (sql/18_comments.sql checks that no
-- function, view or table is without one)
COMMENT ON FUNCTION streamguard.create_stream(text, integer, interval, interval, interval) IS
	'Creates a stream: a partitioned, ordered, retained log of jsonb events.';
COMMENT ON FUNCTION streamguard.set_payload_check(text, text) IS
	'Makes a stream take only JSON objects as payloads (''object'') or any JSON value (''any'', the default).';
COMMENT ON FUNCTION streamguard.alter_stream(text, integer, interval, interval, interval) IS
	'Changes a stream''s partition count (more only), retention, dedup window or segment interval.';
COMMENT ON FUNCTION streamguard.drop_stream(text, boolean) IS
	'Drops a stream and its events; force => true also drops its pipelines, consumers and captures.';
COMMENT ON FUNCTION streamguard.append(text, jsonb, text, text, integer) IS
	'Appends one event in the caller''s transaction; returns its partition and seq.';
COMMENT ON FUNCTION streamguard.append_batch(text, jsonb[], text[], text[], integer[]) IS
	'Appends many events in the caller''s transaction; returns each one''s partition and seq.';
COMMENT ON FUNCTION streamguard.poll(text, text, integer, interval, text) IS
	'Reads a consumer''s next events and moves its position in the caller''s transaction.';
COMMENT ON FUNCTION streamguard.read(text, integer, bigint, integer) IS
	'Reads a partition''s events after a seq, below the readable horizon, moving no position.';
COMMENT ON FUNCTION streamguard.seek(text, text, integer, bigint) IS
	'Sets a consumer''s position in one partition to a seq.';
COMMENT ON FUNCTION streamguard.seek(text, text, timestamp with time zone) IS
	'Sets a consumer''s positions to the first events appended at or after a time.';
COMMENT ON FUNCTION streamguard.seq_at_time(text, integer, timestamp with time zone) IS
	'The first seq of a partition appended at or after a time.';
COMMENT ON FUNCTION streamguard.drop_consumer(text, text) IS
	'Drops a consumer of a stream and its positions.';
COMMENT ON FUNCTION streamguard.leave_group(text, text, text) IS
	'Removes a member from a consumer group; its partitions go to the other members.';
COMMENT ON FUNCTION streamguard.grant_stream(text, regrole, text) IS
	'Lets a role append to or read a stream (privilege ''append'', ''read'' or ''all'').';
COMMENT ON FUNCTION streamguard.revoke_stream(text, regrole, text) IS
	'Takes back a privilege on a stream given by grant_stream.';
COMMENT ON FUNCTION streamguard.create_pipeline(text, text, text, text, integer, text, boolean, interval, text, text, text, text, text, interval, boolean, integer, interval, interval, integer, text[]) IS
	'Creates a pipeline: SQL run per batch of a stream (or topic) by background workers, exactly once by default.';
COMMENT ON FUNCTION streamguard.create_window_pipeline(text, text, text, interval, jsonb, text, interval, text, text, text, interval, interval, text, integer, text, text, text, interval) IS
	'Creates a pipeline that aggregates a stream into tumbling, hopping or session windows.';
COMMENT ON FUNCTION streamguard.alter_pipeline(text, text, integer, text, interval, integer, interval, interval, integer) IS
	'Changes a pipeline''s SQL, batch size, error policy, timeouts, retries or workers.';
COMMENT ON FUNCTION streamguard.pause_pipeline(text) IS
	'Stops a pipeline''s workers after their current batch; resume_pipeline starts them again.';
COMMENT ON FUNCTION streamguard.resume_pipeline(text) IS
	'Starts a paused or failed pipeline again from its committed positions.';
COMMENT ON FUNCTION streamguard.reset_pipeline(text, bigint, timestamp with time zone, integer) IS
	'Moves a pipeline''s positions to a seq, a time or the start of its source.';
COMMENT ON FUNCTION streamguard.drop_pipeline(text) IS
	'Drops a pipeline, settling its in-doubt remote transactions first.';
COMMENT ON FUNCTION streamguard.skip_event(text, integer, bigint) IS
	'Makes a pipeline pass over one event (counted as skipped) the next time it reaches it.';
COMMENT ON FUNCTION streamguard.redrive_dead_letters(text, integer, bigint, bigint, text) IS
	'Runs a pipeline''s SQL again over its dead letters and removes those that succeed.';
COMMENT ON FUNCTION streamguard.purge_dead_letters(text, interval) IS
	'Deletes a pipeline''s dead letters, or those older than an age.';
COMMENT ON FUNCTION streamguard.capture_table(regclass, text, text[], text[], text[], boolean) IS
	'Appends every committed change of a table to a stream in the writer''s transaction, with a backfill.';
COMMENT ON FUNCTION streamguard.uncapture_table(regclass, text) IS
	'Stops capturing a table''s changes into a stream.';
COMMENT ON FUNCTION streamguard.run_backfill_chunk(regclass, text, integer) IS
	'Runs one chunk of a capture''s backfill in the caller''s transaction.';
COMMENT ON FUNCTION streamguard.metrics() IS
	'Every streamguard metric in the Prometheus text format.';
COMMENT ON FUNCTION streamguard.inject_fault(text, text, text, integer) IS
	'Test only: arms a fault point (a kill, an error or a delay) in a pipeline''s worker.';
COMMENT ON FUNCTION streamguard.remote_validator(text[], oid) IS
	'Option validator of the streamguard_remote foreign-data wrapper.';
COMMENT ON FUNCTION streamguard.kafka_validator(text[], oid) IS
	'Option validator of the streamguard_kafka foreign-data wrapper.';
COMMENT ON FUNCTION streamguard._can_read(integer) IS
	'Internal: whether the current role may read a stream (owner, member of the owner, grant).';
COMMENT ON FUNCTION streamguard._is_member(oid) IS
	'Internal: whether the current role may act as a role; false for a role that is gone.';
COMMENT ON FUNCTION streamguard._capture_trigger() IS
	'Internal: the trigger of a captured table, appending its changes.';
COMMENT ON FUNCTION streamguard._capture_ddl_end() IS
	'Internal: event trigger that follows DDL on captured tables.';
COMMENT ON FUNCTION streamguard._capture_sql_drop() IS
	'Internal: event trigger that follows drops of captured tables.';
COMMENT ON FUNCTION streamguard._capture_table_rewrite() IS
	'Internal: event trigger that follows rewrites of captured tables.';
COMMENT ON FUNCTION streamguard._group_members() IS
	'Internal: the consumer group members in shared memory, for the consumer_group_members view.';
COMMENT ON FUNCTION streamguard._next_event_time(integer, integer, bigint) IS
	'Internal: the append time of a partition''s next event after a seq, for the views.';
COMMENT ON FUNCTION streamguard._open_appends() IS
	'Internal: the open transactions holding partitions'' readable horizons back.';
COMMENT ON FUNCTION streamguard._partition_stats() IS
	'Internal: each partition''s counters in shared memory, for the stream views.';
COMMENT ON FUNCTION streamguard._pipeline_batches() IS
	'Internal: the checkpoint log of the caller''s pipelines, for the pipeline_batches view.';
COMMENT ON FUNCTION streamguard._pipeline_histogram() IS
	'Internal: batch duration histograms of the pipelines, for pipeline_batch_durations.';
COMMENT ON FUNCTION streamguard._pipeline_runtime() IS
	'Internal: the pipeline workers'' state in shared memory, for the pipeline views.';
COMMENT ON FUNCTION streamguard._remote_runtime() IS
	'Internal: the caller''s pipelines'' remote connections and errors, for remote_status.';
COMMENT ON FUNCTION streamguard._window_pipeline_guard() IS
	'Internal: trigger that keeps a window pipeline''s generated SQL and single worker.';
COMMENT ON FUNCTION streamguard._window_time(timestamp with time zone) IS
	'Internal: an event''s window time, checked, in a window pipeline''s generated SQL.';
COMMENT ON FUNCTION streamguard._worker_slots() IS
	'Internal: background worker slots in use against the caps, for the worker_slots view.';

COMMENT ON VIEW streamguard.streams IS
	'One row per stream: partitions, retention, dedup window, events, size and owner.';
COMMENT ON VIEW streamguard.stream_partitions IS
	'One row per partition of a stream: next seq, readable horizon, retained events.';
COMMENT ON VIEW streamguard.stream_repartitions IS
	'Changes of a stream''s partition count, and the readers not yet past them.';
COMMENT ON VIEW streamguard.consumers IS
	'One row per consumer and partition: position, lag and last commit.';
COMMENT ON VIEW streamguard.consumer_group_members IS
	'The members of consumer groups, their partitions and leases.';
COMMENT ON VIEW streamguard.horizon_holders IS
	'Open transactions that hold a partition''s readable horizon back.';
COMMENT ON VIEW streamguard.pipelines IS
	'One row per pipeline: state, worker, counters, lag, last error.';
COMMENT ON VIEW streamguard.pipeline_workers IS
	'One row per worker of a pipeline: its process, partitions, state and counters.';
COMMENT ON VIEW streamguard.pipeline_batches IS
	'The checkpoint log: the last committed batches of each pipeline, with their timings.';
COMMENT ON VIEW streamguard.pipeline_batch_durations IS
	'Histograms of the pipelines'' batch durations.';
COMMENT ON VIEW streamguard.dead_letters IS
	'Events a pipeline with error_policy dead_letter could not process, with their errors.';
COMMENT ON VIEW streamguard.remote_status IS
	'Remote PostgreSQL and Kafka connections of the pipelines: state and last error.';
COMMENT ON VIEW streamguard.captures IS
	'Captured tables: their streams, columns and backfill progress.';
COMMENT ON VIEW streamguard.windows IS
	'The open and recently closed windows of window pipelines.';
COMMENT ON VIEW streamguard.kafka_lag IS
	'Per Kafka-source pipeline and partition: the stored offset, the high watermark and the lag.';
COMMENT ON VIEW streamguard.worker_slots IS
	'Background worker slots used by streamguard, per database and role, against the caps.';

COMMENT ON TABLE streamguard.stream IS 'Internal: one row per stream (read streamguard.streams).';
COMMENT ON TABLE streamguard.stream_partition IS 'Internal: one row per partition of a stream.';
COMMENT ON TABLE streamguard.stream_repartition IS 'Internal: the history of partition count changes.';
COMMENT ON TABLE streamguard.stream_grant IS 'Internal: privileges given by grant_stream.';
COMMENT ON TABLE streamguard.segment IS 'Internal: the segments of each stream (their events are in tables of schema streamguard_data).';
COMMENT ON TABLE streamguard.append_dedup IS 'Internal: append dedup keys within each stream''s dedup window.';
COMMENT ON TABLE streamguard.consumer IS 'Internal: consumer positions, one row per consumer and partition.';
COMMENT ON TABLE streamguard.pipeline IS 'Internal: one row per pipeline (read streamguard.pipelines).';
COMMENT ON TABLE streamguard.pipeline_worker IS 'Internal: each worker of a pipeline and the epoch of its incarnation.';
COMMENT ON TABLE streamguard.pipeline_batch IS 'Internal: the checkpoint log, written in each batch''s transaction.';
COMMENT ON TABLE streamguard.pipeline_dedup IS 'Internal: the dedup keys a pipeline with dedup => true has processed.';
COMMENT ON TABLE streamguard.pipeline_skip IS 'Internal: events skip_event asked a pipeline to pass over.';
COMMENT ON TABLE streamguard.dead_letter IS 'Internal: dead letters (read streamguard.dead_letters).';
COMMENT ON TABLE streamguard.remote_position IS 'Internal: positions of pipelines reading a stream on a remote server.';
COMMENT ON TABLE streamguard.remote_prepared IS 'Internal: prepared transactions a pipeline left on its remote sink, to settle.';
COMMENT ON TABLE streamguard.kafka_position IS 'Internal: the next offset of each partition of a Kafka-source pipeline.';
COMMENT ON TABLE streamguard.capture IS 'Internal: captured tables and their backfill state.';
COMMENT ON TABLE streamguard.capture_claim IS 'Internal: per-key claims that order a captured table''s changes.';
COMMENT ON TABLE streamguard.window_def IS 'Internal: the window definition of each window pipeline.';
COMMENT ON TABLE streamguard.window_state IS 'Internal: the accumulators of open windows.';
COMMENT ON TABLE streamguard.window_partition IS 'Internal: the latest event time seen per partition of a window pipeline.';
COMMENT ON TABLE streamguard.installation IS 'Internal: this installation''s identity (a uuid), one row.';
