-- Objects of the latency benchmark (4), created before its first repeat.
CREATE SEQUENCE bench_lat_id;
CREATE TABLE bench_lat_ctl (name text PRIMARY KEY, stop_at bigint);
-- (event id, commit time of its append) of every event stored in a stream's segments
CREATE FUNCTION bench_sg_events(stream text) RETURNS TABLE (ev_id bigint, ev_commit timestamptz)
LANGUAGE plpgsql AS $$
DECLARE sid int; sg int;
BEGIN
    SELECT s.id INTO sid FROM streamguard.stream s WHERE s.name = bench_sg_events.stream;
    FOR sg IN SELECT g.seg FROM streamguard.segment g WHERE g.stream_id = sid ORDER BY g.seg LOOP
        RETURN QUERY EXECUTE format('SELECT (payload->>''id'')::bigint, pg_xact_commit_timestamp(xmin) FROM streamguard_data.%I',
                                    's' || sid || '_' || sg);
    END LOOP;
END $$;
-- the same for a PgQ queue (its event tables)
CREATE FUNCTION bench_pgq_events(q text) RETURNS TABLE (ev_id bigint, ev_commit timestamptz)
LANGUAGE plpgsql AS $$
DECLARE pfx text;
BEGIN
    SELECT queue_data_pfx INTO pfx FROM pgq.queue WHERE queue_name = q;
    RETURN QUERY EXECUTE format('SELECT (ev_data::jsonb->>''id'')::bigint, pg_xact_commit_timestamp(xmin) FROM %s', pfx);
END $$;
-- PgQ consumer: one transaction per batch; sleeps poll_ms when there is no batch;
-- returns once it has delivered bench_lat_ctl.stop_at events
CREATE PROCEDURE bench_pgq_consume(q text, c text, poll_ms int, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE b bigint; n bigint; total bigint := 0; stop bigint; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        b := pgq.next_batch(q, c);
        IF b IS NOT NULL THEN
            INSERT INTO lat_sink_pgq (id, at)
                SELECT (ev_data::jsonb->>'id')::bigint, clock_timestamp() FROM pgq.get_batch_events(b);
            GET DIAGNOSTICS n = ROW_COUNT;
            total := total + n;
            PERFORM pgq.finish_batch(b);
            COMMIT;
        ELSE
            COMMIT;
            SELECT stop_at INTO stop FROM bench_lat_ctl WHERE name = c;
            EXIT WHEN stop IS NOT NULL AND total >= stop;
            IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
                RAISE EXCEPTION 'PgQ consumer: % events delivered, % expected, after % s', total, stop, timeout_s;
            END IF;
            PERFORM pg_sleep(poll_ms / 1000.0);
        END IF;
    END LOOP;
END $$;
-- naive poller: "id > last" on a plain table, position saved with the sink rows;
-- sleeps poll_ms when it finds nothing; returns after an empty poll that began
-- after the producers had finished (bench_lat_ctl.stop_at set)
CREATE PROCEDURE bench_naive_consume(poll_ms int, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE last bigint; m bigint; n bigint; stop bigint; stopping boolean := false; t0 timestamptz := clock_timestamp();
BEGIN
    LOOP
        SELECT seq INTO last FROM lat_raw_pos;
        WITH b AS (SELECT id, payload FROM lat_raw WHERE id > last ORDER BY id LIMIT 1000),
             i AS (INSERT INTO lat_sink_raw (id, at) SELECT (payload->>'id')::bigint, clock_timestamp() FROM b)
        SELECT max(id), count(*) INTO m, n FROM b;
        IF n > 0 THEN
            UPDATE lat_raw_pos SET seq = m;
            COMMIT;
        ELSE
            COMMIT;
            EXIT WHEN stopping;
            SELECT stop_at INTO stop FROM bench_lat_ctl WHERE name = 'naive';
            IF stop IS NOT NULL THEN stopping := true; CONTINUE; END IF;
            IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
                RAISE EXCEPTION 'naive poller still running after % s', timeout_s;
            END IF;
            PERFORM pg_sleep(poll_ms / 1000.0);
        END IF;
    END LOOP;
END $$;
