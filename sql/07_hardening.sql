-- hardening: bad input to the new pipeline settings, statements refused at
-- creation, grants to missing roles, quota settings that only superusers set,
-- and a pipeline whose SQL leaves settings behind (rolled back per batch)
SET client_min_messages = warning;

SELECT streamguard.create_stream('h_src', 2);
CREATE TABLE h_sink (n int, sp text, wm text);

-- batch_timeout and dedup_window
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', batch_timeout => '0.5 s')$$);
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', batch_timeout => '30 days')$$);
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', batch_timeout => NULL)$$);
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', allow_source_append => NULL)$$);
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', dedup => true, dedup_window => '-1 hour')$$);
SELECT try($$SELECT streamguard.create_pipeline('h1', 'h_src', 'SELECT 1', dedup_window => '0 s')$$);

-- statements that can never run in a batch
SELECT s, try(format('SELECT streamguard.create_pipeline(%L, %L, %L)', 'h1', 'h_src', s))
FROM unnest(ARRAY[
	'SET ROLE postgres',
	'RESET ROLE',
	'SET SESSION AUTHORIZATION postgres',
	'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE',
	'COPY (SELECT 1) TO PROGRAM ''true''',
	'COPY h_sink FROM STDIN',
	'DO $x$BEGIN COMMIT; END$x$',
	'ALTER SYSTEM SET work_mem = ''1MB''',
	'CREATE INDEX CONCURRENTLY ON h_sink (n)',
	'DECLARE c CURSOR WITH HOLD FOR SELECT 1',
	'PREPARE q AS SELECT 1',
	'DISCARD ALL',
	'LOAD ''plpgsql''',
	'REINDEX TABLE h_sink',
	'SAVEPOINT s',
	'VACUUM h_sink',
	'SELECT 1 FROM batch; COMMIT']) AS s;
-- allowed: settings (rolled back after each batch) and plain index builds
SELECT try($$SELECT streamguard.create_pipeline('h_ok', 'h_src',
	'INSERT INTO h_sink SELECT 1, current_setting(''search_path''), current_setting(''work_mem'') FROM batch LIMIT 1; SET work_mem = ''77kB''; SET search_path = pg_temp')$$);
SELECT count(*) FROM streamguard.pipelines WHERE pipeline LIKE 'h%';

-- alter_pipeline: same checks
SELECT try($$SELECT streamguard.alter_pipeline('h_ok', sql => 'SET ROLE postgres')$$);
SELECT try($$SELECT streamguard.alter_pipeline('h_ok', batch_timeout => '0 s')$$);
SELECT try($$SELECT streamguard.alter_pipeline('h_ok', batch_timeout => '10 min')$$);
SELECT batch_timeout FROM streamguard.pipelines WHERE pipeline = 'h_ok';

-- settings made by one batch never reach the next one
SELECT count(*) FROM streamguard.append('h_src', '{"n": 1}', partition => 0);
SELECT wait_for('(SELECT count(*) FROM h_sink) = 1');
SELECT count(*) FROM streamguard.append('h_src', '{"n": 2}', partition => 1);
SELECT wait_for('(SELECT count(*) FROM h_sink) = 2');
SELECT DISTINCT sp, wm FROM h_sink;

-- grants to roles that do not exist
SELECT try($$SELECT streamguard.grant_stream('h_src', 0::regrole, 'read')$$);
SELECT try($$SELECT streamguard.grant_stream('h_src', 999999::oid::regrole, 'read')$$);

-- the per-role limits are superuser settings
CREATE ROLE h_plain;
SET ROLE h_plain;
SELECT try($$SET streamguard.role_max_streams = 1000$$);
SELECT try($$SET streamguard.role_max_pipelines = -1$$);
RESET ROLE;
SELECT name, context, boot_val FROM pg_settings WHERE name LIKE 'streamguard.role_max%' ORDER BY name;

-- a role that owns a stream cannot be dropped
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO h_plain;
SET ROLE h_plain;
SELECT streamguard.create_stream('h_owned', 1);
RESET ROLE;
SELECT try('DROP ROLE h_plain');
BEGIN;
REASSIGN OWNED BY h_plain TO CURRENT_USER;
SELECT owner FROM streamguard.streams WHERE stream = 'h_owned';
ROLLBACK;
DROP OWNED BY h_plain;
SELECT count(*) FROM streamguard.streams WHERE stream = 'h_owned';
DROP ROLE h_plain;

SELECT streamguard.drop_stream('h_src', force => true);
DROP TABLE h_sink;

-- Views without security_barrier: each shows every row to every role and hides what a role
-- may not see by masking columns (a condition of the caller's cannot see a masked value).
-- A view that filters ROWS by the caller's rights must be a security_barrier view, else a
-- cheap function of the caller's in a condition sees the rows first (the windows view did).
-- A new view lands here only after that question was asked.
SELECT c.relname FROM pg_catalog.pg_class c
WHERE c.relnamespace = 'streamguard'::regnamespace AND c.relkind = 'v'
  AND NOT coalesce(c.reloptions @> '{security_barrier=true}', false)
ORDER BY 1;
