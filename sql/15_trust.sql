-- trust: the extension's own objects (docs/security.md).  Every function,
-- view and table of the extension has a privilege decision listed here; the
-- views, defaults and constraints bind only to pg_catalog and to the
-- extension's own objects; SQL and PL/pgSQL functions pin search_path.
SET client_min_messages = warning;

-- ------------------------------------------------------------ install schema
-- the extension lives in pg_catalog; its schemas are members of it, owned
-- by the installing superuser
SELECT e.extnamespace::regnamespace AS extension_schema FROM pg_extension e
WHERE e.extname = 'streamguard';
SELECT n.nspname, r.rolsuper AS owner_is_superuser,
	   EXISTS (SELECT 1 FROM pg_depend d
			   WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e'
				 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard')) AS member
FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
WHERE n.nspname IN ('streamguard', 'streamguard_data') ORDER BY 1;
-- nothing of the extension landed in pg_catalog itself
SELECT pg_describe_object(d.classid, d.objid, 0) AS in_pg_catalog
FROM pg_depend d
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard') AND d.deptype = 'e'
  AND 'pg_catalog'::regnamespace = CASE d.classid
	WHEN 'pg_proc'::regclass THEN (SELECT pronamespace FROM pg_proc WHERE oid = d.objid)
	WHEN 'pg_class'::regclass THEN (SELECT relnamespace FROM pg_class WHERE oid = d.objid)
	WHEN 'pg_type'::regclass THEN (SELECT typnamespace FROM pg_type WHERE oid = d.objid)
	WHEN 'pg_operator'::regclass THEN (SELECT oprnamespace FROM pg_operator WHERE oid = d.objid) END;

-- --------------------------------------------------- pg_catalog qualification
-- every function, operator and type that a view, a column default, a
-- constraint, a trigger or an object of the extension refers to (function
-- signatures and argument defaults, column types included) is in pg_catalog
-- or belongs to the extension (a look-alike in any other schema is listed)
CREATE TEMP VIEW foreign_bindings AS
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'streamguard'),
direct AS (
	SELECT d.classid, d.objid FROM pg_depend d, ext
	WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
-- and what PostgreSQL made along with them (array types, row types)
members AS (
	SELECT classid, objid FROM direct
	UNION SELECT d.classid, d.objid FROM pg_depend d JOIN direct m
		ON d.refclassid = m.classid AND d.refobjid = m.objid AND d.deptype = 'i'),
rels AS (SELECT objid AS relid FROM members WHERE classid = 'pg_class'::regclass),
users AS (
	-- a view's rewrite rule, a default, a constraint of the extension's relations
	SELECT 'pg_rewrite'::regclass AS classid, rw.oid AS objid FROM pg_rewrite rw JOIN rels ON rw.ev_class = rels.relid
	UNION ALL
	SELECT 'pg_attrdef'::regclass, ad.oid FROM pg_attrdef ad JOIN rels ON ad.adrelid = rels.relid
	UNION ALL
	SELECT 'pg_constraint'::regclass, c.oid FROM pg_constraint c JOIN rels ON c.conrelid = rels.relid
	UNION ALL
	SELECT 'pg_trigger'::regclass, t.oid FROM pg_trigger t JOIN rels ON t.tgrelid = rels.relid
	UNION ALL
	-- a constraint of the extension's domains
	SELECT 'pg_constraint'::regclass, c.oid FROM pg_constraint c
	JOIN members m ON m.classid = 'pg_type'::regclass AND c.contypid = m.objid
	UNION ALL
	-- the members themselves: a function's argument, result and default
	-- types and calls, a table's column types, a type's base or elements
	SELECT classid, objid FROM members),
refs AS (
	SELECT u.classid, u.objid, d.refclassid, d.refobjid,
		   CASE d.refclassid
				WHEN 'pg_proc'::regclass THEN (SELECT pronamespace FROM pg_proc WHERE oid = d.refobjid)
				WHEN 'pg_operator'::regclass THEN (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid)
				WHEN 'pg_type'::regclass THEN (SELECT typnamespace FROM pg_type WHERE oid = d.refobjid)
				WHEN 'pg_collation'::regclass THEN (SELECT collnamespace FROM pg_collation WHERE oid = d.refobjid)
		   END AS nsp
	FROM users u JOIN pg_depend d ON d.classid = u.classid AND d.objid = u.objid)
SELECT DISTINCT pg_describe_object(r.classid, r.objid, 0) AS used_by,
	   pg_describe_object(r.refclassid, r.refobjid, 0) AS binds_to
FROM refs r
WHERE r.nsp IS NOT NULL AND r.nsp <> 'pg_catalog'::regnamespace
  AND NOT EXISTS (SELECT 1 FROM members m WHERE m.classid = r.refclassid AND m.objid = r.refobjid);
SELECT * FROM foreign_bindings ORDER BY 1, 2;
-- the check sees what it looks for: a default, a constraint (of a table
-- and of a domain), a view and a column bound to look-alikes are listed
CREATE SCHEMA lookalike;
CREATE FUNCTION lookalike.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT pg_catalog.now()';
CREATE FUNCTION lookalike.octet_length(text) RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION lookalike.unnest(int2[]) RETURNS SETOF int2 LANGUAGE sql AS 'SELECT 1::int2';
CREATE FUNCTION lookalike.eq(streamguard.window_kind, streamguard.window_kind) RETURNS boolean
	LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR lookalike.= (LEFTARG = streamguard.window_kind, RIGHTARG = streamguard.window_kind,
	FUNCTION = lookalike.eq);
BEGIN;
SET LOCAL search_path = lookalike, pg_catalog;
ALTER TABLE streamguard.stream ALTER COLUMN created_at SET DEFAULT now();
ALTER TABLE streamguard.window_def ADD CONSTRAINT lookalike_check CHECK (kind = 'session');
ALTER DOMAIN streamguard.object_name ADD CONSTRAINT lookalike_check CHECK (octet_length(VALUE) > 0);
CREATE OR REPLACE VIEW streamguard.captures AS SELECT * FROM streamguard.captures
	WHERE EXISTS (SELECT FROM unnest('{1}'::int2[]));
CREATE DOMAIN lookalike.d AS int;
ALTER TABLE streamguard.stream_grant ADD COLUMN lookalike_col lookalike.d;
SELECT * FROM foreign_bindings ORDER BY 1, 2;
ROLLBACK;
DROP SCHEMA lookalike CASCADE;

-- SQL and PL/pgSQL functions pin search_path (their bodies are parsed when
-- they run, under the caller's settings otherwise)
SELECT p.oid::regprocedure AS unpinned
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_language l ON l.oid = p.prolang
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard')
  AND l.lanname NOT IN ('c', 'internal')
  AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false);
-- no function of the extension is SECURITY DEFINER
SELECT p.oid::regprocedure AS security_definer
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard') AND p.prosecdef;

-- ------------------------------------------------------ function privileges
-- Every function of the extension with its decision:
--   api      granted to PUBLIC on purpose: checks the caller's rights itself
--   filters  internal, called by a view with the caller's rights (a view
--            does not lend its owner's EXECUTE): PUBLIC may call it, and it
--            returns only what the view would show the caller
--   revoked  not executable by PUBLIC
-- A function added without a decision, or whose ACL differs, is listed.
CREATE TEMP TABLE decision (fn text PRIMARY KEY, decision text NOT NULL);
INSERT INTO decision VALUES
	('streamguard.create_stream(text,integer,interval,interval,interval)', 'revoked'),
	('streamguard.drop_stream(text,boolean)', 'api'),
	('streamguard.alter_stream(text,integer,interval,interval,interval)', 'api'),
	('streamguard.set_payload_check(text,text)', 'api'),
	('streamguard.grant_stream(text,regrole,text)', 'api'),
	('streamguard.revoke_stream(text,regrole,text)', 'api'),
	('streamguard.append(text,jsonb,text,text,integer)', 'api'),
	('streamguard.append_batch(text,jsonb[],text[],text[],integer[])', 'api'),
	('streamguard.poll(text,text,integer,interval,text)', 'api'),
	('streamguard.seek(text,text,integer,bigint)', 'api'),
	('streamguard.seek(text,text,timestamp with time zone)', 'api'),
	('streamguard.read(text,integer,bigint,integer)', 'api'),
	('streamguard.seq_at_time(text,integer,timestamp with time zone)', 'api'),
	('streamguard.drop_consumer(text,text)', 'api'),
	('streamguard.create_pipeline(text,text,text,text,integer,text,boolean,interval,text,text,text,text,text,interval,boolean,integer,interval,interval,integer,text[])', 'api'),
	('streamguard.pause_pipeline(text)', 'api'),
	('streamguard.resume_pipeline(text)', 'api'),
	('streamguard.drop_pipeline(text)', 'api'),
	('streamguard.reset_pipeline(text,bigint,timestamp with time zone,integer)', 'api'),
	('streamguard.alter_pipeline(text,text,integer,text,interval,integer,interval,interval,integer)', 'api'),
	('streamguard.purge_dead_letters(text,interval)', 'api'),
	('streamguard.redrive_dead_letters(text,integer,bigint,bigint,text)', 'api'),
	('streamguard.skip_event(text,integer,bigint)', 'api'),
	('streamguard.inject_fault(text,text,text,integer)', 'revoked'),
	('streamguard.remote_validator(text[],oid)', 'revoked'),
	('streamguard.kafka_validator(text[],oid)', 'revoked'),
	('streamguard._partition_stats()', 'filters'),
	('streamguard._next_event_time(integer,integer,bigint)', 'filters'),
	('streamguard._is_member(oid)', 'filters'),
	-- counts per database and role against the caps: no pipeline names
	('streamguard._worker_slots()', 'filters'),
	('streamguard._can_watch(integer)', 'filters'),
	('streamguard._pipeline_runtime()', 'filters'),
	('streamguard._pipeline_batches()', 'filters'),
	('streamguard._remote_runtime()', 'filters'),
	('streamguard._open_appends()', 'filters'),
	('streamguard._pipeline_histogram()', 'filters'),
	('streamguard._group_members()', 'filters'),
	('streamguard.capture_table(regclass,text,text[],text[],text[],boolean)', 'api'),
	('streamguard.uncapture_table(regclass,text)', 'api'),
	('streamguard.run_backfill_chunk(regclass,text,integer)', 'api'),
	('streamguard._capture_trigger()', 'revoked'),
	('streamguard._capture_sql_drop()', 'revoked'),
	('streamguard._capture_table_rewrite()', 'revoked'),
	('streamguard._capture_ddl_end()', 'revoked'),
	('streamguard.leave_group(text,text,text)', 'api'),
	('streamguard.create_window_pipeline(text,text,text,interval,jsonb,text,interval,text,text,text,interval,interval,text,integer,text,text,text,interval)', 'api'),
	('streamguard._window_pipeline_guard()', 'revoked'),
	-- runs inside the owner's generated window SQL; a pure function of its argument
	('streamguard._window_time(timestamp with time zone)', 'filters'),
	('streamguard.metrics()', 'api');
WITH fns AS (
	SELECT p.oid::regprocedure::text AS fn,
		   EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f'::"char", p.proowner))) a
				   WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public_execute
	FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard'))
SELECT coalesce(f.fn, x.fn) AS function, x.decision,
	   CASE WHEN f.fn IS NULL THEN 'listed but absent'
			WHEN x.fn IS NULL THEN 'no decision'
			ELSE 'PUBLIC execute: ' || f.public_execute END AS problem
FROM fns f FULL JOIN decision x ON x.fn = f.fn
WHERE f.fn IS NULL OR x.fn IS NULL OR f.public_execute <> (x.decision <> 'revoked')
ORDER BY 1;
-- internal names (_...) are never public API
SELECT fn AS internal_api FROM decision WHERE fn LIKE 'streamguard.\_%' AND decision = 'api';

-- relations: the views PUBLIC may read; every table and sequence revoked
CREATE TEMP TABLE public_views (rel text PRIMARY KEY);
INSERT INTO public_views VALUES
	('streamguard.streams'), ('streamguard.stream_partitions'), ('streamguard.stream_repartitions'),
	('streamguard.consumers'), ('streamguard.pipelines'), ('streamguard.pipeline_workers'),
	('streamguard.remote_status'), ('streamguard.pipeline_batches'), ('streamguard.dead_letters'),
	('streamguard.horizon_holders'), ('streamguard.pipeline_batch_durations'), ('streamguard.captures'),
	('streamguard.consumer_group_members'), ('streamguard.windows'), ('streamguard.kafka_lag'),
	-- counts per database and role (names any role sees in pg_database and pg_roles)
	('streamguard.worker_slots');
WITH rels AS (
	SELECT c.oid::regclass::text AS rel, c.relkind,
		   array(SELECT a.privilege_type FROM aclexplode(coalesce(c.relacl, acldefault(
				(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) a
				 WHERE a.grantee = 0 ORDER BY 1) AS public_privs
	FROM pg_class c JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
	WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamguard'))
SELECT coalesce(r.rel, v.rel) AS relation, r.relkind, r.public_privs
FROM rels r FULL JOIN public_views v ON v.rel = r.rel
WHERE r.rel IS NULL
   OR (v.rel IS NULL AND r.public_privs <> '{}')
   OR (v.rel IS NOT NULL AND (r.relkind <> 'v' OR r.public_privs <> '{SELECT}'))
ORDER BY 1;
-- the storage schema: nobody but its owner
SELECT nspacl FROM pg_namespace WHERE nspname = 'streamguard_data';

-- ---------------------------------------- the internal functions filter
-- a role that owns no pipeline sees none of another role's checkpoint log
-- through the internal function, and the view still works for it
CREATE ROLE sg_trust_stranger;
SELECT streamguard.create_stream('trust', 1);
CREATE TABLE trust_sink (n int);
SELECT streamguard.create_pipeline('trust_p', 'trust', $$INSERT INTO trust_sink SELECT 1 FROM batch$$);
SELECT count(*) FROM streamguard.append_batch('trust', ARRAY['{}', '{}', '{}']::jsonb[]);
SELECT wait_for($$(SELECT count(*) FROM trust_sink) = 3$$);
SELECT count(*) > 0 AS superuser_sees FROM streamguard._pipeline_batches();
SELECT id AS trust_id FROM streamguard.stream WHERE name = 'trust' \gset
SELECT streamguard._next_event_time(:trust_id, 0, 0) IS NOT NULL AS superuser_time;
SET ROLE sg_trust_stranger;
SELECT count(*) AS stranger_sees FROM streamguard._pipeline_batches();
SELECT count(*) AS stranger_view FROM streamguard.pipeline_batches;
SELECT count(*) AS stranger_remote FROM streamguard.remote_status;
SELECT count(*) AS consumers_view FROM streamguard.consumers;
-- nor the append time of another role's events
SELECT streamguard._next_event_time(:trust_id, 0, 0) IS NULL AS stranger_no_time;
RESET ROLE;
SELECT streamguard.drop_pipeline('trust_p');
SELECT streamguard.drop_stream('trust');
DROP TABLE trust_sink;
DROP ROLE sg_trust_stranger;
