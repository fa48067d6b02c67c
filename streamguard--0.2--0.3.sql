-- streamguard 0.2 -> 0.3: trust round 2 (install-time schema checks,
-- bounded work, server-wide caps) and every supported PostgreSQL major.
\echo Use "ALTER EXTENSION streamguard UPDATE TO '0.3'" to load this file. \quit

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
