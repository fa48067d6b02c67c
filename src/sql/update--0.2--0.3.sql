-- streamguard 0.2 -> 0.3: trust round 2 (install-time schema checks,
-- bounded work, server-wide caps), every supported PostgreSQL major, and a
-- catalog that carries its invariants.
\echo Use "ALTER EXTENSION streamguard UPDATE TO '0.3'" to load this file. \quit

-- What changes from 0.2 to 0.3.  make builds streamguard--0.2--0.3.sql from
-- this file and the parts that every update states again in full
-- (views.sql, metrics.sql, privileges.sql, comments.sql, verify.sql), as
-- it builds the install script from objects.sql and the same parts:
-- test/t/095_upgrade.pl checks that both give the same objects.

-- ------------------------------------------------------ install schema
-- An update runs with search_path = <the extension's schema>, pg_temp: for
-- 0.2 that is schema streamguard, which CREATE EXTENSION may have adopted
-- from whoever created it first.  Pin the path first, refuse a schema that
-- someone other than a superuser controls, then move the extension into
-- pg_catalog with schema streamguard as one of its members -- the state a
-- fresh 0.3 installation has (docs/security.md, "Install schema").  The
-- path is set locally: ALTER EXTENSION undoes it when the script ends (a
-- plain SET would stay in the caller's session; scripts/script-settings-check.pl).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

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

-- ---------------------------------------------------------------- locks
-- Every table of the extension, all at once and before anything else: the
-- update changes most of them.  Pipeline's first, the order in which a
-- batch locks them (its fence); each wait is shorter than deadlock_timeout
-- and, when one times out, the update lets go of all and tries again: a
-- batch or a maintenance round that holds a table while it waits for
-- another one never makes a deadlock with the update.
DO $lock$
DECLARE
	tables text;
	old_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
	SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::pg_catalog.text, ', '
			ORDER BY c.relname OPERATOR(pg_catalog.<>) 'pipeline', c.relname)
	INTO tables
	FROM pg_catalog.pg_class c
	WHERE c.relnamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
	  AND c.relkind OPERATOR(pg_catalog.=) 'r';
	PERFORM pg_catalog.set_config('lock_timeout', GREATEST(1, (pg_catalog.date_part('epoch',
				pg_catalog.current_setting('deadlock_timeout')::pg_catalog.interval) OPERATOR(pg_catalog.*) 500)::int)::pg_catalog.text,
			true);
	LOOP
		BEGIN
			EXECUTE 'LOCK TABLE ' OPERATOR(pg_catalog.||) tables OPERATOR(pg_catalog.||) ' IN ACCESS EXCLUSIVE MODE';
			EXIT;
		EXCEPTION WHEN lock_not_available THEN
			PERFORM pg_catalog.pg_sleep(0.01);
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('lock_timeout', old_timeout, true);
END
$lock$;

-- --------------------------------------------------- pg_catalog bindings
-- Views and constraints made by the 0.1 and 0.2 scripts were bound under
-- search_path = streamguard: the views part below defines every view
-- again; here, the constraints whose functions or operators a look-alike
-- could have won (the others compare integers, which pg_catalog matches
-- exactly).  The last part checks that nothing is left bound outside
-- pg_catalog.
ALTER TABLE streamguard.window_def
	DROP CONSTRAINT window_def_check,
	DROP CONSTRAINT window_def_check1,
	DROP CONSTRAINT window_def_check3,
	ADD CONSTRAINT window_def_check CHECK ((kind OPERATOR(pg_catalog.=) 'hopping') = (slide IS NOT NULL)),
	ADD CONSTRAINT window_def_check1 CHECK (pg_catalog.cardinality(agg_names) OPERATOR(pg_catalog.=) pg_catalog.cardinality(agg_funcs)),
	ADD CONSTRAINT window_def_check3 CHECK ((late OPERATOR(pg_catalog.=) 'update') = (keep_closed IS NOT NULL));

-- Every view of the extension becomes, until the views part below defines
-- it again, a view of NULLs with the same columns: the columns the views
-- read can then change their type or go, and what users built on the views
-- (their own views, rules, grants) stays as it is.
DO $stub$
DECLARE
	v record;
BEGIN
	FOR v IN
		SELECT c.oid::pg_catalog.regclass AS view,
			   pg_catalog.string_agg(pg_catalog.format('NULL::%s%s AS %I',
					pg_catalog.format_type(a.atttypid, a.atttypmod),
					CASE WHEN a.attcollation OPERATOR(pg_catalog.<>) t.typcollation THEN
						(SELECT pg_catalog.format(' COLLATE %I.%I', n.nspname, co.collname)
						 FROM pg_catalog.pg_collation co JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) co.collnamespace
						 WHERE co.oid OPERATOR(pg_catalog.=) a.attcollation) ELSE '' END,
					a.attname), ', ' ORDER BY a.attnum) AS columns
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
			AND d.objid OPERATOR(pg_catalog.=) c.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
			AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
												   WHERE e.extname OPERATOR(pg_catalog.=) 'streamguard')
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid
			AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
		JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
		WHERE c.relkind OPERATOR(pg_catalog.=) 'v'
		GROUP BY c.oid
	LOOP
		EXECUTE pg_catalog.format('CREATE OR REPLACE VIEW %s AS SELECT %s', v.view, v.columns);
	END LOOP;
END
$stub$;

-- ------------------------------------------------- owners by role name
-- The owners and grantees are regrole, not oid: pg_dump writes a role's
-- name, so a restore into another cluster gives each row the role of that
-- name there (or fails naming a missing role) instead of whichever role
-- holds the old number.  The same OIDs: nothing is rewritten but the type.
ALTER TABLE streamguard.stream ALTER COLUMN owner TYPE regrole;
ALTER TABLE streamguard.pipeline ALTER COLUMN owner TYPE regrole;
ALTER TABLE streamguard.capture ALTER COLUMN owner TYPE regrole;
ALTER TABLE streamguard.stream_grant ALTER COLUMN grantee TYPE regrole;

-- ---------------------------------------------------- the watch grant
-- grant_stream(stream, role, 'watch'): the stream's consumers and group
-- members without its events; the views ask _can_watch now (the stubs
-- above hold no reference to _can_read)
ALTER TABLE streamguard.stream_grant ADD COLUMN can_watch boolean NOT NULL DEFAULT false;
DROP FUNCTION streamguard._can_read(int);
CREATE FUNCTION streamguard._can_watch(stream_id int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'sg_can_watch'
LANGUAGE C STABLE STRICT;

-- ------------------------------------------------------ payload_check
-- set_payload_check(stream, 'object'): a stream that takes JSON objects
-- only (null, scalars and arrays are refused at append); existing streams
-- take any JSON, as before
ALTER TABLE streamguard.stream ADD COLUMN payload_check text NOT NULL DEFAULT 'any'
	CHECK (payload_check IN ('any', 'object'));
CREATE FUNCTION streamguard.set_payload_check(stream text, payload_check text)
RETURNS void
AS 'MODULE_PATHNAME', 'sg_set_payload_check'
LANGUAGE C VOLATILE;

-- ------------------------------------------------ server-wide resources
CREATE FUNCTION streamguard._worker_slots(
	OUT scope text, OUT name text, OUT pipeline_workers int, OUT backfill_workers int,
	OUT workers int, OUT cap int, OUT reserved int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'sg_worker_slots'
LANGUAGE C VOLATILE;

-- -------------------------------------------- the catalog's invariants
-- (objects.sql says what each constraint means.)  The names of streams,
-- pipelines and consumers get their domains, a local source its foreign
-- key (a remote source's stream_id, 0 until now, becomes NULL), and what
-- batches write moves to pipeline_stats with its values.  Every new
-- constraint is added NOT VALID first; the block after them lists the rows
-- that break one (or a domain) and refuses the update, which then changes
-- nothing, or validates them all.
CREATE DOMAIN streamguard.object_name AS text
	CONSTRAINT object_name_check
	CHECK ((VALUE COLLATE pg_catalog."C") ~ '^[A-Za-z_][A-Za-z0-9_-]{0,62}$');
CREATE DOMAIN streamguard.consumer_name AS text
	CONSTRAINT consumer_name_check
	CHECK ((VALUE COLLATE pg_catalog."C") ~ '^(pipeline:)?[A-Za-z_][A-Za-z0-9_-]{0,62}$');

CREATE TABLE streamguard.pipeline_stats (
	pipeline_id int PRIMARY KEY REFERENCES streamguard.pipeline (id) ON DELETE CASCADE,
	batches bigint NOT NULL DEFAULT 0,
	events_in bigint NOT NULL DEFAULT 0,
	rows_out bigint NOT NULL DEFAULT 0,
	skipped bigint NOT NULL DEFAULT 0,
	dead_letters bigint NOT NULL DEFAULT 0,
	last_batch_at timestamptz,
	last_error text,
	last_error_at timestamptz
) WITH (fillfactor = 50);
INSERT INTO streamguard.pipeline_stats (pipeline_id, batches, events_in, rows_out, skipped, dead_letters,
	last_batch_at, last_error, last_error_at)
SELECT id, batches, events_in, rows_out, skipped, dead_letters, last_batch_at, last_error, last_error_at
FROM streamguard.pipeline;
SELECT pg_catalog.pg_extension_config_dump('streamguard.pipeline_stats', '');

ALTER TABLE streamguard.pipeline
	DROP COLUMN batches,
	DROP COLUMN events_in,
	DROP COLUMN rows_out,
	DROP COLUMN skipped,
	DROP COLUMN dead_letters,
	DROP COLUMN last_batch_at,
	DROP COLUMN last_error,
	DROP COLUMN last_error_at,
	ALTER COLUMN stream_id DROP NOT NULL;
UPDATE streamguard.pipeline SET stream_id = NULL WHERE stream_id OPERATOR(pg_catalog.=) 0;

ALTER TABLE streamguard.stream
	ADD CONSTRAINT stream_partitions_check CHECK (partitions >= 1) NOT VALID,
	ADD CONSTRAINT stream_retention_check CHECK (retention > '0') NOT VALID,
	ADD CONSTRAINT stream_dedup_window_check CHECK (dedup_window > '0') NOT VALID,
	ADD CONSTRAINT stream_segment_interval_check CHECK (segment_interval > '0') NOT VALID,
	ADD CONSTRAINT stream_segments_check CHECK (min_seg >= 0 AND min_seg <= current_seg) NOT VALID,
	ADD CONSTRAINT stream_rotation_check CHECK ((retention IS NULL) = (segment_interval IS NULL)) NOT VALID;
ALTER TABLE streamguard.stream_partition
	ADD CONSTRAINT stream_partition_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT stream_partition_seq_floor_check CHECK (seq_floor >= 0) NOT VALID;
ALTER TABLE streamguard.stream_repartition
	ADD CONSTRAINT stream_repartition_epoch_check CHECK (epoch >= 1) NOT VALID,
	ADD CONSTRAINT stream_repartition_old_partitions_check CHECK (old_partitions >= 1) NOT VALID;
ALTER TABLE streamguard.segment
	ADD CONSTRAINT segment_seg_check CHECK (seg >= 0) NOT VALID;
ALTER TABLE streamguard.consumer
	ADD CONSTRAINT consumer_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT consumer_position_check CHECK (position >= 0) NOT VALID,
	ADD CONSTRAINT consumer_lost_check CHECK (lost >= 0) NOT VALID,
	ADD CONSTRAINT consumer_member_check CHECK (pg_catalog.octet_length(member) BETWEEN 1 AND 128) NOT VALID;
ALTER TABLE streamguard.append_dedup
	ADD CONSTRAINT append_dedup_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT append_dedup_seq_check CHECK (seq >= 1) NOT VALID;
ALTER TABLE streamguard.pipeline
	ADD CONSTRAINT pipeline_stream_id_fkey FOREIGN KEY (stream_id) REFERENCES streamguard.stream (id) NOT VALID,
	ADD CONSTRAINT pipeline_batch_size_check CHECK (batch_size >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_dedup_window_check CHECK (dedup_window > '0') NOT VALID,
	ADD CONSTRAINT pipeline_epoch_check CHECK (epoch >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_restarts_check CHECK (restarts >= 0) NOT VALID,
	ADD CONSTRAINT pipeline_batch_timeout_check CHECK (batch_timeout > '0') NOT VALID,
	ADD CONSTRAINT pipeline_max_attempts_check CHECK (max_attempts >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_workers_check CHECK (workers >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_generation_check CHECK (generation >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_retry_backoff_check CHECK (retry_backoff > '0') NOT VALID,
	ADD CONSTRAINT pipeline_max_backoff_check CHECK (max_backoff > '0') NOT VALID,
	ADD CONSTRAINT pipeline_source_check CHECK ((stream_id IS NULL) = (source_server IS NOT NULL)
		AND (source_server IS NULL) = (remote_stream IS NULL)
		AND (source_server IS NOT NULL OR NOT source_kafka)) NOT VALID,
	ADD CONSTRAINT pipeline_sink_check CHECK ((sink_server IS NULL) = (sink_table IS NULL)
		AND (sink_server IS NULL) = (sink_mode IS NULL)
		AND (sink_on_conflict IS NULL OR (sink_server IS NOT NULL
										  AND pg_catalog.cardinality(sink_on_conflict) >= 1))) NOT VALID;
ALTER TABLE streamguard.pipeline_stats
	ADD CONSTRAINT pipeline_stats_counters_check CHECK (batches >= 0 AND events_in >= 0 AND rows_out >= 0
		AND skipped >= 0 AND dead_letters >= 0) NOT VALID;
ALTER TABLE streamguard.remote_position
	ADD CONSTRAINT remote_position_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT remote_position_position_check CHECK (position >= -1) NOT VALID,
	ADD CONSTRAINT remote_position_lost_check CHECK (lost >= 0) NOT VALID;
ALTER TABLE streamguard.pipeline_worker
	ADD CONSTRAINT pipeline_worker_worker_check CHECK (worker >= 0) NOT VALID,
	ADD CONSTRAINT pipeline_worker_epoch_check CHECK (epoch >= 1) NOT VALID;
ALTER TABLE streamguard.pipeline_skip
	ADD CONSTRAINT pipeline_skip_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT pipeline_skip_seq_check CHECK (seq >= 1) NOT VALID;
ALTER TABLE streamguard.pipeline_batch
	ADD CONSTRAINT pipeline_batch_batch_id_check CHECK (batch_id >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_batch_epoch_check CHECK (epoch >= 1) NOT VALID,
	ADD CONSTRAINT pipeline_batch_events_in_check CHECK (events_in >= 0) NOT VALID,
	ADD CONSTRAINT pipeline_batch_rows_out_check CHECK (rows_out >= 0) NOT VALID,
	ADD CONSTRAINT pipeline_batch_partitions_check CHECK (partitions >= 0) NOT VALID;
ALTER TABLE streamguard.dead_letter
	ADD CONSTRAINT dead_letter_partition_check CHECK (partition >= 0) NOT VALID,
	ADD CONSTRAINT dead_letter_seq_check CHECK (seq >= 0) NOT VALID;
ALTER TABLE streamguard.capture
	ADD CONSTRAINT capture_key_attnums_check CHECK (pg_catalog.cardinality(key_attnums) >= 1) NOT VALID,
	ADD CONSTRAINT capture_operations_check CHECK (pg_catalog.cardinality(operations) >= 1) NOT VALID,
	ADD CONSTRAINT capture_backfill_rows_check CHECK (backfill_rows >= 0) NOT VALID,
	ADD CONSTRAINT capture_backfill_skipped_check CHECK (backfill_skipped >= 0) NOT VALID,
	ADD CONSTRAINT capture_backfill_total_check CHECK (backfill_total >= 0) NOT VALID;
ALTER TABLE streamguard.window_def
	ADD CONSTRAINT window_def_size_check CHECK (size > '0') NOT VALID,
	ADD CONSTRAINT window_def_agg_names_check CHECK (pg_catalog.cardinality(agg_names) >= 1) NOT VALID,
	ADD CONSTRAINT window_def_allowed_lateness_check CHECK (allowed_lateness >= '0') NOT VALID,
	ADD CONSTRAINT window_def_idle_timeout_check CHECK (idle_timeout >= '0') NOT VALID,
	ADD CONSTRAINT window_def_keep_closed_check CHECK (keep_closed > '0') NOT VALID,
	ADD CONSTRAINT window_def_slide_check CHECK (slide > '0' AND slide <= size) NOT VALID,
	ADD CONSTRAINT window_def_counters_check CHECK (windows_closed >= 0 AND late_events >= 0
		AND corrections >= 0 AND superseded >= 0) NOT VALID;
-- no foreign key on window_state: a check per window and key inserted
ALTER TABLE streamguard.window_state
	DROP CONSTRAINT window_state_pipeline_id_fkey,
	ADD CONSTRAINT window_state_events_check CHECK (events >= 0) NOT VALID,
	ADD CONSTRAINT window_state_revision_check CHECK (revision >= 0) NOT VALID,
	ADD CONSTRAINT window_state_window_check CHECK (window_end > window_start) NOT VALID;
ALTER TABLE streamguard.window_partition
	ADD CONSTRAINT window_partition_partition_check CHECK (partition >= 0) NOT VALID;

-- The rows against the new rules: each constraint added NOT VALID above,
-- and each name column against its domain.  Rows that break one are named
-- (at most 10 per rule, by their key, their name and the columns the rule
-- reads) and the update refuses; else the constraints are validated and
-- the names take their domains.
DO $validate$
DECLARE
	domains CONSTANT text[][] := ARRAY[
		['streamguard.stream', 'name', 'streamguard.object_name'],
		['streamguard.pipeline', 'name', 'streamguard.object_name'],
		['streamguard.consumer', 'name', 'streamguard.consumer_name'],
		['streamguard.dead_letter', 'pipeline', 'streamguard.object_name'],
		['streamguard.window_def', 'target_stream', 'streamguard.object_name']];
	c record;
	r record;
	n bigint;
	rows text;
	ident text;
	bad text[] := '{}';
	i int;
BEGIN
	FOR c IN
		SELECT con.conname, con.conrelid::pg_catalog.regclass AS rel, con.contype,
			   pg_catalog.pg_get_expr(con.conbin, con.conrelid) AS expr,
			   (SELECT a.attname FROM pg_catalog.pg_attribute a
				WHERE a.attrelid OPERATOR(pg_catalog.=) con.conrelid
				  AND a.attnum OPERATOR(pg_catalog.=) con.conkey[1]) AS fk_column,
			   con.confrelid::pg_catalog.regclass AS fk_table,
			   (SELECT a.attname FROM pg_catalog.pg_attribute a
				WHERE a.attrelid OPERATOR(pg_catalog.=) con.confrelid
				  AND a.attnum OPERATOR(pg_catalog.=) con.confkey[1]) AS fk_refcolumn,
			   -- what names a row: its key, its name, the columns the rule reads
			   (SELECT pg_catalog.string_agg(pg_catalog.format('%L, t.%I', a.attname, a.attname), ', '
						ORDER BY a.attnum)
				FROM pg_catalog.pg_attribute a
				WHERE a.attrelid OPERATOR(pg_catalog.=) con.conrelid AND a.attnum OPERATOR(pg_catalog.>) 0
				  AND NOT a.attisdropped
				  AND (a.attnum OPERATOR(pg_catalog.=) ANY (con.conkey)
					   OR a.attname OPERATOR(pg_catalog.=) 'name'
					   OR a.attnum OPERATOR(pg_catalog.=) ANY ((SELECT i.indkey::pg_catalog.int2[]
							FROM pg_catalog.pg_index i
							WHERE i.indrelid OPERATOR(pg_catalog.=) con.conrelid AND i.indisprimary)::pg_catalog.int2[]))) AS ident
		FROM pg_catalog.pg_constraint con
		WHERE con.connamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		  AND NOT con.convalidated
		ORDER BY con.conrelid::pg_catalog.regclass::pg_catalog.text, con.conname
	LOOP
		EXECUTE pg_catalog.format('SELECT pg_catalog.count(*), pg_catalog.string_agg(t.row, '', '') '
								  'FILTER (WHERE t.n OPERATOR(pg_catalog.<=) 10) FROM '
								  '(SELECT pg_catalog.json_build_object(%s)::pg_catalog.text AS row, '
								  'pg_catalog.row_number() OVER () AS n FROM %s t WHERE %s) t',
								  c.ident, c.rel,
								  CASE c.contype
									WHEN 'c' THEN pg_catalog.format('NOT coalesce((%s), true)', c.expr)
									ELSE pg_catalog.format('t.%I IS NOT NULL AND NOT EXISTS (SELECT FROM %s f '
														   'WHERE f.%I OPERATOR(pg_catalog.=) t.%I)',
														   c.fk_column, c.fk_table, c.fk_refcolumn, c.fk_column) END)
		INTO n, rows;
		IF n OPERATOR(pg_catalog.>) 0 THEN
			bad := bad OPERATOR(pg_catalog.||) pg_catalog.format('%s of %s: %s%s', c.conname, c.rel, rows,
				CASE WHEN n OPERATOR(pg_catalog.>) 10 THEN pg_catalog.format(' and %s more', n OPERATOR(pg_catalog.-) 10) ELSE '' END);
		END IF;
	END LOOP;

	FOR i IN 1 .. pg_catalog.array_length(domains, 1) LOOP
		BEGIN
			EXECUTE pg_catalog.format('SELECT pg_catalog.count(%I::%s) FROM %s', domains[i][2], domains[i][3], domains[i][1]);
		EXCEPTION WHEN check_violation THEN
			-- one by one, to name them (by their key, their name, the column)
			SELECT pg_catalog.string_agg(pg_catalog.format('%L, t.%I', a.attname, a.attname), ', ' ORDER BY a.attnum)
			INTO ident
			FROM pg_catalog.pg_attribute a
			WHERE a.attrelid OPERATOR(pg_catalog.=) domains[i][1]::pg_catalog.regclass
			  AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
			  AND (a.attname OPERATOR(pg_catalog.=) ANY (ARRAY[domains[i][2], 'name'])
				   OR a.attnum OPERATOR(pg_catalog.=) ANY ((SELECT x.indkey::pg_catalog.int2[] FROM pg_catalog.pg_index x
						WHERE x.indrelid OPERATOR(pg_catalog.=) domains[i][1]::pg_catalog.regclass AND x.indisprimary)::pg_catalog.int2[]));
			n := 0;
			rows := NULL;
			FOR r IN EXECUTE pg_catalog.format('SELECT t.%I::pg_catalog.text AS v, pg_catalog.json_build_object(%s)::pg_catalog.text AS row FROM %s t',
											   domains[i][2], ident, domains[i][1]) LOOP
				BEGIN
					EXECUTE pg_catalog.format('SELECT $1::%s', domains[i][3]) USING r.v;
				EXCEPTION WHEN check_violation THEN
					n := n OPERATOR(pg_catalog.+) 1;
					IF n OPERATOR(pg_catalog.<=) 10 THEN
						rows := pg_catalog.concat_ws(', ', rows, r.row);
					END IF;
				END;
			END LOOP;
			bad := bad OPERATOR(pg_catalog.||) pg_catalog.format('%s.%s is not a valid %s: %s%s', domains[i][1], domains[i][2],
				domains[i][3], rows,
				CASE WHEN n OPERATOR(pg_catalog.>) 10 THEN pg_catalog.format(' and %s more', n OPERATOR(pg_catalog.-) 10) ELSE '' END);
		END;
	END LOOP;

	IF pg_catalog.cardinality(bad) OPERATOR(pg_catalog.>) 0 THEN
		RAISE EXCEPTION 'streamguard cannot be updated: rows of its catalog break the rules of 0.3'
			USING ERRCODE = 'check_violation',
				  DETAIL = pg_catalog.array_to_string(bad, E'\n'),
				  HINT = 'Correct or delete those rows (a superuser may write the tables of schema streamguard: for a pipeline or a stream, drop it with drop_pipeline or drop_stream if it cannot be corrected), then run ALTER EXTENSION streamguard UPDATE again.  A refused update changes nothing.';
	END IF;

	FOR c IN
		SELECT con.conname, con.conrelid::pg_catalog.regclass AS rel FROM pg_catalog.pg_constraint con
		WHERE con.connamespace OPERATOR(pg_catalog.=) 'streamguard'::pg_catalog.regnamespace
		  AND NOT con.convalidated
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.rel, c.conname);
	END LOOP;
	FOR i IN 1 .. pg_catalog.array_length(domains, 1) LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I TYPE %s', domains[i][1], domains[i][2], domains[i][3]);
	END LOOP;
END
$validate$;

-- ------------------------------------------------------- change capture
-- (after the invariants: the rewrite trigger would look at the tables the
-- changes of type rewrite)

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

-- ---------------------------------------------- one C symbol per signature
-- poll, create_pipeline and alter_pipeline keep 0.2's signatures; their C
-- symbols are new (the symbols of 0.2 serve 0.1's signatures too, told apart
-- by the number of arguments).
CREATE OR REPLACE FUNCTION streamguard.poll(stream text, consumer text, max_events int DEFAULT 100,
	wait interval DEFAULT NULL, member text DEFAULT NULL)
RETURNS SETOF streamguard.event
AS 'MODULE_PATHNAME', 'sg_poll_0_3'
LANGUAGE C VOLATILE ROWS 100;

CREATE OR REPLACE FUNCTION streamguard.create_pipeline(
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

CREATE OR REPLACE FUNCTION streamguard.alter_pipeline(
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
