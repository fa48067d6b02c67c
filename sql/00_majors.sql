-- What newer PostgreSQL majors add, checked the same way on every major:
-- a pipeline worker's idle wait shows as wait event StreamguardPipelineIdle
-- on 17 and later ('Extension' before), and on 18 and later the library's
-- magic block names the module and its version (pg_get_loaded_modules).
SET client_min_messages = warning;
SELECT streamguard.create_stream('nm_src', 1);
CREATE TABLE nm_sink (n int);
SELECT streamguard.create_pipeline('nm_pipe', 'nm_src', 'INSERT INTO nm_sink SELECT 1 FROM batch');
SELECT count(*) FROM streamguard.append('nm_src', '{}');
SELECT wait_for($$(SELECT count(*) FROM nm_sink) = 1$$, 60);
-- (pg_stat_activity is read once per transaction: clear it on each try)
CREATE FUNCTION nm_idle_wait_event() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. 600 LOOP
		PERFORM pg_stat_clear_snapshot();
		IF EXISTS (SELECT 1 FROM pg_stat_activity
				   WHERE backend_type = 'streamguard pipeline' AND wait_event_type = 'Extension'
					 AND wait_event = CASE WHEN current_setting('server_version_num')::int >= 170000
										  THEN 'StreamguardPipelineIdle' ELSE 'Extension' END) THEN
			RETURN true;
		END IF;
		PERFORM pg_sleep(0.1);
	END LOOP;
	RETURN false;
END $$;
SELECT nm_idle_wait_event();
DROP FUNCTION nm_idle_wait_event();
CREATE FUNCTION nm_magic_ok() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE ok boolean;
BEGIN
	IF current_setting('server_version_num')::int < 180000 THEN
		RETURN true;	-- no names in the magic block before 18
	END IF;
	EXECUTE $q$SELECT bool_and(module_name = 'streamguard' AND version =
			(SELECT default_version FROM pg_available_extensions WHERE name = 'streamguard'))
		FROM pg_get_loaded_modules() WHERE file_name LIKE 'streamguard%'$q$ INTO ok;
	RETURN ok;
END $$;
SELECT nm_magic_ok();
DROP FUNCTION nm_magic_ok();
SELECT streamguard.drop_pipeline('nm_pipe');
SELECT streamguard.drop_stream('nm_src');
DROP TABLE nm_sink;
