-- Helpers of the PgQ drain contender (benchmark 3), created once per run:
-- one batch per call, one call per pgbench transaction.
CREATE FUNCTION bench_pgq_drain(q text, c text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE b bigint; n int;
BEGIN
    b := pgq.next_batch(q, c);
    IF b IS NULL THEN RETURN 0; END IF;
    SELECT count(*) INTO n FROM pgq.get_batch_events(b);
    PERFORM pgq.finish_batch(b);
    RETURN n;
END $$;
CREATE FUNCTION bench_pgq_drain_sink(q text, c text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE b bigint; n int;
BEGIN
    b := pgq.next_batch(q, c);
    IF b IS NULL THEN RETURN 0; END IF;
    INSERT INTO sink_pgq (partition, seq, key, payload) SELECT 0, ev_id, ev_extra1, ev_data::jsonb FROM pgq.get_batch_events(b);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pgq.finish_batch(b);
    RETURN n;
END $$;
