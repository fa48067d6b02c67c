-- Created when streamguard has pipelines: waits (without holding a snapshot)
-- until a pipeline consumed n events; fails when the pipeline fails or after
-- timeout_s seconds.
CREATE PROCEDURE bench_wait_pipeline(stream text, pipeline text, n bigint, timeout_s int)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); done bigint; st text; err text;
BEGIN
    LOOP
        SELECT coalesce(sum(committed_seq), 0) INTO done FROM streamguard.consumers c
         WHERE c.stream = bench_wait_pipeline.stream AND c.consumer = 'pipeline:' || bench_wait_pipeline.pipeline;
        EXIT WHEN done >= n;
        SELECT p.state, p.last_error INTO st, err FROM streamguard.pipelines p
         WHERE p.pipeline = bench_wait_pipeline.pipeline;
        IF st = 'failed' THEN
            RAISE EXCEPTION 'pipeline % failed after % events: %', pipeline, done, err;
        END IF;
        IF clock_timestamp() - t0 > make_interval(secs => timeout_s) THEN
            RAISE EXCEPTION 'pipeline % consumed % of % events in % s (state %)', pipeline, done, n, timeout_s, st;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.1);
    END LOOP;
END $$;
