-- streamguard 0.2 -> 0.3: trust round 2 (install-time schema checks,
-- bounded work, server-wide caps) and every supported PostgreSQL major.
\echo Use "ALTER EXTENSION streamguard UPDATE TO '0.3'" to load this file. \quit

-- ------------------------------------------------------ install schema
-- An update runs with search_path = <the extension's schema>, pg_temp: for
-- 0.2 that is schema streamguard, which CREATE EXTENSION may have adopted
-- from whoever created it first.  Pin the path first, refuse a schema that
-- someone other than a superuser controls, then move the extension into
-- pg_catalog with schema streamguard as one of its members -- the state a
-- fresh 0.3 installation has (docs/security.md, "Install schema").
SET search_path = pg_catalog, pg_temp;

DO $check$
DECLARE
	bad text;
BEGIN
	SELECT pg_catalog.string_agg(pg_catalog.format('schema %s (owner %s)', n.nspname,
			pg_catalog.pg_get_userbyid(n.nspowner)), ', ')
	INTO bad
	FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	WHERE n.nspname OPERATOR(pg_catalog.=) ANY (ARRAY['streamguard', 'streamguard_data']) AND NOT r.rolsuper;
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'streamguard cannot be updated: a role that is not a superuser owns its schema'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = pg_catalog.format('Owned by other roles: %s.  The owner of the schema can put functions in it that the extension''s views would call for every role, superusers included.', bad),
				  HINT = 'Check the schema for objects that are not the extension''s, then give it to a superuser (ALTER SCHEMA streamguard OWNER TO ...) and update again.';
	END IF;

	SELECT pg_catalog.string_agg(pg_catalog.format('%s on schema %s',
			CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END,
			n.nspname), ', ')
	INTO bad
	FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
	WHERE n.nspname OPERATOR(pg_catalog.=) ANY (ARRAY['streamguard', 'streamguard_data'])
	  AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
	  AND NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) a.grantee), false);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'streamguard cannot be updated: roles that are not superusers may create objects in its schema'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = pg_catalog.format('CREATE granted to: %s.', bad),
				  HINT = 'Check the schema for objects that are not the extension''s, revoke CREATE on it from those roles and update again.';
	END IF;

	-- objects in the schema that are not the extension's, owned by roles
	-- that are not superusers: look-alikes of pg_catalog functions and
	-- operators that the 0.1 and 0.2 scripts may have bound views to
	WITH ext AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		  AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
								WHERE e.extname OPERATOR(pg_catalog.=) 'streamguard')
		  AND d.deptype OPERATOR(pg_catalog.=) 'e'),
	objs(classid, objid, owner) AS (
		SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, oid, proowner FROM pg_catalog.pg_proc
		WHERE pronamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, oid, oprowner FROM pg_catalog.pg_operator
		WHERE oprnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, oid, relowner FROM pg_catalog.pg_class
		WHERE relnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, oid, typowner FROM pg_catalog.pg_type
		WHERE typnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, oid, collowner FROM pg_catalog.pg_collation
		WHERE collnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, oid, conowner FROM pg_catalog.pg_conversion
		WHERE connamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, oid, opcowner FROM pg_catalog.pg_opclass
		WHERE opcnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, oid, opfowner FROM pg_catalog.pg_opfamily
		WHERE opfnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, oid, cfgowner FROM pg_catalog.pg_ts_config
		WHERE cfgnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, oid, dictowner FROM pg_catalog.pg_ts_dict
		WHERE dictnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, oid, stxowner FROM pg_catalog.pg_statistic_ext
		WHERE stxnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace)
	SELECT pg_catalog.string_agg(pg_catalog.format('%s (owner %s)',
			pg_catalog.pg_describe_object(o.classid, o.objid, 0), pg_catalog.pg_get_userbyid(o.owner)), ', ')
	INTO bad
	FROM objs o JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) o.owner
	WHERE NOT r.rolsuper
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE ext.classid OPERATOR(pg_catalog.=) o.classid
					  AND ext.objid OPERATOR(pg_catalog.=) o.objid);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'streamguard cannot be updated: schema streamguard holds objects of other roles'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = pg_catalog.format('Not part of the extension: %s.  They may be look-alikes of pg_catalog functions that the extension''s views call.', bad),
				  HINT = 'Give them to a superuser (ALTER ... OWNER TO ...) and update again: the update binds the extension''s views to pg_catalog; drop them afterwards.';
	END IF;
END
$check$;

-- the extension moves into pg_catalog (like a fresh 0.3 installation,
-- whose control file says schema = pg_catalog); its schema becomes a
-- member, which DROP EXTENSION removes
UPDATE pg_catalog.pg_extension SET extnamespace = 'pg_catalog'::pg_catalog.regnamespace
WHERE extname OPERATOR(pg_catalog.=) 'streamguard';
DELETE FROM pg_catalog.pg_depend
WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
  AND objid OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'streamguard')
  AND refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
  AND refobjid OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace;
ALTER EXTENSION streamguard ADD SCHEMA streamguard;

-- --------------------------------------------------- pg_catalog bindings
-- Views and constraints made by the 0.1 and 0.2 scripts were bound under
-- search_path = streamguard: rebuild every view, and the constraints whose
-- functions or operators a look-alike could have won (the others compare
-- integers, which pg_catalog matches exactly).  The last block of this
-- script checks that nothing is left bound outside pg_catalog.
ALTER TABLE streamguard.window_def
	DROP CONSTRAINT window_def_check,
	DROP CONSTRAINT window_def_check1,
	DROP CONSTRAINT window_def_check3,
	ADD CONSTRAINT window_def_check CHECK ((kind OPERATOR(pg_catalog.=) 'hopping') = (slide IS NOT NULL)),
	ADD CONSTRAINT window_def_check1 CHECK (pg_catalog.cardinality(agg_names) OPERATOR(pg_catalog.=) pg_catalog.cardinality(agg_funcs)),
	ADD CONSTRAINT window_def_check3 CHECK ((late OPERATOR(pg_catalog.=) 'update') = (keep_closed IS NOT NULL));

-- every view, as a fresh 0.3 installation defines it

CREATE OR REPLACE VIEW streamguard.stream_partitions AS
SELECT s.name AS stream, p.partition, p.first_seq, p.last_seq,
	   p.readable_horizon, p.next_seq, p.in_flight,
	   sp.seq_floor
FROM streamguard._partition_stats() p
JOIN streamguard.stream s ON s.id = p.stream_id
JOIN streamguard.stream_partition sp ON sp.stream_id = p.stream_id AND sp.partition = p.partition;

CREATE OR REPLACE VIEW streamguard.streams AS
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
	   s.created_at
FROM streamguard.stream s
LEFT JOIN streamguard._partition_stats() p ON p.stream_id = s.id
GROUP BY s.id;

-- changes of a stream's partition count and their switch points (alter_stream)
CREATE OR REPLACE VIEW streamguard.stream_repartitions AS
SELECT s.name AS stream,
	   r.epoch,
	   r.old_partitions,
	   r.new_partitions,
	   r.switch_seqs,
	   r.changed_at
FROM streamguard.stream_repartition r
JOIN streamguard.stream s ON s.id = r.stream_id;

-- a consumer's positions are shown to the roles that may read its stream
CREATE OR REPLACE VIEW streamguard.consumers WITH (security_barrier) AS
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

-- every role sees every pipeline's state and counters; its error text (which
-- can quote the events' values) only the owner, its members and superusers
CREATE OR REPLACE VIEW streamguard.pipelines AS
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
CREATE OR REPLACE VIEW streamguard.pipeline_workers AS
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

CREATE OR REPLACE VIEW streamguard.remote_status AS
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
CREATE OR REPLACE VIEW streamguard.pipeline_batches WITH (security_barrier) AS
SELECT p.name AS pipeline, b.batch_id, b.epoch, b.committed_at, b.events_in, b.rows_out,
	   b.partitions, b.first_seq, b.last_seq, b.fetch_ms, b.process_ms, r.commit_ms
FROM streamguard.pipeline_batch b
JOIN streamguard.pipeline p ON p.id = b.pipeline_id
LEFT JOIN streamguard._pipeline_batches() r
	   ON r.pipeline_id = b.pipeline_id AND r.batch_id = b.batch_id
WHERE streamguard._is_member(p.owner);

-- dead letters hold payloads: each role sees those of the pipelines it owns
CREATE OR REPLACE VIEW streamguard.dead_letters WITH (security_barrier) AS
SELECT d.pipeline, d.partition, d.seq, d.key, d.payload, d.dedup_key, d.appended_at,
	   d.error, d.sqlstate, d.failed_at
FROM streamguard.dead_letter d
JOIN streamguard.pipeline p ON p.id = d.pipeline_id
WHERE streamguard._is_member(p.owner);

CREATE OR REPLACE VIEW streamguard.horizon_holders AS
SELECT s.name AS stream, o.partition, o.pid, o.first_seq,
	   a.xact_start, pg_catalog.now() - a.xact_start AS xact_age, a.state
FROM streamguard._open_appends() o
JOIN streamguard.stream s ON s.id = o.stream_id
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = o.pid;

-- cumulative counts of committed batches by duration, since the server started
CREATE OR REPLACE VIEW streamguard.pipeline_batch_durations AS
SELECT p.name AS pipeline, h.le, pg_catalog.sum(h.count)::bigint AS count, pg_catalog.sum(h.sum_seconds) AS sum_seconds,
	   pg_catalog.sum(h.total)::bigint AS total
FROM streamguard._pipeline_histogram() h
JOIN streamguard.pipeline p ON p.id = h.pipeline_id
GROUP BY p.name, h.le;

-- ------------------------------------------------------- change capture

-- the backfill through DDL: the key's order it walks, and the event
-- triggers that keep rewrites and key changes away while it runs
ALTER TABLE streamguard.capture ADD COLUMN backfill_key text[];

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
REVOKE EXECUTE ON FUNCTION streamguard._capture_table_rewrite() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._capture_ddl_end() FROM PUBLIC;

-- every role sees every capture (as it sees every table in pg_class); the
-- backfill's position (key values) and its error text only the capture's
-- owner and the table's owner (members of each, superusers): a role that
-- may SELECT the table may still be kept from some rows by a policy
CREATE OR REPLACE VIEW streamguard.captures AS
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

-- the members of consumer groups on streams the role may read
-- (_group_members filters too)
CREATE OR REPLACE VIEW streamguard.consumer_group_members WITH (security_barrier) AS
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

CREATE OR REPLACE VIEW streamguard.windows WITH (security_barrier) AS
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

-- Kafka lag per partition: for the pipeline's owner, its members and
-- superusers.
CREATE OR REPLACE VIEW streamguard.kafka_lag WITH (security_barrier) AS
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

-- ------------------------------------------------------ function privileges
-- a view calls functions with its caller's rights: what the views call stays
-- executable and filters by itself; the rest is revoked (sql/15_trust.sql)
REVOKE EXECUTE ON FUNCTION streamguard.remote_validator(text[], oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard.kafka_validator(text[], oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamguard._window_pipeline_guard() FROM PUBLIC;

-- ------------------------------------------------ server-wide resources
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

-- metrics(): HELP before TYPE, buckets ascending with +Inf last, a database
-- label, foreign_server (postgres_exporter adds a label "server" of its
-- own), appended_events_total
CREATE OR REPLACE FUNCTION streamguard.metrics()
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

-- ------------------------------------------------------ payload_check
-- set_payload_check(stream, 'object'): a stream that takes JSON objects
-- only (null, scalars and arrays are refused at append); existing streams
-- take any JSON, as before
ALTER TABLE streamguard.stream ADD COLUMN payload_check text NOT NULL DEFAULT 'any'
	CHECK (payload_check IN ('any', 'object'));
-- and the streams view shows it (a column at the end: the view stays replaceable)
CREATE OR REPLACE VIEW streamguard.streams AS
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
-- what a stream accepts as payload: 'any' JSON (the default) or only
-- 'object's; owner only, for appends from the change's commit on
CREATE FUNCTION streamguard.set_payload_check(stream text, payload_check text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_set_payload_check'
LANGUAGE C VOLATILE;

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

-- ------------------------------------------ keep this block the last one
-- Nothing the extension's objects, views, defaults, constraints and
-- triggers use lives outside pg_catalog and the extension: what the update could not
-- rebind refuses the update instead of staying bound to a look-alike.
DO $verify$
DECLARE
	bad text;
BEGIN
	WITH direct AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		  AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
								WHERE e.extname OPERATOR(pg_catalog.=) 'streamguard')
		  AND d.deptype OPERATOR(pg_catalog.=) 'e'),
	-- and what PostgreSQL made along with them (array types, row types)
	members AS (
		SELECT classid, objid FROM direct
		UNION SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN direct m
			ON d.refclassid OPERATOR(pg_catalog.=) m.classid AND d.refobjid OPERATOR(pg_catalog.=) m.objid
			AND d.deptype OPERATOR(pg_catalog.=) 'i'),
	rels AS (SELECT objid AS relid FROM members
			 WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass),
	users(classid, objid) AS (
		SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, rw.oid
		FROM pg_catalog.pg_rewrite rw JOIN rels ON rw.ev_class OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, ad.oid
		FROM pg_catalog.pg_attrdef ad JOIN rels ON ad.adrelid OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid
		FROM pg_catalog.pg_constraint c JOIN rels ON c.conrelid OPERATOR(pg_catalog.=) rels.relid
		UNION ALL SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid
		FROM pg_catalog.pg_trigger t JOIN rels ON t.tgrelid OPERATOR(pg_catalog.=) rels.relid
		-- signatures, argument defaults, column types
		UNION ALL SELECT classid, objid FROM members),
	refs AS (
		SELECT u.classid, u.objid, d.refclassid, d.refobjid,
			   CASE d.refclassid
					WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN
						(SELECT pronamespace FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
					WHEN 'pg_catalog.pg_operator'::pg_catalog.regclass THEN
						(SELECT oprnamespace FROM pg_catalog.pg_operator WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
					WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN
						(SELECT typnamespace FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) d.refobjid)
			   END AS nsp
		FROM users u JOIN pg_catalog.pg_depend d
			ON d.classid OPERATOR(pg_catalog.=) u.classid AND d.objid OPERATOR(pg_catalog.=) u.objid)
	SELECT pg_catalog.string_agg(pg_catalog.format('%s uses %s',
			pg_catalog.pg_describe_object(r.classid, r.objid, 0),
			pg_catalog.pg_describe_object(r.refclassid, r.refobjid, 0)), ', ')
	INTO bad
	FROM refs r
	WHERE r.nsp OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace
	  AND NOT EXISTS (SELECT 1 FROM members m WHERE m.classid OPERATOR(pg_catalog.=) r.refclassid
					  AND m.objid OPERATOR(pg_catalog.=) r.refobjid);
	IF bad IS NOT NULL THEN
		RAISE EXCEPTION 'streamguard cannot be updated: its objects use objects that are not part of it'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = pg_catalog.format('%s.', bad),
				  HINT = 'Report this: the update should have rebound them to pg_catalog.';
	END IF;
END
$verify$;
