-- helpers of every regress file (pg_regress runs the files in order, in one
-- database; run a single file together with this one:
-- make installcheck REGRESS="00_helpers 07_hardening")
CREATE EXTENSION streamguard;
-- errors are shown as "SQLSTATE: message" so the code is checked too
CREATE FUNCTION try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- try, again while it loses a deadlock (40P01): a statement that locks
-- every object of the extension (DROP EXTENSION) can deadlock with the
-- database's own workers, which PostgreSQL resolves by failing one of them
CREATE FUNCTION try_retry(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
	FOR i IN 1 .. 50 LOOP
		r := try(cmd);
		EXIT WHEN r NOT LIKE '40P01:%';
		PERFORM pg_sleep(0.2);
	END LOOP;
	RETURN r;
END $$;
-- wait (bounded by the clock) until a condition holds; each check sees a
-- fresh snapshot.  The deadline is generous (a loaded machine: at load 15 a
-- pipeline's retries to a dead letter once took more than 30 s).
CREATE FUNCTION wait_for(cond text, seconds int DEFAULT 180) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	ok boolean;
	deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
	LOOP
		EXECUTE 'SELECT (' || cond || ')' INTO ok;
		IF ok THEN RETURN true; END IF;
		EXIT WHEN clock_timestamp() > deadline;
		PERFORM pg_sleep(0.05);
	END LOOP;
	RETURN false;
END $$;
