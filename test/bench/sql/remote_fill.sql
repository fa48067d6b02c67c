-- 5. remote: on the remote server, appends the events staged in rstage to a
-- stream, 1,000 per transaction in staging order, with their partitions (so
-- their seqs are the same as on the local stream).  Not timed.
CREATE OR REPLACE PROCEDURE bench_remote_fill(stream text, nb int)
LANGUAGE plpgsql AS $$
DECLARE b bigint;
BEGIN
    FOR b IN 0 .. nb - 1 LOOP
        PERFORM count(*) FROM streamguard.append_batch(stream,
            ARRAY(SELECT payload FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn),
            ARRAY(SELECT key FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn),
            partitions => ARRAY(SELECT partition FROM rstage WHERE rn > b * 1000 AND rn <= (b + 1) * 1000 ORDER BY rn));
        COMMIT;
    END LOOP;
END $$;
