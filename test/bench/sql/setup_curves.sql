-- The curves benchmark's wake-up measurement, created once on its server.
-- bench_curves_wake appends one event at a time (ids first .. first + n - 1)
-- to a stream a pipeline copies into cv_wake_sink, records the append's xid
-- in cv_wake_x, and waits (committing, so it holds no snapshot) until the
-- event is in the sink before the next one; a pause of 50-100 ms before each
-- append lets the pipeline fall idle.  Latency = commit timestamp of the sink
-- row - commit timestamp of the append.
CREATE TABLE cv_wake_sink (ev int);
CREATE TABLE cv_wake_x (ev int PRIMARY KEY, x xid8);
CREATE PROCEDURE bench_curves_wake(stream text, first int, n int)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
    FOR e IN first .. first + n - 1 LOOP
        PERFORM pg_sleep(0.05 + random() * 0.05);
        COMMIT;
        PERFORM streamguard.append(stream, jsonb_build_object('i', e), 'k');
        INSERT INTO cv_wake_x VALUES (e, pg_current_xact_id());
        COMMIT;
        t0 := clock_timestamp();
        LOOP
            EXIT WHEN EXISTS (SELECT 1 FROM cv_wake_sink s WHERE s.ev = e);
            IF clock_timestamp() - t0 > interval '20 s' THEN
                RAISE EXCEPTION 'event % not in the sink after 20 s', e;
            END IF;
            COMMIT;
            PERFORM pg_sleep(0.001);
        END LOOP;
        COMMIT;
    END LOOP;
END $$;
