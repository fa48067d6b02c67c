-- streamguard 0.2 -> 0.3: trust round 2 (install-time schema checks,
-- bounded work, server-wide caps) and every supported PostgreSQL major.
\echo Use "ALTER EXTENSION streamguard UPDATE TO '0.3'" to load this file. \quit

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
	   ARRAY(SELECT a.attname FROM unnest(c.key_attnums) WITH ORDINALITY k(attnum, n)
			 JOIN pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
			 ORDER BY k.n) AS key_columns,
	   c.operations::text[] AS operations,
	   CASE WHEN c.column_attnums IS NOT NULL THEN
		   ARRAY(SELECT a.attname FROM unnest(c.column_attnums) WITH ORDINALITY k(attnum, n)
				 JOIN pg_attribute a ON a.attrelid = c.relid AND a.attnum = k.attnum
				 ORDER BY k.n)
	   END AS columns,
	   c.owner::regrole AS owner,
	   c.backfill_state::text AS backfill_state,
	   c.backfill_rows,
	   c.backfill_skipped,
	   c.backfill_total,
	   CASE WHEN c.backfill_state = 'done' THEN 100
			WHEN c.backfill_total > 0 THEN
				least(99.9, round(100.0 * (c.backfill_rows + c.backfill_skipped) / c.backfill_total, 1))
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
